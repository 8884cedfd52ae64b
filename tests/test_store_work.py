"""``store_work``: an activity's store calls run at once on the event loop, in one transaction,
when a SQLite store's write lock is free, and on a thread otherwise (another writer, PostgreSQL).

Real SQLite files and a real PostgreSQL schema (``tests.test_store``'s ``target``); the other
writer is a second SQLite connection, as another process's would be.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from errands.adapters.store import SessionStore, open_store, store_work
from errands.adapters.store._sqlite import SqliteStore
from tests.helpers import eventually
from tests.test_store import Target, event, msg, target  # noqa: F401  (the fixture)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[tuple[SessionStore, Path]]:
    path = tmp_path / "sessions.db"
    store = open_store(f"sqlite:///{path}")
    try:
        yield store, path
    finally:
        store.close()


def rows_seen_by_another_connection(path: Path) -> list[str]:
    with closing(sqlite3.connect(path)) as other:
        return [row[0] for row in other.execute("SELECT id FROM messages ORDER BY seq")]


async def test_work_runs_on_the_loop_as_one_transaction_when_the_lock_is_free(
    sqlite_store: tuple[SessionStore, Path],
) -> None:
    store, path = sqlite_store
    seen: dict[str, object] = {}

    def work() -> int:
        seen["thread"] = threading.get_ident()
        store.append_once(msg("a"), [event("a:logged")])
        seen["inside"] = rows_seen_by_another_connection(path)  # not committed yet
        seen["own"] = store.get("a") is not None  # the work reads its own writes
        store.append_once(msg("b"))
        return store.last_seq("s1")

    assert await store_work(store, work) == 2
    assert seen == {"thread": threading.get_ident(), "inside": [], "own": True}
    assert rows_seen_by_another_connection(path) == ["a", "b"]
    assert [e.key for e in store.list_events("t1")] == ["a:logged"]


async def test_a_failed_call_inside_loses_only_its_own_writes(
    sqlite_store: tuple[SessionStore, Path],
) -> None:
    store, path = sqlite_store
    with closing(sqlite3.connect(path)) as admin:  # an event insert that SQLite refuses
        admin.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON events WHEN NEW.key = 'refused'"
            " BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )
        admin.commit()

    def work() -> None:
        store.append_once(msg("kept"), [event("kept:logged")])
        store.append_once(msg("half"), [event("refused")])  # its message with its event, or none

    with pytest.raises(sqlite3.IntegrityError, match="refused by the test"):
        await store_work(store, work)
    assert rows_seen_by_another_connection(path) == ["kept"]
    assert [e.key for e in store.list_events("t1")] == ["kept:logged"]
    # The lock is free again: the next work runs at once.
    assert await store_work(store, lambda: store.append_once(msg("after")).seq) == 2


async def test_work_waits_on_a_thread_while_another_writer_holds_the_lock(
    sqlite_store: tuple[SessionStore, Path],
) -> None:
    store, path = sqlite_store
    loop_thread = threading.get_ident()
    ran_on: list[int] = []

    def work() -> int:
        ran_on.append(threading.get_ident())
        return store.append_once(msg("waited")).seq

    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # another process writing
        pending = asyncio.ensure_future(store_work(store, work))
        # The work waits for the lock on a thread of its own; the loop polls on meanwhile.
        await eventually(lambda: ran_on, "the work to start on its thread")
        assert ran_on[0] != loop_thread
        assert not pending.done()
        other.execute("COMMIT")
        assert await asyncio.wait_for(pending, 30) == 1


async def test_no_second_block_begins_while_one_is_held(
    sqlite_store: tuple[SessionStore, Path],
) -> None:
    """The lock is taken by the block already open (as by another thread's write): nothing
    waits on the loop for it."""
    store, _ = sqlite_store
    assert isinstance(store, SqliteStore)
    held = store.begin_at_once()
    assert held is not None
    with held:
        store.append_once(msg("first"))
        assert store.begin_at_once() is None
    assert await store_work(store, lambda: store.append_once(msg("second")).seq) == 2


async def test_a_lost_transaction_is_run_again_on_a_thread(
    sqlite_store: tuple[SessionStore, Path],
) -> None:
    """SQLite rolls a whole transaction back on some errors (an I/O error, out of memory; here a
    trigger's RAISE(ROLLBACK)): what the block's earlier calls wrote is gone although they
    returned, so the work runs again, on a thread, and its writes (idempotent, as an
    activity's are) are made there."""
    store, path = sqlite_store
    with closing(sqlite3.connect(path)) as admin:
        admin.execute(
            "CREATE TRIGGER lose BEFORE INSERT ON events WHEN NEW.key = 'lost'"
            " BEGIN SELECT RAISE(ROLLBACK, 'rolled back by the test'); END"
        )
        admin.commit()
    runs: list[int] = []

    def work() -> int:
        runs.append(threading.get_ident())
        stored = store.append_once(msg("a"))
        store.append_events([event("lost" if len(runs) == 1 else "kept")])
        return stored.seq

    assert await store_work(store, work) == 1
    assert runs[0] == threading.get_ident() and runs[1] != runs[0] and len(runs) == 2
    assert rows_seen_by_another_connection(path) == ["a"]
    assert [e.key for e in store.list_events("t1")] == ["kept"]
    # A lasting failure is met again on the thread, and raised.
    with pytest.raises(sqlite3.IntegrityError, match="rolled back by the test"):
        await store_work(store, lambda: store.append_events([event("lost")]))
    assert await store_work(store, lambda: store.append_once(msg("b")).seq) == 2


async def test_a_closed_store_refuses_work_as_it_refuses_calls(
    sqlite_store: tuple[SessionStore, Path],
) -> None:
    store, _ = sqlite_store
    store.close()
    with pytest.raises(RuntimeError, match="is closed"):
        await store_work(store, lambda: store.append_once(msg("late")))


async def test_sqlite_work_runs_on_the_loop_and_postgres_work_on_a_thread(target: Target) -> None:  # noqa: F811
    store = open_store(target.url)
    try:
        ran_on: list[int] = []

        def work() -> int:
            ran_on.append(threading.get_ident())
            return store.append_once(msg("pg")).seq

        assert await store_work(store, work) == 1
        loop_thread = threading.get_ident()
        if target.backend == "postgres":
            assert ran_on[0] != loop_thread
        else:
            assert ran_on[0] == loop_thread
    finally:
        store.close()
