"""The session store's contract: an append-only, per-session ordered list of messages, and the
event log of each task (``errands.contracts.events``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from errands.contracts.events import NewEvent, StoredEvent
from errands.contracts.messages import NewMessage, StoredMessage


class SessionStore(Protocol):
    """Every method is synchronous and thread-safe; activities call them from worker threads.

    ``append_once`` is the only write to messages. It inserts the row when its id is absent and
    always returns the row as stored, so a retried write never duplicates or changes a message
    a user may already have seen. ``seq`` is assigned per session (1, 2, 3, …) in commit order
    and never changes.
    """

    def append_once(self, message: NewMessage, events: Sequence[NewEvent] = ()) -> StoredMessage:
        """Insert ``message`` unless its id is taken, with ``events`` (the events it makes, as
        ``append_events`` writes them) in the same transaction; the row as stored."""
        ...

    def get(self, message_id: str) -> StoredMessage | None: ...

    def list_session(
        self, session_id: str, *, upto_seq: int | None = None, after_seq: int = 0
    ) -> list[StoredMessage]:
        """The session's rows in ``seq`` order: those with ``after_seq < seq``, and
        ``seq <= upto_seq`` when given."""
        ...

    def list_kind(self, session_id: str, kind: str) -> list[StoredMessage]:
        """The session's rows of one ``kind``, in ``seq`` order (an index finds them)."""
        ...

    def list_by_prefix(self, session_id: str, id_prefix: str) -> list[StoredMessage]:
        """The session's rows whose id starts with ``id_prefix``, in ``seq`` order."""
        ...

    def last_seq(self, session_id: str) -> int:
        """The highest ``seq`` of the session, 0 when it is empty."""
        ...

    def put_decision(self, session_id: str, decision_id: str, record: dict[str, Any]) -> None:
        """Insert or overwrite one remembered decision of the session."""
        ...

    def list_decisions(self, session_id: str) -> dict[str, dict[str, Any]]:
        """The session's decisions by id."""
        ...

    def append_event(self, event: NewEvent) -> StoredEvent:
        """Write ``event`` once: the next ``seq`` of its task, unless an event of that task
        already has its ``key`` (then that one is returned, unchanged)."""
        ...

    def append_events(self, events: Sequence[NewEvent]) -> None:
        """Write each of ``events`` once, in order, in one transaction: the fast path of the
        activities, which need no row back (an event whose key its task has is skipped)."""
        ...

    def list_events(
        self, task_id: str, *, after_seq: int = 0, limit: int = 1000
    ) -> list[StoredEvent]:
        """The task's events with ``after_seq < seq``, in ``seq`` order, at most ``limit``."""
        ...

    def close(self) -> None: ...
