"""Activity options shared by the workflows: Temporal owns every retry."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError, ChildWorkflowError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from errands.errors import NON_RECOVERABLE


STORE_TIMEOUT = timedelta(seconds=30)
STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=30,
    non_retryable_error_types=["internal"],
)


def model_retry(max_attempts: int) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=60),
        maximum_attempts=max_attempts,
        non_retryable_error_types=list(NON_RECOVERABLE),
    )


def tool_retry(max_attempts: int) -> RetryPolicy:
    """A work-tool call: retried while its server cannot be reached or its worker died; its
    last attempt reports to the model instead of failing (activities/_tool_calls.py)."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=max_attempts,
        non_retryable_error_types=["internal"],
    )


HOLDER_PICKUP = timedelta(seconds=5)
"""How long the worker holding a stateful MCP session has to take a call sent to it before it
is presumed gone (killed, stopped) and the session opened again elsewhere."""


ArgT = TypeVar("ArgT")
OutT = TypeVar("OutT")


def model_step(
    method: Callable[[Any, ArgT], Awaitable[OutT]],
    arg: ArgT,
    *,
    timeout_seconds: float,
    heartbeat_seconds: float,
    max_attempts: int,
    task_queue: str | None,
    summary: str,
) -> Awaitable[OutT]:
    """A model step of the main agent or a branch: on the model's clock and queue, retried
    (transient errors) by Temporal, never past a non-recoverable one."""
    return workflow.execute_activity_method(
        method,
        arg,
        start_to_close_timeout=timedelta(seconds=timeout_seconds),
        heartbeat_timeout=timedelta(seconds=heartbeat_seconds),
        task_queue=task_queue,
        retry_policy=model_retry(max_attempts),
        summary=summary,
    )


def tool_run(
    method: Callable[[Any, ArgT], Awaitable[OutT]],
    arg: ArgT,
    *,
    timeout_seconds: float,
    heartbeat_seconds: float,
    max_attempts: int,
    summary: str,
    holder: str | None = None,
) -> Awaitable[OutT]:
    """A work-tool call of the main agent or a branch. The tool's own timeout fires first and
    is reported to the model; this one stops an attempt whose worker hangs past it. A cancelled
    workflow waits for the call to store its cancelled result, so its own clean-up never
    writes one while the tool still runs.

    ``holder``: the queue of the worker holding the call's stateful MCP session. The call has
    one attempt there and ``HOLDER_PICKUP`` for that worker to take it: a worker that is gone
    fails the call with a timeout, and the workflow moves the session (workflows/_sessions.py)."""
    if holder is not None:
        return workflow.execute_activity_method(
            method,
            arg,
            task_queue=holder,
            schedule_to_start_timeout=HOLDER_PICKUP,
            start_to_close_timeout=timedelta(seconds=timeout_seconds + 30),
            heartbeat_timeout=timedelta(seconds=heartbeat_seconds),
            retry_policy=RetryPolicy(maximum_attempts=1),
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=summary,
        )
    return workflow.execute_activity_method(
        method,
        arg,
        start_to_close_timeout=timedelta(seconds=timeout_seconds + 30),
        heartbeat_timeout=timedelta(seconds=heartbeat_seconds),
        retry_policy=tool_retry(max_attempts),
        cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        summary=summary,
    )


async def store_call(method: Callable[[Any, ArgT], Awaitable[OutT]], arg: ArgT) -> OutT:
    """A session-store activity: short, retried with backoff, never on a model's clock. A
    cancellation surfaces as one, so the workflow ends canceled rather than failed."""
    try:
        return await workflow.execute_local_activity_method(
            method, arg, start_to_close_timeout=STORE_TIMEOUT, retry_policy=STORE_RETRY
        )
    except ActivityError as error:
        raise_if_cancelled(error)
        raise


def raise_if_cancelled(error: BaseException) -> None:
    """An activity or child that ended because the task was canceled is not a failure to
    record: raise it on as a cancellation, so the workflow ends canceled rather than failed."""
    if isinstance(error, (ActivityError, ChildWorkflowError)) and isinstance(
        error.cause, CancelledError
    ):
        raise asyncio.CancelledError(str(error)) from error


def target_version_changed() -> bool:
    """Whether a newer worker deployment version than the one this run is pinned to is now the
    task queue's target (always False on an unversioned worker). Read from the workflow task's
    own record, so replay sees what the run saw."""
    return workflow.info().is_target_worker_deployment_version_changed()


def run_is_long(*, continue_as_new: bool, max_history_events: int) -> bool:
    """Whether this run should hand over to a fresh one: Temporal suggests it, or the history
    passed our own, far smaller, bound. Read from workflow info, so replay sees the same."""
    if not continue_as_new:
        return False
    info = workflow.info()
    return (
        info.is_continue_as_new_suggested()
        or info.get_current_history_length() >= max_history_events
    )
