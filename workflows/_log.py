"""Events of the log (``errands.contracts.events``) that only a workflow sees: a question put to
the user and its answer, the task's failure or cancellation. Activities write every other event
as they do their work; these go through the ``record_event`` store activity, under a
deterministic key, so a replayed or retried write changes nothing."""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities import SessionActivities
    from errands.contracts.events import EventType, NewEvent
    from workflows._options import store_call


async def log_event(
    task_id: str, key: str, type_: EventType, cause: str | None, **data: Any
) -> None:
    """Write one event of the task's log once. A store that cannot take it is logged on the
    worker and the task carries on: its work matters more than its log."""
    event = NewEvent(task_id=task_id, key=key, type=type_, cause=cause, data=data)
    try:
        await store_call(SessionActivities.record_event, event)
    except ActivityError as error:
        workflow.logger.warning("task %s: its %s event was not logged: %s", task_id, key, error)
