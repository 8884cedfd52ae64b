"""NotificationWorkflow: one notice of a task's change of state (SPEC §11), delivered to each of
its targets that wants it, all at once.

A task starts one per notice and never waits for it (an abandoned child): a delivery neither
blocks nor fails its task. Each delivery is one ``deliver_notification`` activity retried by
Temporal with backoff until the notice's retry window (``retry_seconds``, a day by default)
closes; the activity records what it came to, and when the window closes first this workflow
records why it gave up (``record_notification_failed``). The workflow itself never fails because
of a delivery: it returns what became of each target.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

with workflow.unsafe.imports_passed_through():
    from activities._notify import RETRY_TYPE, Delivered, NotifyActivities
    from errands.contracts.notifications import DeliverInput, DeliveryFailed, Notice, NotifyTarget
    from workflows._options import STORE_RETRY, STORE_TIMEOUT, raise_if_cancelled

ATTEMPT_TIMEOUT = timedelta(seconds=30)
"""One attempt: the sender gives up on a receiver after 10 s; this stops a worker that hangs."""
DELIVERY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=10),
    maximum_attempts=0,  # unlimited: the notice's retry window (schedule-to-close) ends them
)


@workflow.defn(name="NotificationWorkflow")
class NotificationWorkflow:
    @workflow.run
    async def run(self, notice: Notice) -> dict[str, Delivered]:
        """What became of the notice at each target that wants it, by reference."""
        wanted: dict[str, NotifyTarget] = {}
        for target in notice.targets:
            if notice.event in target.events:
                wanted.setdefault(target.ref, target)
        outcomes = await asyncio.gather(*(deliver(notice, t) for t in wanted.values()))
        return dict(zip(wanted, outcomes, strict=True))


async def deliver(notice: Notice, target: NotifyTarget) -> Delivered:
    """Deliver ``notice`` to ``target`` within its retry window, or record why not."""
    try:
        return await workflow.execute_activity_method(
            NotifyActivities.deliver_notification,
            DeliverInput(notice=notice, target=target),
            schedule_to_close_timeout=timedelta(seconds=notice.retry_seconds),
            start_to_close_timeout=ATTEMPT_TIMEOUT,
            retry_policy=DELIVERY_RETRY,
            summary=f"notify {target.ref} of {notice.event}",
        )
    except ActivityError as error:
        raise_if_cancelled(error)
        detail = why_it_stopped(error, notice.retry_seconds)
        attempts = attempts_made(error)
    try:
        await workflow.execute_activity_method(
            NotifyActivities.record_notification_failed,
            DeliveryFailed(notice=notice, target=target, detail=detail, attempts=attempts),
            start_to_close_timeout=STORE_TIMEOUT,
            retry_policy=STORE_RETRY,
            summary=f"record that {target.ref} was not notified",
        )
    except ActivityError as error:
        raise_if_cancelled(error)
        workflow.logger.warning(
            "task %s: the failed notification %s to %s was not recorded: %s",
            notice.task_id,
            notice.key,
            target.ref,
            error,
        )
    return "failed"


def why_it_stopped(error: ActivityError, window_seconds: float) -> str:
    """One line: the retry window closed (or retries stopped otherwise), and the last attempt's
    outcome as the activity reported it."""
    last = last_attempt(error)
    closed = error.retry_state == RetryState.TIMEOUT or isinstance(error.cause, TimeoutError)
    if closed:
        return f"gave up after {span(window_seconds)}: last attempt {last}"
    return f"stopped retrying: last attempt {last}"


def last_attempt(error: ActivityError) -> str:
    """The outcome of the last attempt, from the failure's chain of causes."""
    cause: BaseException | None = error.cause
    while cause is not None:
        if isinstance(cause, ApplicationError):
            if cause.type == RETRY_TYPE and cause.details and isinstance(cause.details[0], str):
                return cause.details[0]
            return cause.message
        if isinstance(cause, TimeoutError) and cause.type == TimeoutType.START_TO_CLOSE:
            return f"did not finish within {ATTEMPT_TIMEOUT.seconds} s (its worker hung or died)"
        cause = cause.__cause__
    if isinstance(error.cause, FailureError):
        return f"never finished ({error.cause.message})"
    return "never finished"


def attempts_made(error: ActivityError) -> int | None:
    """How many attempts the last one said it was (its failure's second detail)."""
    cause: BaseException | None = error.cause
    while cause is not None:
        if isinstance(cause, ApplicationError) and cause.type == RETRY_TYPE:
            number = cause.details[1] if len(cause.details) > 1 else None
            return number if isinstance(number, int) else None
        cause = cause.__cause__
    return None


def span(seconds: float) -> str:
    """``86400`` as ``24 h``, ``600`` as ``10 min``, ``3`` as ``3 s``."""
    for size, unit in ((3600, "h"), (60, "min")):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"
