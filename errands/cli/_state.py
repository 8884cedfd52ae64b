"""A task's state as the CLI shows it: described, queried within a bound (a task whose worker
is gone says which task queue lacks one), followed until it ends."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from errands.cli._output import note, question_text
from errands.cli._stack import UsageError
from errands.picker import pick_answer
from errands.tasks import closed_task_state
from errands.workflow_io import TaskStatus
from workflows import _search as search


class TaskUnreachable(UsageError):
    """A running task's worker did not answer; the message says which task queue lacks one."""


LIVE = ("running", "waiting_for_user")
QUERY_TIMEOUT = timedelta(seconds=5)
"""How long a running task's worker has to answer a query before the command says why not."""


async def describe_task(client: Client, task_id: str) -> WorkflowExecutionDescription:
    try:
        description = await client.get_workflow_handle(task_id).describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise UsageError(
                f"no task {task_id!r} in namespace {client.namespace}; check the task id "
                "(`errands run … --detach` prints it)"
            ) from None
        raise UsageError(f"Temporal could not describe task {task_id!r}: {error.message}") from None
    if description.workflow_type != "TaskWorkflow":
        raise UsageError(
            f"{task_id!r} is a {description.workflow_type}, not a task; give a task id "
            "(task-<session>-<n>)"
        )
    return description


async def running_task(
    client: Client, task_id: str, consequence: str
) -> WorkflowExecutionDescription:
    description = await describe_task(client, task_id)
    if description.status != WorkflowExecutionStatus.RUNNING:
        ended = description.status.name.lower() if description.status else "closed"
        raise UsageError(
            f"task {task_id} has already ended ({ended}); {consequence}. "
            f"`errands status {task_id}` shows its result"
        )
    return description


async def task_state(client: Client, task_id: str) -> dict[str, Any]:
    description = await describe_task(client, task_id)
    if description.status == WorkflowExecutionStatus.RUNNING:
        try:
            status: TaskStatus = await query_task(client, description, "status", TaskStatus)
            return status.model_dump(mode="json")
        except TaskUnreachable:
            description = await describe_task(client, task_id)
            if description.status == WorkflowExecutionStatus.RUNNING:
                raise
            # It ended between the describe and the query: its result says how.
    return await closed_state(client, description)


async def query_task(
    client: Client,
    description: WorkflowExecutionDescription,
    name: str,
    result_type: type | None = None,
) -> Any:
    """A query of a running task, bounded: without a worker it would wait indefinitely."""
    handle = client.get_workflow_handle(description.id)
    try:
        return await handle.query(name, result_type=result_type, rpc_timeout=QUERY_TIMEOUT)
    except WorkflowQueryFailedError as error:
        raise TaskUnreachable(
            f"task {description.id} could not answer the {name!r} query ({error}); its "
            "worker's log says why"
        ) from None
    except RPCError as error:
        raise TaskUnreachable(await _why_unanswered(client, description, error.message)) from None


async def start_update(
    client: Client,
    description: WorkflowExecutionDescription,
    name: str,
    arg: Any,
    result_type: type,
) -> WorkflowUpdateHandle[Any]:
    """Start an update of a running task once its worker has accepted it, within the same bound
    as a query; its result then takes as long as the work does."""
    handle = client.get_workflow_handle(description.id)
    try:
        return await handle.start_update(
            name,
            arg,
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            result_type=result_type,
            rpc_timeout=QUERY_TIMEOUT,
        )
    except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError) as error:
        detail = error.message if isinstance(error, RPCError) else str(error)
        raise TaskUnreachable(await _why_unanswered(client, description, detail)) from None


async def _why_unanswered(
    client: Client, description: WorkflowExecutionDescription, detail: str
) -> str:
    queue = description.task_queue
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    try:
        polled = await client.workflow_service.describe_task_queue(request, timeout=QUERY_TIMEOUT)
    except RPCError:
        polled = None
    if polled is not None and not polled.pollers:
        return (
            f"no worker is polling task queue {queue}, so task {description.id} cannot report "
            f"its state: start one with `errands worker` (ERRANDS_TASK_QUEUE={queue}) or "
            "`errands dev`"
        )
    return (
        f"no worker on task queue {queue} answered about task {description.id} within "
        f"{QUERY_TIMEOUT.total_seconds():g} s ({detail}); check that `errands worker` "
        "is running there and what its log says"
    )


async def closed_state(client: Client, description: WorkflowExecutionDescription) -> dict[str, Any]:
    session_id = description.typed_search_attributes.get(search.SESSION)
    return await closed_task_state(client, description.id, session_id=session_id)


async def wait_for(
    client: Client, task_id: str, *, timeout: float | None, progress: bool
) -> dict[str, Any]:
    interactive = progress and sys.stdin.isatty() and sys.stdout.isatty()

    async def follow() -> dict[str, Any]:
        last_phase, shown_question, warned = "", None, False
        while True:
            try:
                state = await task_state(client, task_id)
            except TaskUnreachable as error:
                if not warned:
                    note(f"errands: {error}. Still waiting.")
                    warned = True
                await asyncio.sleep(1)
                continue
            if state["status"] not in LIVE:
                return state
            if progress and state.get("phase") and state["phase"] != last_phase:
                last_phase = state["phase"]
                note(f"  … {last_phase}")
            pending = state.get("pending_question")
            if pending and interactive:
                await _answer_interactively(client, task_id, pending)
            elif pending and pending["id"] != shown_question:
                shown_question = pending["id"]
                note(question_text(task_id, pending) + "\n(still waiting for the answer)")
            await asyncio.sleep(0.3)

    return await asyncio.wait_for(follow(), timeout)


async def _answer_interactively(client: Client, task_id: str, pending: dict[str, Any]) -> None:
    """Show the pending question as a picker on this terminal and send the answer."""
    payload = await asyncio.to_thread(pick_answer, pending)
    try:
        await client.get_workflow_handle(task_id).execute_update("answer_question", payload)
    except WorkflowUpdateFailedError as error:
        reason = error.cause.message if isinstance(error.cause, ApplicationError) else error.cause
        note(f"errands: answer rejected: {reason}")
