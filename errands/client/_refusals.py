"""Temporal's answers that are not results, as ``errands.errors``: one place reads them."""

from __future__ import annotations

from datetime import timedelta

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionDescription, WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError, TerminatedError
from temporalio.exceptions import TimeoutError as WorkflowTimeoutError
from temporalio.service import RPCError, RPCStatusCode

from errands.client._access import no_task
from errands.contracts.workflows import TaskStatusName
from errands.errors import (
    Conflict,
    FailureKind,
    InvalidRequest,
    NoWorker,
    TemporalUnreachable,
    failure_kind,
)


def refusal(error: RPCError, task_id: str, namespace: str) -> Exception:
    """Temporal's refusal of a call about ``task_id``."""
    if error.status == RPCStatusCode.NOT_FOUND:
        return no_task(task_id, namespace)
    if error.status == RPCStatusCode.INVALID_ARGUMENT:
        return InvalidRequest(f"Temporal rejected {task_id!r}: {error.message}")
    if error.status == RPCStatusCode.ALREADY_EXISTS:
        return Conflict(f"{task_id!r} already exists: {error.message}")
    return TemporalUnreachable(f"Temporal could not be reached about {task_id!r}: {error.message}")


async def polled(temporal: TemporalClient, queue: str, timeout: float) -> bool | None:
    """Whether a worker has polled workflow task queue ``queue`` lately (a worker that died a
    minute ago still counts); None when Temporal cannot say."""
    request = DescribeTaskQueueRequest(
        namespace=temporal.namespace,
        task_queue=TaskQueue(name=queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    try:
        found = await temporal.workflow_service.describe_task_queue(
            request, timeout=timedelta(seconds=timeout)
        )
    except RPCError:
        return None
    return bool(found.pollers)


async def no_worker(
    temporal: TemporalClient,
    description: WorkflowExecutionDescription,
    detail: str,
    timeout: float,
) -> NoWorker:
    """Why a running task's worker did not answer within ``timeout`` seconds: no worker polls
    its task queue, or one does and did not answer."""
    queue = description.task_queue
    if await polled(temporal, queue, timeout) is False:
        message = (
            f"no worker on task queue {queue} took up task {description.id} within "
            f"{timeout:g} s: no worker is polling task queue {queue}; start one with "
            f"`errands worker` (ERRANDS_TASK_QUEUE={queue}) or `errands dev`"
        )
    else:
        message = (
            f"no worker on task queue {queue} answered about task {description.id} within "
            f"{timeout:g} s ({detail}); check that `errands worker` is running there and what "
            "its log says"
        )
    return NoWorker(message, task_queue=queue)


def innermost(error: BaseException) -> str:
    """The innermost cause's message: what the workflow or the model said, not the wrapping."""
    cause = _innermost_cause(error)
    return cause.message if isinstance(cause, ApplicationError) else str(cause)


def kind_of(error: BaseException) -> FailureKind:
    cause = _innermost_cause(error)
    return failure_kind(cause.type if isinstance(cause, ApplicationError) else "internal")


def ending(error: WorkflowFailureError) -> tuple[TaskStatusName, FailureKind, str]:
    """Status, failure kind and message of a task that ended without a result."""
    cause = error.cause
    if isinstance(cause, CancelledError):
        return "canceled", "canceled", str(cause) or "canceled"
    if isinstance(cause, TerminatedError):
        return "failed", "terminated", f"terminated by an operator: {cause}"
    if isinstance(cause, WorkflowTimeoutError):
        return "failed", "timed_out", f"the task's workflow timed out: {cause}"
    return "failed", "internal", str(cause)


def _innermost_cause(error: BaseException) -> BaseException:
    cause = error
    while getattr(cause, "cause", None) is not None:
        cause = cause.cause  # type: ignore[attr-defined]
    return cause
