"""A message queued on a task that has ended: it becomes the session's next task at once.

A queued message waits in the task until the task ends, then starts the next one. Sent as the
task ends (or just after), the same message would be refused, and a user who typed
``errands say TASK TEXT --queue`` a moment too late loses it. So the client, under every
frontend, finishes the job the task could not:

- the ended task had started a queued task already: the message is queued behind that one;
- else the task's own input (models, settings, prices) starts the next task, with the message
  as its text, under one id derived from the ended task's (``ids.queued_after_end_task_id``);
  a second message racing the first finds that task started and is queued behind it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio.client import WorkflowExecutionDescription
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from errands.client._quotas import quota_checked
from errands.client._refusals import refusal
from errands.client._sessions import start_memo
from errands.client._task_calls import TASK_WORKFLOW
from errands.contracts import ids, search
from errands.contracts.workflows import MessageReceipt, TaskInput
from errands.errors import Unavailable

if TYPE_CHECKING:
    from errands.client._client import Client

ENDED = ("replied", "failed", "canceled")
"""The statuses of a task that is ending: it takes no more messages."""


async def start_next(
    client: Client, description: WorkflowExecutionDescription, text: str
) -> MessageReceipt:
    """Make ``text`` the session's next task after the ended task ``description``."""
    task_id = description.id
    ended = await client.task(task_id).wait()
    if ended.next_task:
        return await client.task(ended.next_task).say(text, mode="queue")
    data = await _last_input(client, task_id)
    next_id = ids.queued_after_end_task_id(task_id)
    data = data.model_copy(update={"task_id": next_id, "text": text, "carry": None, "queued": []})
    # A start like any other: its sender's quotas, and the start recorded for them. Nothing
    # in the block starts again (the lock is not re-entrant): a lost race is followed after it.
    async with quota_checked(client, client.acting):
        try:
            await client.temporal.start_workflow(
                TASK_WORKFLOW,
                data,
                id=next_id,
                task_queue=description.task_queue,
                search_attributes=(
                    search.initial(client.session_tags.written(data.session_id), data.owner)
                    if data.search_attributes
                    else None
                ),
                memo=start_memo(client.session_tags, data.session_id),
                static_summary=f"queued after {task_id}",
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            )
        except WorkflowAlreadyStartedError:
            behind = True
        except RPCError as error:
            raise refusal(error, next_id, client.namespace) from None
        else:
            behind = False
            await client.record_start(data)
    if behind:
        # Another message queued after the end got there first: this one goes behind it.
        return await client.task(next_id).say(text, mode="queue")
    return MessageReceipt(
        message_id=ids.user_message_id(next_id), mode="queue", status="started", task_id=next_id
    )


async def _last_input(client: Client, task_id: str) -> TaskInput:
    """The input of the task's latest run (a continued run's carries the same settings)."""
    handle = client.temporal.get_workflow_handle(task_id)
    async for event in handle.fetch_history_events():
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        [data] = await client.temporal.data_converter.decode(payloads, [TaskInput])
        assert isinstance(data, TaskInput)
        return data
    raise Unavailable(f"task {task_id} has no history to start its session's next task from")
