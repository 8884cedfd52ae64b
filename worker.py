"""The errands worker: ``ErrandsPlugin`` applied to a worker on ``settings.task_queue``.

Run it with ``errands worker`` (or ``python worker.py``); it connects to ``TEMPORAL_ADDRESS``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import signal
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Plugin, Worker

from errands.client import connect
from errands.errors import ConfigError, ErrandsError
from errands.plugin import ErrandsPlugin, cache_workflow_bytecode
from errands.routing import ModelRouter
from errands.settings import Settings, load_settings
from errands.store import SessionStore
from errands.telemetry import configure_logging, runtime_with_metrics, tracing_interceptors

__all__ = ["build_worker", "cache_workflow_bytecode", "run_worker"]


def build_worker(
    client: Client,
    settings: Settings,
    *,
    store: SessionStore | None = None,
    router: ModelRouter | None = None,
    **worker_options: Any,
) -> Worker:
    """A worker for every errands workflow and activity on ``settings.task_queue``.

    A client that carries an ``ErrandsPlugin`` already lends it to the worker; otherwise one is
    added here, with ``store`` and ``router`` (each opened from ``settings`` when not given).
    """
    plugins: list[Plugin] = list(worker_options.pop("plugins", ()))
    if _carries_errands(client.config()["plugins"]):
        if store is not None or router is not None:
            raise ValueError(
                "the client already carries an ErrandsPlugin: give the store and router to "
                "that plugin, not to build_worker"
            )
    else:
        plugins.append(ErrandsPlugin(settings, store=store, router=router))
    return Worker(
        client,
        task_queue=settings.task_queue,
        plugins=plugins,
        activity_executor=concurrent.futures.ThreadPoolExecutor(max_workers=16),
        **worker_options,
    )


def _carries_errands(plugins: Sequence[object]) -> bool:
    return any(isinstance(p, ErrandsPlugin) for p in plugins)


async def run_worker(settings: Settings) -> None:
    """Poll ``settings.task_queue`` until SIGTERM or SIGINT, then drain running activities.

    Raises ``ConfigError`` for a setting errands cannot use and an ``Unavailable`` error
    (``TemporalUnreachable``, ``StoreUnavailable``) for a service that does not answer.
    """
    if not settings.temporal_address:
        raise ConfigError(
            "TEMPORAL_ADDRESS is not set; point it at a Temporal frontend "
            "(or run `errands dev` for the embedded stack)",
            setting="TEMPORAL_ADDRESS",
        )
    try:
        configure_logging(settings.log_level, json=settings.log_json)
    except ValueError as error:
        raise ConfigError(str(error), setting="ERRANDS_LOG_LEVEL") from None
    try:
        runtime = runtime_with_metrics(settings.metrics_bind) if settings.metrics_bind else None
    except ValueError as error:
        raise ConfigError(str(error), setting="ERRANDS_METRICS_BIND") from None
    client = await connect(
        settings.temporal_address,
        settings.temporal_namespace,
        runtime=runtime,
        interceptors=tracing_interceptors() if settings.otel else (),
    )
    # Opens the session store: a bad ERRANDS_DATABASE_URL fails here, before any polling.
    worker = build_worker(client, settings, graceful_shutdown_timeout=timedelta(seconds=60))
    # SIGTERM (a rolling upgrade, `docker stop`) drains running activities instead of dying.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        logging.getLogger("errands").info("worker polling %s", settings.task_queue)
        await stop.wait()


if __name__ == "__main__":
    try:
        asyncio.run(run_worker(load_settings()))
    except ErrandsError as error:
        raise SystemExit(f"errands worker: {error}") from None
