"""Building errands' workers: ``ErrandsPlugin`` applied to a worker on ``settings.task_queue``,
the model-queue workers beside it, and the long-running worker process (``errands worker``).

With ``errands.plugin`` this is the composition layer: the only modules of the library that
import ``workflows`` and ``activities`` (through the plugin)."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Plugin, Worker

from errands.adapters.connection import resolve
from errands.adapters.routing import ModelRouter
from errands.adapters.store import SessionStore, open_store
from errands.adapters.telemetry import configure_logging, runtime_with_metrics, tracing_interceptors
from errands.client import connect
from errands.client._upgrade import routed_builds
from errands.errors import ConfigError
from errands.plugin import ErrandsPlugin, McpTools, cache_workflow_bytecode, worker_deployment
from errands.settings import Settings

__all__ = ["build_worker", "cache_workflow_bytecode", "run_worker", "running_workers"]

HEARTBEAT_THROTTLE = timedelta(seconds=2)
"""At most this long between the heartbeats an activity sends the server: a cancellation reaches
a running model call within about this (the SDK's default, 0.8 x the heartbeat timeout, would
be 24 s)."""
ROUTING_CHECK_SECONDS = 10.0
"""How long a versioned worker waits for Temporal to describe its deployment, once, at start."""


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
    if _carries_errands([*client.config()["plugins"], *plugins]):
        if store is not None or router is not None:
            raise ValueError(
                "the client already carries an ErrandsPlugin: give the store and router to "
                "that plugin, not to build_worker"
            )
    else:
        plugins.append(ErrandsPlugin(settings, store=store, router=router))
    worker_options.setdefault("max_heartbeat_throttle_interval", HEARTBEAT_THROTTLE)
    return Worker(
        client,
        task_queue=settings.task_queue,
        plugins=plugins,
        **worker_options,
    )


def build_model_queue_workers(
    client: Client,
    plugin: ErrandsPlugin,
    *,
    store: SessionStore,
    router: ModelRouter,
    mcp_tools: McpTools | None = None,
) -> list[Worker]:
    """With ``ERRANDS_MODEL_TASK_QUEUE``: a worker per model task queue, polling only the model
    activities (wired by ``plugin``, as on every other worker: the same types, tools and MCP
    servers), at the queue's rate (``queue_rate`` of ``ERRANDS_PROVIDER_LIMITS``), which
    Temporal holds across every worker that polls it. Empty when the setting is unset."""
    queues = plugin.settings.model_task_queues()
    if not queues:
        return []
    calls = plugin.model_call_activities(store, router, mcp_tools)
    return [
        Worker(
            client,
            task_queue=queue,
            activities=calls,
            max_task_queue_activities_per_second=rate,
            max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
            # In the task's deployment version too: a pinned task's model calls go to the
            # model workers of its own version.
            deployment_config=worker_deployment(plugin.settings),
        )
        for queue, rate in queues.items()
    ]


@asynccontextmanager
async def running_workers(
    client: Client, settings: Settings, *, store: SessionStore | None = None, **options: Any
) -> AsyncIterator[Worker]:
    """errands' worker on ``settings.task_queue`` (and, with ``ERRANDS_MODEL_TASK_QUEUE``, the
    model-queue workers beside it), running for the block; yields the main one."""
    if not settings.model_task_queues():
        async with build_worker(client, settings, store=store, **options) as worker:
            settle_heap()
            yield worker
        return
    own_store = store is None
    store = store if store is not None else open_store(settings.session_database_url())
    router = ModelRouter(settings)
    plugin = ErrandsPlugin(settings, store=store, router=router)
    mcp = plugin.mcp_tools(store)  # the model workers' listings: one pool for them all
    try:
        async with AsyncExitStack() as stack:
            main = await stack.enter_async_context(
                build_worker(client, settings, plugins=[plugin], **options)
            )
            extras = build_model_queue_workers(
                client, plugin, store=store, router=router, mcp_tools=mcp
            )
            for extra in extras:
                await stack.enter_async_context(extra)
            settle_heap()
            yield main
    finally:
        await mcp.aclose()
        await router.aclose()
        if own_store:
            store.close()


def settle_heap() -> None:
    """Take what the process holds once its workers run (the SDK, the providers' clients, the
    workflows' modules: about 300,000 objects) out of the garbage collector's way, so a full
    collection scans only what tasks made since. Measured on B4's 32-branch task, with the
    worker in the benchmark's process: a full collection about every 20 tasks took 118 ms
    (5.9 ms a task), none with this."""
    gc.collect()
    gc.freeze()


async def warn_unless_routed(client: Client, settings: Settings) -> None:
    """One warning when this versioned worker's build is neither its deployment's current nor
    its ramping version: Temporal sends it no new task, only those already pinned to it. The
    worker runs on either way; a deployment Temporal cannot describe (none of its versions made
    current yet, or Temporal not answering) gets the same warning."""
    name, build = settings.deployment_name, settings.build_id
    if name is None or build is None:
        return
    try:
        routed = await asyncio.wait_for(routed_builds(client, name), ROUTING_CHECK_SECONDS)
    except Exception:  # noqa: BLE001 - a check that informs: it never stops the worker
        routed = (None, None)
    if build in routed:
        return
    logging.getLogger("errands").warning(
        "build %s is not the current or ramping version of worker deployment %s, so no new "
        "task comes to this worker (tasks already pinned to it still run here); make it "
        "current with: temporal worker deployment set-current-version --deployment-name %s "
        "--build-id %s",
        build,
        name,
        name,
        build,
    )


def _carries_errands(plugins: Sequence[object]) -> bool:
    return any(isinstance(p, ErrandsPlugin) for p in plugins)


async def run_worker(settings: Settings) -> None:
    """Poll ``settings.task_queue`` until SIGTERM or SIGINT, then drain running activities.

    Raises ``ConfigError`` for a setting errands cannot use and an ``Unavailable`` error
    (``TemporalUnreachable``, ``StoreUnavailable``) for a service that does not answer.
    """
    if not resolve(settings).configured:
        raise ConfigError(
            "no Temporal server is configured: set TEMPORAL_ADDRESS (or a temporal.toml profile "
            "with TEMPORAL_PROFILE, or --address) to a Temporal frontend, or run `errands dev` "
            "for the embedded stack",
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
        settings,
        runtime=runtime,
        interceptors=tracing_interceptors() if settings.otel else (),
    )
    # SIGTERM (a rolling upgrade, `docker stop`) drains running activities instead of dying.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Opens the session store: a bad ERRANDS_DATABASE_URL fails here, before any polling.
    async with running_workers(client, settings, graceful_shutdown_timeout=timedelta(seconds=60)):
        polled = [settings.task_queue, *settings.model_task_queues()]
        logging.getLogger("errands").info("worker polling %s", ", ".join(polled))
        await warn_unless_routed(client, settings)
        await stop.wait()
