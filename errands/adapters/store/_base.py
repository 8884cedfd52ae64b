"""The session store's contract: an append-only, per-session ordered list of messages, and the
event log of each task (``errands.contracts.events``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from errands.contracts.events import NewEvent, StoredEvent
from errands.contracts.messages import NewMessage, StoredMessage
from errands.contracts.principals import Role


@dataclass(frozen=True)
class PrincipalRecord:
    """An errands API key as the store keeps it (``errands principals``): never the token, only
    its SHA-256; ``key_id`` is the token's public prefix, by which it is found and revoked."""

    name: str
    """The principal's id (what tasks are owned by and events name)."""
    role: Role
    key_id: str
    token_sha256: str
    """Hex SHA-256 of the whole token."""
    created_at: datetime
    revoked_at: datetime | None = None


@dataclass(frozen=True)
class TaskStart:
    """A task started by a principal, as quotas count them."""

    task_id: str
    owner: str
    session_id: str
    started_at: datetime


class SessionStore(Protocol):
    """Every method is synchronous and thread-safe; activities call them through
    ``store_work`` (on a thread, or at once on the event loop where the store allows it).

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

    # -- principals, ownership, quotas (SPEC §10) ---------------------------------------------

    def add_principal(self, record: PrincipalRecord) -> None:
        """Store a new API key. ``Conflict`` when its ``key_id`` is taken."""
        ...

    def list_principals(self) -> list[PrincipalRecord]:
        """Every API key, revoked ones included, oldest first."""
        ...

    def find_key(self, key_id: str) -> PrincipalRecord | None:
        """The API key with ``key_id`` (revoked or not), or None."""
        ...

    def revoke_principal(self, name_or_key_id: str, at: datetime) -> list[PrincipalRecord]:
        """Revoke the key ``name_or_key_id`` names (a key id), or every unrevoked key of the
        principal it names; the keys revoked now (none: nothing matched or all were revoked)."""
        ...

    def claim_session(self, session_id: str, owner: str) -> str:
        """Make ``owner`` the owner of ``session_id`` unless it has one; the owner as stored
        (``owner`` when the claim took, the earlier owner otherwise). Atomic across processes."""
        ...

    def session_owner(self, session_id: str) -> str | None:
        """The owner of ``session_id``, None when nobody claimed it."""
        ...

    def record_start(self, start: TaskStart, *, replacing: str | None = None) -> None:
        """Record a task's start (once: a second record of the same task is ignored).
        ``replacing``: the id a start was recorded under before the task had one (a queued
        message's); that record becomes this task's, keeping its time, when there is one."""
        ...

    def starts_since(self, owner: str, since: datetime) -> list[TaskStart]:
        """The starts of ``owner`` at or after ``since``, oldest first."""
        ...

    def usage_since(self, owner: str, since: datetime) -> list[StoredEvent]:
        """The ``model_call_finished`` events (their ``usage`` and ``model``) of every task
        ``owner`` started, written at or after ``since``: what their model calls spent."""
        ...

    def ended(self, task_ids: Sequence[str]) -> set[str]:
        """Those of ``task_ids`` whose event log holds a last event (replied, failed, canceled)."""
        ...

    def close(self) -> None: ...
