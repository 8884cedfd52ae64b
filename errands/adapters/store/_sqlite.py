"""The session store on a SQLite file: the one-machine default.

Every write runs in ``BEGIN IMMEDIATE``, which takes the database's single write lock up front,
so reading ``MAX(seq)`` and inserting ``MAX(seq) + 1`` cannot interleave with another writer, in
this process or another one. WAL mode lets readers proceed while a writer holds that lock, and
the busy timeout makes a second writer wait for it instead of failing. Writers of this process
first queue on a lock of their own: SQLite's busy handler waits by sleeping, in steps of
milliseconds, where a queue hands the lock on at once.

Work that makes several calls in a row (an activity's store work before or after its model
call) can run them as one transaction without waiting for anyone: ``begin_at_once`` begins it
only when no other writer holds the lock, and each call inside it is a savepoint, atomic as
before. ``errands.adapters.store.store_work`` runs such work on the event loop that way, and on
a thread when the lock is taken (or when such a transaction is lost: ``TransactionLost``).

``synchronous=NORMAL`` (as the embedded Temporal dev server runs its own SQLite file): a commit
is durable against a crash of any process, and syncs to disk at checkpoints rather than on every
commit; a power cut may lose the last commits. A store that must survive a power cut belongs on
PostgreSQL (docs/configuration.md).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

from errands.adapters.store import _guard
from errands.adapters.store._migrations import migrate_sqlite
from errands.adapters.store._owners import SqlOwners
from errands.adapters.store._pool import Pool
from errands.adapters.store._reads import COLUMNS, EVENT_COLUMNS
from errands.contracts.events import NewEvent, StoredEvent
from errands.contracts.messages import NewMessage, StoredMessage
from errands.errors import TransactionLost

_POOL_SIZE = 4
_BUSY_TIMEOUT_S = 60.0


class SqliteStore(SqlOwners):
    """A :class:`~errands.adapters.store.SessionStore` on one SQLite file (WAL mode)."""

    PLACEHOLDER = "?"

    def __init__(self, path: str | Path) -> None:
        path = Path(path).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._pool: Pool[sqlite3.Connection] = Pool(
            self._connect,
            size=_POOL_SIZE,
            reusable=lambda conn: not conn.in_transaction,
            close=lambda conn: conn.close(),
            name=str(path),
        )
        self._writer = threading.Lock()
        self._at_once: sqlite3.Connection | None = None
        """The connection of ``begin_at_once``, not the pool's: used under ``_writer`` only,
        it never waits for the lock (busy timeout 0)."""
        try:
            with self._pool.connection() as conn:
                _enable_wal(conn)
                self.schema_version = migrate_sqlite(conn, str(path))
        except BaseException:
            self._pool.close()
            raise

    def _connect(self, busy_timeout: float = _BUSY_TIMEOUT_S) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions, every BEGIN below is ours.
        # check_same_thread=False: the pool hands a connection to one thread at a time.
        conn = sqlite3.connect(
            self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def begin_at_once(self) -> AbstractContextManager[None] | None:
        """One transaction for every call this thread makes inside the returned block (their
        writes each a savepoint, committed together as the block ends, however it ends), begun
        now; None, and nothing begun, when another writer holds the lock (nothing here waits)
        or the store is closed. The block must not await: the connection is held by the
        thread, not by a task. Raises ``TransactionLost`` as it ends if its transaction could
        not be committed (SQLite rolled it back, or the commit failed): nothing of it stayed.
        """
        if self._pool.closed or not self._writer.acquire(blocking=False):
            return None
        try:
            if self._at_once is None:
                self._at_once = self._connect(busy_timeout=0)
            self._at_once.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            self._writer.release()
            if error.sqlite_errorname.startswith("SQLITE_BUSY"):  # another process is writing
                return None
            raise
        except BaseException:
            self._writer.release()
            raise
        return self._held(self._at_once)

    @contextmanager
    def _held(self, conn: sqlite3.Connection) -> Iterator[None]:
        try:
            with self._pool.holding(conn):
                yield
        finally:
            # Committed however the block ends: what its calls wrote before one failed stays,
            # as it would have outside the block (the failed call's own writes rolled back).
            try:
                _commit_held(conn)
            finally:
                self._writer.release()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        held = self._pool.held()
        if held is not None:  # inside this thread's ``begin_at_once``
            with _savepoint(held):
                yield held
            return
        with self._writer, self._pool.connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")

    def append_once(self, message: NewMessage, events: Sequence[NewEvent] = ()) -> StoredMessage:
        message, events = _guard.message(message), _guard.events(events)
        with self._write() as conn:
            # One statement for the usual case, a new row; a retried activity's row is there.
            rows = conn.execute(
                f"INSERT INTO messages ({COLUMNS}) VALUES (?, ?,"
                " (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = ?),"
                f" ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING RETURNING {COLUMNS}",
                (
                    message.id,
                    message.session_id,
                    message.session_id,
                    message.role,
                    message.kind,
                    message.text,
                    message.task_id,
                    message.round,
                    _dump(message.meta),
                    _now(),
                ),
            ).fetchall()
            if not rows:
                existing = self._select_one(conn, message.id)
                assert existing is not None, "a conflicting row vanished from an append-only table"
                return existing
            _insert_events(conn, events)
            return self._message(rows[0])

    def list_by_prefix(self, session_id: str, id_prefix: str) -> list[StoredMessage]:
        # Not LIKE: SQLite's LIKE ignores ASCII case and ids may hold its wildcards `_` and `%`.
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {COLUMNS} FROM messages"
                " WHERE session_id = ? AND substr(id, 1, length(?)) = ? ORDER BY seq",
                _guard.params([session_id, id_prefix, id_prefix]),
            ).fetchall()
        return [self._message(row) for row in rows]

    def put_decision(self, session_id: str, decision_id: str, record: dict[str, Any]) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO decisions (session_id, decision_id, record, updated_at)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (session_id, decision_id)"
                " DO UPDATE SET record = excluded.record, updated_at = excluded.updated_at",
                (*_guard.params([session_id, decision_id]), _dump(_guard.record(record)), _now()),
            )

    def append_event(self, event: NewEvent) -> StoredEvent:
        event = _guard.event(event)
        with self._pool.connection() as conn:
            existing = self._select_event(conn, event.task_id, event.key)
        if existing is not None:
            return existing
        with self._write() as conn:
            existing = self._select_event(conn, event.task_id, event.key)
            if existing is not None:
                return existing
            rows = conn.execute(
                f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?,"
                " (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE task_id = ?),"
                f" ?, ?, ?, ?, ?) RETURNING {EVENT_COLUMNS}",
                (
                    event.task_id,
                    event.task_id,
                    event.key,
                    event.type,
                    event.cause,
                    _dump(event.data),
                    _now(),
                ),
            ).fetchall()
            return self._event(rows[0])

    def append_events(self, events: Sequence[NewEvent]) -> None:
        if events:
            with self._write() as conn:
                _insert_events(conn, _guard.events(events))

    def close(self) -> None:
        self._pool.close()
        with self._writer:
            if self._at_once is not None:
                self._at_once.close()
                self._at_once = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

    @staticmethod
    def _message(row: sqlite3.Row) -> StoredMessage:
        fields = dict(row)
        fields["meta"] = json.loads(fields["meta"])
        return StoredMessage.model_validate(fields)

    @staticmethod
    def _event(row: sqlite3.Row) -> StoredEvent:
        fields = dict(row)
        fields["data"] = json.loads(fields["data"])
        return StoredEvent.model_validate(fields)

    @staticmethod
    def _record(value: str) -> dict[str, Any]:
        return dict(json.loads(value))

    @staticmethod
    def _time(moment: datetime) -> str:
        return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _enable_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL, once: the mode is a property of the file, not the connection.

    Changing the mode needs the file to itself, and SQLite answers a concurrent opener with an
    immediate SQLITE_BUSY instead of calling the busy handler, so wait here ourselves.
    """
    deadline = time.monotonic() + _BUSY_TIMEOUT_S
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as err:
            if err.sqlite_errorname != "SQLITE_BUSY" or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _commit_held(conn: sqlite3.Connection) -> None:
    if not conn.in_transaction:
        raise TransactionLost("SQLite rolled the transaction back after an error")
    try:
        conn.execute("COMMIT")
    except sqlite3.Error as error:
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the connection is broken: the next BEGIN says so
        raise TransactionLost(f"the commit failed: {error}") from error


@contextmanager
def _savepoint(conn: sqlite3.Connection) -> Iterator[None]:
    """One write inside a longer transaction: all of it or, when it fails, none of it."""
    conn.execute("SAVEPOINT write")
    try:
        yield
    except BaseException:
        if conn.in_transaction:  # else SQLite rolled it all back: the block ends lost
            conn.execute("ROLLBACK TO write")
            conn.execute("RELEASE write")
        raise
    conn.execute("RELEASE write")


def _insert_events(conn: sqlite3.Connection, events: Sequence[NewEvent]) -> None:
    """Each event at its task's next seq, unless its key is taken (inside a write)."""
    for event in events:
        conn.execute(
            f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?,"
            " (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE task_id = ?),"
            " ?, ?, ?, ?, ?) ON CONFLICT (task_id, key) DO NOTHING",
            (
                event.task_id,
                event.task_id,
                event.key,
                event.type,
                event.cause,
                _dump(event.data),
                _now(),
            ),
        )


def _dump(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")
