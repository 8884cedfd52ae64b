"""Writing the event log (``errands.contracts.events``) from activities: one call per event, each
under a deterministic key so a retried or replayed activity writes nothing twice. Blocking."""

from __future__ import annotations

from typing import Any

from errands.adapters.store import SessionStore
from errands.contracts.events import COMMON, EventType, NewEvent, cut

MAIN = "main"


def record(
    store: SessionStore,
    task_id: str,
    key: str,
    type_: EventType,
    cause: str | None = None,
    **data: Any,
) -> None:
    """Write one event of ``task_id`` once (an empty task id, from an older caller: nothing)."""
    if task_id:
        store.append_events([event(task_id, key, type_, cause, **data)])


def event(
    task_id: str, key: str, type_: EventType, cause: str | None = None, **data: Any
) -> NewEvent:
    """One event to write (``SessionStore.append_events`` writes several in one go)."""
    assert not set(data) & set(COMMON), f"an event field may not be named {sorted(COMMON)}"
    return NewEvent(task_id=task_id, key=key, type=type_, cause=cause, data=data)


def branch_of(thread_id: str) -> str:
    """A branch's thread id (``{task workflow}/r{round}/b{ordinal}``) as events name it:
    ``r{round}/b{ordinal}``."""
    return "/".join(thread_id.rsplit("/", 2)[-2:])


def preview(text: str) -> str:
    return cut(text, 400)
