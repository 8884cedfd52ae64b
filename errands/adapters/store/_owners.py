"""Who owns what, written once for both databases (SPEC §10): errands API keys (stored as a
digest, never the token), the owner of each session, and each owned task's start (what quotas
count). Every write is one statement, atomic on either database: a claim that loses a race
reads the winner's row.

Times are ``timestamptz`` on PostgreSQL and ISO 8601 text in UTC on SQLite (compared as text:
one fixed format, so text order is time order); a backend turns them with ``_moment``/``_time``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from errands.adapters.store._base import PrincipalRecord, TaskStart
from errands.adapters.store._reads import EVENT_COLUMNS, SqlReads
from errands.contracts.events import TERMINAL, StoredEvent
from errands.errors import Conflict

_PRINCIPAL_COLUMNS = "name, role, key_id, token_sha256, created_at, revoked_at"
_START_COLUMNS = "task_id, owner, session_id, started_at"


class SqlOwners(SqlReads):
    """The principal, ownership and start records of a ``SessionStore``."""

    @staticmethod
    def _time(moment: datetime) -> Any:
        """``moment`` as the backend stores a time."""
        return moment

    @staticmethod
    def _moment(value: Any) -> datetime:
        """A stored time as an aware ``datetime``."""
        return value if isinstance(value, datetime) else datetime.fromisoformat(value)

    def _write_one(self, sql: str, params: Sequence[Any]) -> int:
        """Run one write statement; the rows it changed."""
        with self._pool.connection() as conn:
            return int(conn.execute(self._sql(sql), list(params)).rowcount)

    # -- API keys ---------------------------------------------------------------------------

    def add_principal(self, record: PrincipalRecord) -> None:
        added = self._write_one(
            f"INSERT INTO principals ({_PRINCIPAL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (key_id) DO NOTHING",
            [
                record.name,
                record.role,
                record.key_id,
                record.token_sha256,
                self._time(record.created_at),
                None if record.revoked_at is None else self._time(record.revoked_at),
            ],
        )
        if not added:
            raise Conflict(f"an API key with id {record.key_id} exists already; add it again")

    def list_principals(self) -> list[PrincipalRecord]:
        rows = self._fetch(
            f"SELECT {_PRINCIPAL_COLUMNS} FROM principals ORDER BY created_at, key_id", []
        )
        return [self._principal(row) for row in rows]

    def find_key(self, key_id: str) -> PrincipalRecord | None:
        rows = self._fetch(
            f"SELECT {_PRINCIPAL_COLUMNS} FROM principals WHERE key_id = ?", [key_id]
        )
        return self._principal(rows[0]) if rows else None

    def revoke_principal(self, name_or_key_id: str, at: datetime) -> list[PrincipalRecord]:
        live = [
            r
            for r in self.list_principals()
            if r.revoked_at is None and name_or_key_id in (r.key_id, r.name)
        ]
        for record in live:
            self._write_one(
                "UPDATE principals SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
                [self._time(at), record.key_id],
            )
        return [self.find_key(r.key_id) or r for r in live]

    def _principal(self, row: Any) -> PrincipalRecord:
        revoked = row["revoked_at"]
        return PrincipalRecord(
            name=row["name"],
            role=row["role"],
            key_id=row["key_id"],
            token_sha256=row["token_sha256"],
            created_at=self._moment(row["created_at"]),
            revoked_at=None if revoked is None else self._moment(revoked),
        )

    # -- sessions and starts ----------------------------------------------------------------

    def claim_session(self, session_id: str, owner: str) -> str:
        self._write_one(
            "INSERT INTO session_owners (session_id, owner, claimed_at) VALUES (?, ?, ?)"
            " ON CONFLICT (session_id) DO NOTHING",
            [session_id, owner, self._time(datetime.now(UTC))],
        )
        stored = self.session_owner(session_id)
        assert stored is not None  # inserted, or there before
        return stored

    def session_owner(self, session_id: str) -> str | None:
        rows = self._fetch("SELECT owner FROM session_owners WHERE session_id = ?", [session_id])
        return str(rows[0]["owner"]) if rows else None

    def record_start(self, start: TaskStart, *, replacing: str | None = None) -> None:
        if replacing is not None and self._write_one(
            "UPDATE task_starts SET task_id = ? WHERE task_id = ? AND owner = ?"
            " AND NOT EXISTS (SELECT 1 FROM task_starts WHERE task_id = ?)",
            [start.task_id, replacing, start.owner, start.task_id],
        ):
            return
        self._write_one(
            f"INSERT INTO task_starts ({_START_COLUMNS}) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (task_id) DO NOTHING",
            [start.task_id, start.owner, start.session_id, self._time(start.started_at)],
        )

    def starts_since(self, owner: str, since: datetime) -> list[TaskStart]:
        rows = self._fetch(
            f"SELECT {_START_COLUMNS} FROM task_starts WHERE owner = ? AND started_at >= ?"
            " ORDER BY started_at, task_id",
            [owner, self._time(since)],
        )
        return [
            TaskStart(
                task_id=row["task_id"],
                owner=row["owner"],
                session_id=row["session_id"],
                started_at=self._moment(row["started_at"]),
            )
            for row in rows
        ]

    def usage_since(self, owner: str, since: datetime) -> list[StoredEvent]:
        columns = ", ".join(f"e.{c.strip()}" for c in EVENT_COLUMNS.split(","))
        rows = self._fetch(
            f"SELECT {columns} FROM events e JOIN task_starts t ON t.task_id = e.task_id"
            " WHERE t.owner = ? AND e.type = 'model_call_finished' AND e.at >= ?"
            " ORDER BY e.at",
            [owner, self._time(since)],
        )
        return [self._event(row) for row in rows]

    def ended(self, task_ids: Sequence[str]) -> set[str]:
        if not task_ids:
            return set()
        marks = ", ".join("?" for _ in task_ids)
        kinds = ", ".join(f"'{t}'" for t in sorted(TERMINAL))
        rows = self._fetch(
            f"SELECT DISTINCT task_id FROM events WHERE task_id IN ({marks}) AND type IN ({kinds})",
            list(task_ids),
        )
        return {str(row["task_id"]) for row in rows}
