"""The session store on PostgreSQL: for several worker hosts sharing one conversation history.

Appends to one session serialize on a transaction-scoped advisory lock keyed by (schema,
session): the next ``seq`` is read after the lock is taken and the lock is held until commit, so
concurrent appends get distinct, consecutive numbers that commit in the order they were handed
out. Other sessions never wait on that lock. The tables live in the connection's current schema,
so a ``search_path`` in the URL (``?options=-csearch_path%3Dname``) places them elsewhere.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Self

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from errands.adapters.store import _guard
from errands.adapters.store._migrations import migrate_postgres
from errands.adapters.store._owners import SqlOwners
from errands.adapters.store._pool import Pool
from errands.adapters.store._reads import COLUMNS, EVENT_COLUMNS
from errands.contracts.events import NewEvent, StoredEvent
from errands.contracts.messages import NewMessage, StoredMessage
from errands.errors import StoreUnavailable

_POOL_SIZE = 8
_CONNECT_TIMEOUT_S = 10

Conn = psycopg.Connection[dict[str, Any]]


class PostgresStore(SqlOwners):
    """A :class:`~errands.adapters.store.SessionStore` on PostgreSQL, in the URL's current
    schema."""

    PLACEHOLDER = "%s"

    def __init__(self, url: str) -> None:
        self._url = url
        self._conninfo = conninfo_to_dict(url)
        self._pool: Pool[Conn] = Pool(
            self._connect,
            size=_POOL_SIZE,
            reusable=_reusable,
            close=lambda conn: conn.close(),
            name=self._where(),
        )
        try:
            self.schema, self.schema_version = self._prepare()
        except BaseException:
            self._pool.close()
            raise

    def _prepare(self) -> tuple[str, int]:
        with self._pool.connection() as conn:
            row = conn.execute("SELECT current_schema() AS schema").fetchone()
            schema = row["schema"] if row else None
            if schema is None:
                raise StoreUnavailable(
                    f"the search_path of the session store {self._where()} names no existing "
                    "schema; create it first (CREATE SCHEMA <name>) or fix the URL's options"
                )
            return schema, migrate_postgres(conn, _lock_key("migrate", schema), self._where())

    def _where(self) -> str:
        # The URL without its password, for messages that end up in logs.
        info = self._conninfo
        return f"postgresql://{info.get('user', '')}@{info.get('host', '')}:" + (
            f"{info.get('port', 5432)}/{info.get('dbname', '')}"
        )

    def _connect(self) -> Conn:
        kwargs: dict[str, Any] = {}
        if "connect_timeout" not in self._conninfo:
            kwargs["connect_timeout"] = _CONNECT_TIMEOUT_S
        try:
            return psycopg.connect(self._url, autocommit=True, row_factory=dict_row, **kwargs)
        except psycopg.OperationalError as err:
            raise psycopg.OperationalError(
                f"cannot reach the session store {self._where()}: {err}".strip()
                + "\ncheck ERRANDS_DATABASE_URL and that PostgreSQL is running"
            ) from err

    def append_once(self, message: NewMessage, events: Sequence[NewEvent] = ()) -> StoredMessage:
        message, events = _guard.message(message), _guard.events(events)
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(
                "SELECT pg_advisory_xact_lock(%s)",
                [_lock_key("session", self.schema, message.session_id)],
            )
            # The usual case is a new row; ON CONFLICT answers a retried activity's row
            # already there, and the same id appended under another session at the same
            # moment, the one race the session lock does not serialize.
            row = conn.execute(
                f"INSERT INTO messages ({COLUMNS}) VALUES (%s, %s,"
                " (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = %s),"
                " %s, %s, %s, %s, %s, %s, clock_timestamp())"
                f" ON CONFLICT (id) DO NOTHING RETURNING {COLUMNS}",
                [
                    message.id,
                    message.session_id,
                    message.session_id,
                    message.role,
                    message.kind,
                    message.text,
                    message.task_id,
                    message.round,
                    Jsonb(message.meta),
                ],
            ).fetchone()
            if row is None:
                stored = self._select_one(conn, message.id)
                assert stored is not None, "a conflicting row vanished from an append-only table"
                return stored
            self._insert_events(conn, events)
            return self._message(row)

    def list_by_prefix(self, session_id: str, id_prefix: str) -> list[StoredMessage]:
        # starts_with, not LIKE: ids may hold LIKE's wildcards `_` and `%`.
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {COLUMNS} FROM messages"
                " WHERE session_id = %s AND starts_with(id, %s) ORDER BY seq",
                _guard.params([session_id, id_prefix]),
            ).fetchall()
        return [self._message(row) for row in rows]

    def put_decision(self, session_id: str, decision_id: str, record: dict[str, Any]) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                "INSERT INTO decisions (session_id, decision_id, record, updated_at)"
                " VALUES (%s, %s, %s, clock_timestamp()) ON CONFLICT (session_id, decision_id)"
                " DO UPDATE SET record = excluded.record, updated_at = excluded.updated_at",
                [*_guard.params([session_id, decision_id]), Jsonb(_guard.record(record))],
            )

    def append_event(self, event: NewEvent) -> StoredEvent:
        event = _guard.event(event)
        with self._pool.connection() as conn:
            existing = self._select_event(conn, event.task_id, event.key)
            if existing is not None:
                return existing
            with conn.transaction():
                conn.execute(
                    "SELECT pg_advisory_xact_lock(%s)",
                    [_lock_key("events", self.schema, event.task_id)],
                )
                row = conn.execute(
                    f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (%s,"
                    " (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE task_id = %s),"
                    " %s, %s, %s, %s, clock_timestamp())"
                    f" ON CONFLICT (task_id, key) DO NOTHING RETURNING {EVENT_COLUMNS}",
                    [
                        event.task_id,
                        event.task_id,
                        event.key,
                        event.type,
                        event.cause,
                        Jsonb(event.data),
                    ],
                ).fetchone()
            if row is None:
                stored = self._select_event(conn, event.task_id, event.key)
                assert stored is not None, "a conflicting event vanished from an append-only table"
                return stored
            return self._event(row)

    def append_events(self, events: Sequence[NewEvent]) -> None:
        if events:
            with self._pool.connection() as conn, conn.transaction():
                self._insert_events(conn, _guard.events(events))

    def _insert_events(self, conn: Conn, events: Sequence[NewEvent]) -> None:
        """Each event at its task's next seq, unless its key is taken (inside a transaction,
        holding each task's event lock, taken in one order so two writers never deadlock)."""
        for task_id in sorted({e.task_id for e in events}):
            conn.execute(
                "SELECT pg_advisory_xact_lock(%s)", [_lock_key("events", self.schema, task_id)]
            )
        for event in events:
            conn.execute(
                f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (%s,"
                " (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE task_id = %s),"
                " %s, %s, %s, %s, clock_timestamp()) ON CONFLICT (task_id, key) DO NOTHING",
                [
                    event.task_id,
                    event.task_id,
                    event.key,
                    event.type,
                    event.cause,
                    Jsonb(event.data),
                ],
            )

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @staticmethod
    def _message(row: dict[str, Any]) -> StoredMessage:
        fields = dict(row)
        fields["created_at"] = _iso(fields["created_at"])
        return StoredMessage.model_validate(fields)

    @staticmethod
    def _event(row: dict[str, Any]) -> StoredEvent:
        fields = dict(row)
        fields["at"] = _iso(fields["at"])
        return StoredEvent.model_validate(fields)

    @staticmethod
    def _record(value: dict[str, Any]) -> dict[str, Any]:
        return value

    def __repr__(self) -> str:
        return f"PostgresStore({self._where()!r}, schema={self.schema!r})"


def _reusable(conn: Conn) -> bool:
    return (
        not conn.closed
        and not conn.broken
        and conn.info.transaction_status == TransactionStatus.IDLE
    )


def _lock_key(*parts: str) -> int:
    """A stable signed 64-bit advisory lock key; advisory locks are database-wide, so the schema
    is part of the key and two stores in different schemas never wait on each other."""
    digest = hashlib.blake2b("\0".join(("errands", *parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")
