"""The session store's reads, written once for both databases.

The SQL is the same on SQLite and PostgreSQL but for the placeholder (``?`` here, turned into
the backend's own), and each backend turns a database row into a model its own way (SQLite keeps
JSON as text and times as ISO strings; PostgreSQL has ``jsonb`` and ``timestamptz``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from errands.adapters.store import _guard
from errands.adapters.store._pool import Pool
from errands.contracts.events import StoredEvent
from errands.contracts.limits import SEQ_MAX
from errands.contracts.messages import StoredMessage

COLUMNS = "id, session_id, seq, role, kind, text, task_id, round, meta, created_at"
EVENT_COLUMNS = "task_id, seq, key, type, cause, data, at"


class SqlReads:
    """The reads of a ``SessionStore`` over ``self._pool``; a backend sets ``PLACEHOLDER`` and
    the three row readers."""

    PLACEHOLDER: ClassVar[str]
    _pool: Pool[Any]

    @staticmethod
    def _message(row: Any) -> StoredMessage:
        raise NotImplementedError

    @staticmethod
    def _event(row: Any) -> StoredEvent:
        raise NotImplementedError

    @staticmethod
    def _record(value: Any) -> dict[str, Any]:
        raise NotImplementedError

    def _sql(self, text: str) -> str:
        return text.replace("?", self.PLACEHOLDER)

    def _fetch(self, sql: str, params: Sequence[Any]) -> list[Any]:
        with self._pool.connection() as conn:
            return list(conn.execute(self._sql(sql), _guard.params(params)).fetchall())

    def _select_one(self, conn: Any, message_id: str) -> StoredMessage | None:
        sql = self._sql(f"SELECT {COLUMNS} FROM messages WHERE id = ?")
        row = conn.execute(sql, _guard.params([message_id])).fetchone()
        return None if row is None else self._message(row)

    def _select_event(self, conn: Any, task_id: str, key: str) -> StoredEvent | None:
        sql = self._sql(f"SELECT {EVENT_COLUMNS} FROM events WHERE task_id = ? AND key = ?")
        row = conn.execute(sql, _guard.params([task_id, key])).fetchone()
        return None if row is None else self._event(row)

    def get(self, message_id: str) -> StoredMessage | None:
        with self._pool.connection() as conn:
            return self._select_one(conn, message_id)

    def list_session(
        self, session_id: str, *, upto_seq: int | None = None, after_seq: int = 0
    ) -> list[StoredMessage]:
        query = f"SELECT {COLUMNS} FROM messages WHERE session_id = ? AND seq > ?"
        params: list[Any] = [session_id, min(after_seq, SEQ_MAX)]
        if upto_seq is not None:
            query += " AND seq <= ?"
            params.append(upto_seq)
        return [self._message(row) for row in self._fetch(query + " ORDER BY seq", params)]

    def list_kind(self, session_id: str, kind: str) -> list[StoredMessage]:
        rows = self._fetch(
            f"SELECT {COLUMNS} FROM messages WHERE session_id = ? AND kind = ? ORDER BY seq",
            [session_id, kind],
        )
        return [self._message(row) for row in rows]

    def last_seq(self, session_id: str) -> int:
        rows = self._fetch(
            "SELECT COALESCE(MAX(seq), 0) AS seq FROM messages WHERE session_id = ?", [session_id]
        )
        return int(rows[0]["seq"]) if rows else 0

    def list_decisions(self, session_id: str) -> dict[str, dict[str, Any]]:
        rows = self._fetch(
            "SELECT decision_id, record FROM decisions WHERE session_id = ? ORDER BY decision_id",
            [session_id],
        )
        return {row["decision_id"]: self._record(row["record"]) for row in rows}

    def list_events(
        self, task_id: str, *, after_seq: int = 0, limit: int = 1000
    ) -> list[StoredEvent]:
        rows = self._fetch(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE task_id = ? AND seq > ?"
            " ORDER BY seq LIMIT ?",
            [task_id, min(after_seq, SEQ_MAX), limit],
        )
        return [self._event(row) for row in rows]
