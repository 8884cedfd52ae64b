"""The errands worker: composes the store, the model router, the activities and the workflows.

Run it with ``errands worker`` (or ``python worker.py``); it connects to ``TEMPORAL_ADDRESS``.
"""

from __future__ import annotations

import asyncio
import compileall
import concurrent.futures
import logging
import signal
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

import workflows
from activities import ConsultActivities, ModelActivities, SessionActivities
from errands.client import TemporalUnreachable, connect
from errands.routing import ModelRouter
from errands.settings import Settings, load_settings
from errands.store import SessionStore, StoreUnavailable, open_store
from errands.subtask_types import SubtaskType, load_types
from errands.telemetry import (
    LogContextInterceptor,
    configure_logging,
    runtime_with_metrics,
    tracing_interceptors,
)
from workflows import SideQuestionWorkflow, SubtaskWorkflow, TaskWorkflow

WORKFLOWS = [TaskWorkflow, SubtaskWorkflow, SideQuestionWorkflow]


def build_worker(
    client: Client,
    settings: Settings,
    *,
    store: SessionStore | None = None,
    router: ModelRouter | None = None,
    **worker_options: object,
) -> Worker:
    """A worker for every errands workflow and activity on ``settings.task_queue``."""
    cache_workflow_bytecode()
    store = store or open_store(settings.session_database_url())
    router = router or ModelRouter(settings)
    return Worker(
        client,
        task_queue=settings.task_queue,
        workflows=WORKFLOWS,
        activities=build_activities(store, router, load_types(settings.subtask_types)),
        activity_executor=concurrent.futures.ThreadPoolExecutor(max_workers=16),
        interceptors=[LogContextInterceptor()],
        **worker_options,  # type: ignore[arg-type]
    )


def cache_workflow_bytecode() -> None:
    """Write the workflow modules' bytecode if it is not cached yet.

    The sandbox imports a workflow's module afresh for every run it starts, replays included.
    Without cached bytecode (``PYTHONDONTWRITEBYTECODE``, common in containers and CI) every
    one of those imports compiles the source again: measured, a branch's run cost 12.5 ms of CPU
    to start instead of 5.3. A read-only install is left as it is; pip compiled it when it
    installed it.
    """
    compileall.compile_dir(Path(workflows.__file__).parent, maxlevels=0, quiet=2)


def build_activities(
    store: SessionStore, router: ModelRouter, types: dict[str, SubtaskType]
) -> list[Callable[..., Any]]:
    session = SessionActivities(store, types)
    models = ModelActivities(store, router, types)
    consult = ConsultActivities(store, router, types)
    return [
        session.open_task,
        session.prepare_round,
        session.append_ack,
        session.append_reply,
        session.record_branch,
        session.deterministic_join,
        session.recall_decisions,
        session.remember_decision,
        models.round_step,
        models.open_branch,
        models.branch_step,
        models.run_branch_tool,
        consult.consult_advisor,
        consult.answer_side_question,
    ]


class WorkerSetupError(RuntimeError):
    """The worker cannot start as configured; the message names the setting to fix."""


async def run_worker(settings: Settings) -> None:
    if not settings.temporal_address:
        raise WorkerSetupError(
            "TEMPORAL_ADDRESS is not set; point it at a Temporal frontend "
            "(or run `errands dev` for the embedded stack)"
        )
    configure_logging(settings.log_level, json=settings.log_json)
    try:
        client = await connect(
            settings.temporal_address,
            settings.temporal_namespace,
            runtime=runtime_with_metrics(settings.metrics_bind) if settings.metrics_bind else None,
            interceptors=tracing_interceptors() if settings.otel else (),
        )
    except TemporalUnreachable as error:
        raise WorkerSetupError(str(error)) from None
    try:
        store = open_store(settings.session_database_url())
    except ValueError as error:
        raise WorkerSetupError(f"{error}; check ERRANDS_DATABASE_URL") from None
    except StoreUnavailable as error:
        raise WorkerSetupError(str(error)) from None
    # SIGTERM (a rolling upgrade, `docker stop`) drains running activities instead of dying.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with build_worker(
            client, settings, store=store, graceful_shutdown_timeout=timedelta(seconds=60)
        ):
            logging.getLogger("errands").info("worker polling %s", settings.task_queue)
            await stop.wait()
    finally:
        store.close()


if __name__ == "__main__":
    try:
        asyncio.run(run_worker(load_settings()))
    except WorkerSetupError as error:
        raise SystemExit(f"errands worker: {error}") from None
