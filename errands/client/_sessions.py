"""Which session a task belongs to, and how a session's tasks are searched.

Without encryption ``ErrandsSession`` holds the session id, and that is the whole story. With
encryption it holds a keyed digest (``SessionTags``): a search asks for every digest the
configured keys make (and the id itself, for tasks started before encryption was on), and the
id is read back from the task's memo, which is encrypted like any payload (a queued task its
workflow starts carries it too); a task started without that memo (a queued task started before
its workflow passed the memo on) is asked through its start input.
"""

from __future__ import annotations

from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecution
from temporalio.service import RPCError

from errands.adapters.encryption import SessionTags
from errands.contracts import search
from errands.contracts.workflows import TaskInput


def session_query(tags: SessionTags, session_id: str) -> str:
    """The visibility clause that finds the tasks of ``session_id`` (a checked id)."""
    return search.session_filter(tags.searched(session_id))


def start_memo(tags: SessionTags, session_id: str) -> dict[str, str] | None:
    """The memo a new task starts with: the session id, where the attribute cannot show it."""
    return {search.SESSION_MEMO: session_id} if tags.keys else None


async def session_of(
    temporal: TemporalClient, execution: WorkflowExecution, tags: SessionTags
) -> str | None:
    """The session id of the task ``execution`` (a description or a listed execution); None
    when it has none, or when nothing this client can decrypt names it."""
    value = execution.typed_search_attributes.get(search.SESSION)
    if value is None or not tags.is_tag(value):
        return value
    try:
        memo = await execution.memo_value(search.SESSION_MEMO, None, type_hint=str)
        if isinstance(memo, str):
            return memo
        handle = temporal.get_workflow_handle(execution.id, run_id=execution.run_id)
        async for event in handle.fetch_history_events():
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            [data] = await temporal.data_converter.decode(payloads, [TaskInput])
            return data.session_id if isinstance(data, TaskInput) else None
    except (ValueError, RPCError):  # a key this client does not hold; a task deleted meanwhile
        return None
    return None
