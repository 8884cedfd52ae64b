"""The schema of each backend as an ordered list of migrations, applied when a store opens.

``schema_version`` holds one row per applied migration. Applying runs under the backend's
database-wide write lock (SQLite ``BEGIN IMMEDIATE``, a PostgreSQL advisory lock), so two
processes opening the same fresh database at once apply each migration exactly once. Never edit
a released migration: append a new one.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from errands.errors import StoreUnavailable


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


SQLITE_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "messages and decisions",
        (
            """
            CREATE TABLE messages (
                id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL,
                seq INTEGER NOT NULL,
                role TEXT NOT NULL,
                kind TEXT NOT NULL,
                text TEXT NOT NULL,
                task_id TEXT,
                round INTEGER,
                meta TEXT NOT NULL DEFAULT '{}',
                created_at TEXT NOT NULL,
                UNIQUE (session_id, seq)
            )
            """,
            """
            CREATE TABLE decisions (
                session_id TEXT NOT NULL,
                decision_id TEXT NOT NULL,
                record TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                PRIMARY KEY (session_id, decision_id)
            )
            """,
        ),
    ),
    Migration(
        2,
        "compaction summaries found without a scan of the session",
        ("CREATE INDEX messages_session_kind ON messages (session_id, kind, seq)",),
    ),
    Migration(
        3,
        "the event log",
        (
            """
            CREATE TABLE events (
                task_id TEXT NOT NULL,
                seq INTEGER NOT NULL,
                key TEXT NOT NULL,
                type TEXT NOT NULL,
                cause TEXT,
                data TEXT NOT NULL DEFAULT '{}',
                at TEXT NOT NULL,
                PRIMARY KEY (task_id, seq),
                UNIQUE (task_id, key)
            )
            """,
        ),
    ),
    Migration(
        4,
        "principals, session owners and task starts (SPEC §10)",
        (
            """
            CREATE TABLE principals (
                key_id TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                role TEXT NOT NULL,
                token_sha256 TEXT NOT NULL,
                created_at TEXT NOT NULL,
                revoked_at TEXT
            )
            """,
            "CREATE INDEX principals_name ON principals (name)",
            """
            CREATE TABLE session_owners (
                session_id TEXT PRIMARY KEY,
                owner TEXT NOT NULL,
                claimed_at TEXT NOT NULL
            )
            """,
            """
            CREATE TABLE task_starts (
                task_id TEXT PRIMARY KEY,
                owner TEXT NOT NULL,
                session_id TEXT NOT NULL,
                started_at TEXT NOT NULL
            )
            """,
            "CREATE INDEX task_starts_owner ON task_starts (owner, started_at)",
        ),
    ),
)

POSTGRES_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "messages and decisions",
        (
            """
            CREATE TABLE messages (
                id text PRIMARY KEY,
                session_id text NOT NULL,
                seq bigint NOT NULL,
                role text NOT NULL,
                kind text NOT NULL,
                text text NOT NULL,
                task_id text,
                round integer,
                meta jsonb NOT NULL DEFAULT '{}'::jsonb,
                created_at timestamptz NOT NULL,
                UNIQUE (session_id, seq)
            )
            """,
            """
            CREATE TABLE decisions (
                session_id text NOT NULL,
                decision_id text NOT NULL,
                record jsonb NOT NULL,
                updated_at timestamptz NOT NULL,
                PRIMARY KEY (session_id, decision_id)
            )
            """,
        ),
    ),
    Migration(
        2,
        "compaction summaries found without a scan of the session",
        ("CREATE INDEX messages_session_kind ON messages (session_id, kind, seq)",),
    ),
    Migration(
        3,
        "the event log",
        (
            """
            CREATE TABLE events (
                task_id text NOT NULL,
                seq bigint NOT NULL,
                key text NOT NULL,
                type text NOT NULL,
                cause text,
                data jsonb NOT NULL DEFAULT '{}'::jsonb,
                at timestamptz NOT NULL,
                PRIMARY KEY (task_id, seq),
                UNIQUE (task_id, key)
            )
            """,
        ),
    ),
    Migration(
        4,
        "principals, session owners and task starts (SPEC §10)",
        (
            """
            CREATE TABLE principals (
                key_id text PRIMARY KEY,
                name text NOT NULL,
                role text NOT NULL,
                token_sha256 text NOT NULL,
                created_at timestamptz NOT NULL,
                revoked_at timestamptz
            )
            """,
            "CREATE INDEX principals_name ON principals (name)",
            """
            CREATE TABLE session_owners (
                session_id text PRIMARY KEY,
                owner text NOT NULL,
                claimed_at timestamptz NOT NULL
            )
            """,
            """
            CREATE TABLE task_starts (
                task_id text PRIMARY KEY,
                owner text NOT NULL,
                session_id text NOT NULL,
                started_at timestamptz NOT NULL
            )
            """,
            "CREATE INDEX task_starts_owner ON task_starts (owner, started_at)",
        ),
    ),
)


def latest(migrations: tuple[Migration, ...]) -> int:
    return migrations[-1].version if migrations else 0


def _check_order(migrations: tuple[Migration, ...]) -> None:
    expected = list(range(1, len(migrations) + 1))
    if [m.version for m in migrations] != expected:
        raise AssertionError(f"migrations must be numbered 1..N in order, got {migrations!r}")


def _check_not_newer(current: int, migrations: tuple[Migration, ...], where: str) -> None:
    if current > latest(migrations):
        raise StoreUnavailable(
            f"the session store at {where} has schema version {current}, newer than the "
            f"{latest(migrations)} this errands knows; upgrade errands on this host"
        )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def migrate_sqlite(conn: sqlite3.Connection, where: str) -> int:
    """Bring the database up to date; returns the schema version it ends at."""
    _check_order(SQLITE_MIGRATIONS)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            " version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        current = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0]
        _check_not_newer(current, SQLITE_MIGRATIONS, where)
        for migration in SQLITE_MIGRATIONS[current:]:
            for statement in migration.statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.description, _now()),
            )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return latest(SQLITE_MIGRATIONS)


def migrate_postgres(conn: psycopg.Connection[dict[str, Any]], lock_key: int, where: str) -> int:
    """Bring the schema up to date; returns the schema version it ends at.

    ``lock_key`` names this schema's migration lock: without it two processes could both see an
    empty schema and race on ``CREATE TABLE`` (which fails rather than waits on the catalog).
    """
    _check_order(POSTGRES_MIGRATIONS)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [lock_key])
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            " version integer PRIMARY KEY, description text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        row = conn.execute("SELECT COALESCE(MAX(version), 0) AS v FROM schema_version").fetchone()
        current = int(row["v"]) if row else 0
        _check_not_newer(current, POSTGRES_MIGRATIONS, where)
        for migration in POSTGRES_MIGRATIONS[current:]:
            for statement in migration.statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version (version, description) VALUES (%s, %s)",
                [migration.version, migration.description],
            )
    return latest(POSTGRES_MIGRATIONS)
