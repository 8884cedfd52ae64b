"""The message queued on a task that becomes the session's next task once the task ends."""

from __future__ import annotations

from temporalio import workflow
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from errands.contracts import ids
    from errands.contracts.search import SESSION_MEMO, initial
    from errands.contracts.workflows import TaskInput, TaskState
    from workflows._search import session_value


async def start_queued(data: TaskInput, state: TaskState) -> str | None:
    """The first queued message becomes the session's next task (carrying the rest): its id,
    or None when nothing was queued."""
    if not state.queued:
        return None
    first, rest = state.queued[0], state.queued[1:]
    known = len(state.queued_ids) == len(state.queued)
    first_id = state.queued_ids[0] if known else None
    rest_ids = state.queued_ids[1:] if known else []
    next_id = ids.queued_task_id(data.task_id, state.messages)
    # The session id in the memo, as the client starts a task with encryption on: listing
    # the successor then reads it there, not from its history (memo is not replayed).
    session = workflow.memo_value(SESSION_MEMO, default=None)
    await workflow.start_child_workflow(
        "TaskWorkflow",
        data.model_copy(
            update={
                "task_id": next_id,
                "text": first,
                "carry": None,
                "queued": rest,
                "queued_ids": rest_ids,
                "queued_as": first_id,
            }
        ),
        id=next_id,
        parent_close_policy=ParentClosePolicy.ABANDON,
        search_attributes=(
            initial(session_value(data.session_id), data.owner) if data.search_attributes else None
        ),
        static_summary=f"queued after {data.task_id}",
        memo=None if session is None else {SESSION_MEMO: session},
    )
    state.queued, state.queued_ids = [], []
    return next_id
