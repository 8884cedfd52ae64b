"""The session store's contract, pinned on both backends.

PostgreSQL runs for real: each test gets a fresh schema (named ``errands_test_<random>``, chosen
through the URL's ``search_path``) that is dropped afterwards. Point ``ERRANDS_TEST_POSTGRES_URL``
at another server if needed; an unreachable server fails these tests unless
``ERRANDS_SKIP_POSTGRES=1``.
"""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import threading
import traceback
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from errands.adapters.store import SessionStore, open_store
from errands.contracts.events import EventType, NewEvent
from errands.contracts.messages import NewMessage, StoredMessage

PG_URL = os.environ.get("ERRANDS_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@dataclass
class Target:
    backend: str
    url: str
    sqlite_path: Path | None = None
    pg_schema: str | None = None


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "sqlite":
        path = tmp_path / "not-yet" / "session.db"
        yield Target("sqlite", f"sqlite://{path}", sqlite_path=path)
        return
    schema = f"errands_test_{uuid.uuid4().hex[:12]}"
    with pg_admin() as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        try:
            yield Target("postgres", pg_url_in(schema), pg_schema=schema)
        finally:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def pg_admin() -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(PG_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as err:
        problem = str(err).replace("\n", " ")
    if os.environ.get("ERRANDS_SKIP_POSTGRES") == "1":
        pytest.skip(f"PostgreSQL unreachable and ERRANDS_SKIP_POSTGRES=1: {problem}")
    pytest.fail(
        f"PostgreSQL at {PG_URL} is unreachable ({problem}). Start it, point "
        "ERRANDS_TEST_POSTGRES_URL at one, or set ERRANDS_SKIP_POSTGRES=1 to skip.",
        pytrace=False,
    )


def pg_url_in(schema: str) -> str:
    """The test server's URL with ``schema`` as the only entry of the search path."""
    sep = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{sep}options=-csearch_path%3D{schema}"


@pytest.fixture
def store(target: Target) -> Iterator[SessionStore]:
    opened = open_store(target.url)
    try:
        yield opened
    finally:
        opened.close()


def msg(message_id: str, session: str = "s1", text: str | None = None, **fields: Any) -> NewMessage:
    return NewMessage(
        id=message_id,
        session_id=session,
        role=fields.pop("role", "user"),
        kind=fields.pop("kind", "user"),
        text=message_id if text is None else text,
        **fields,
    )


def schema_versions(target: Target) -> list[int]:
    if target.sqlite_path is not None:
        with sqlite3.connect(target.sqlite_path) as conn:
            return [v for (v,) in conn.execute("SELECT version FROM schema_version ORDER BY 1")]
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        rows = conn.execute(f'SELECT version FROM "{target.pg_schema}".schema_version ORDER BY 1')
        return [v for (v,) in rows]


def test_append_once_returns_the_stored_row_unchanged_when_the_id_exists(
    store: SessionStore,
) -> None:
    first = store.append_once(msg("task:t1:user", text="hello", task_id="t1", round=0))
    again = store.append_once(msg("task:t1:user", text="a different text", meta={"x": 1}))

    assert again == first
    assert first.text == "hello" and first.task_id == "t1" and first.round == 0
    assert first.meta == {}
    assert store.get("task:t1:user") == first
    assert store.list_session("s1") == [first]


def test_seqs_count_from_one_per_session_in_append_order(store: SessionStore) -> None:
    for i in range(3):
        store.append_once(msg(f"a{i}", session="A"))
        store.append_once(msg(f"b{i}", session="B"))
    store.append_once(msg("a3", session="A"))

    assert [(m.id, m.seq) for m in store.list_session("A")] == [
        ("a0", 1),
        ("a1", 2),
        ("a2", 3),
        ("a3", 4),
    ]
    assert [(m.id, m.seq) for m in store.list_session("B")] == [("b0", 1), ("b1", 2), ("b2", 3)]
    assert (store.last_seq("A"), store.last_seq("B"), store.last_seq("empty")) == (4, 3, 0)


def test_list_session_upto_seq_stops_at_that_position(store: SessionStore) -> None:
    for i in range(5):
        store.append_once(msg(f"m{i}"))

    assert [m.seq for m in store.list_session("s1", upto_seq=3)] == [1, 2, 3]
    assert store.list_session("s1", upto_seq=0) == []
    assert len(store.list_session("s1", upto_seq=99)) == 5
    assert store.list_session("nobody") == []


def test_list_by_prefix_takes_underscore_and_percent_literally(store: SessionStore) -> None:
    for message_id in ["a_b:1", "axb:1", "a%c:1", "abc:1", "A_B:1", "a_b:2", "a_b"]:
        store.append_once(msg(message_id))
    store.append_once(msg("a_b:other-session", session="s2"))

    assert [m.id for m in store.list_by_prefix("s1", "a_b:")] == ["a_b:1", "a_b:2"]
    assert [m.id for m in store.list_by_prefix("s1", "a_b")] == ["a_b:1", "a_b:2", "a_b"]
    assert [m.id for m in store.list_by_prefix("s1", "a%")] == ["a%c:1"]
    assert [m.id for m in store.list_by_prefix("s1", "A")] == ["A_B:1"]
    assert store.list_by_prefix("s1", "zzz") == []
    assert len(store.list_by_prefix("s1", "")) == 7


def test_get_returns_none_for_an_unknown_id(store: SessionStore) -> None:
    assert store.get("task:nope:user") is None


def test_meta_and_created_at_round_trip(target: Target, store: SessionStore) -> None:
    meta = {"refs": [1, 2], "cost": 0.25, "ok": True, "none": None, "nested": {"é": "✓"}}
    stored = store.append_once(msg("m", role="assistant", kind="reply", meta=meta))

    assert stored.meta == meta
    created = datetime.fromisoformat(stored.created_at)
    assert created.utcoffset() == timedelta(0)
    store.close()
    with closing(open_store(target.url)) as reopened:
        assert reopened.get("m") == stored


def test_put_decision_inserts_then_overwrites(store: SessionStore) -> None:
    store.put_decision("s1", "d1", {"answer": "yes", "n": 1})
    store.put_decision("s1", "d2", {"answer": "no"})
    store.put_decision("s1", "d1", {"answer": "changed", "extra": [1]})
    store.put_decision("s2", "d1", {"answer": "other session"})

    assert store.list_decisions("s1") == {
        "d1": {"answer": "changed", "extra": [1]},
        "d2": {"answer": "no"},
    }
    assert store.list_decisions("s2") == {"d1": {"answer": "other session"}}
    assert store.list_decisions("s3") == {}


def test_reopening_keeps_data_and_schema_version(target: Target) -> None:
    first = open_store(target.url)
    row = first.append_once(msg("kept"))
    first.put_decision("s1", "d", {"v": 1})
    first.close()
    versions = schema_versions(target)

    second = open_store(target.url)
    try:
        assert second.list_session("s1") == [row]
        assert second.list_decisions("s1") == {"d": {"v": 1}}
        assert second.append_once(msg("next")).seq == 2
    finally:
        second.close()
    assert versions and versions == list(range(1, len(versions) + 1))
    assert schema_versions(target) == versions


def test_opening_a_newer_schema_fails_with_a_clear_error(target: Target) -> None:
    open_store(target.url).close()
    if target.sqlite_path is not None:
        with sqlite3.connect(target.sqlite_path) as conn:
            conn.execute("INSERT INTO schema_version VALUES (999, 'future', 'later')")
    else:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(
                f'INSERT INTO "{target.pg_schema}".schema_version (version, description)'
                " VALUES (999, 'future')"
            )

    with pytest.raises(RuntimeError, match="schema version 999, newer"):
        open_store(target.url)


def test_threads_appending_with_duplicate_ids_store_each_id_once_in_contiguous_seqs(
    store: SessionStore,
) -> None:
    threads, per_thread = 8, 50
    start = threading.Barrier(threads)

    def work(t: int) -> list[StoredMessage]:
        start.wait(timeout=30)
        # Threads 2k and 2k+1 append the same ids with different texts.
        return [
            store.append_once(msg(f"t{t // 2}_%{i}", text=f"from {t}")) for i in range(per_thread)
        ]

    with ThreadPoolExecutor(threads) as pool:
        results = [row for rows in pool.map(work, range(threads)) for row in rows]

    stored = store.list_session("s1")
    assert [m.seq for m in stored] == list(range(1, threads // 2 * per_thread + 1))
    assert len({m.id for m in stored}) == len(stored)
    by_id = {m.id: m for m in stored}
    assert all(row == by_id[row.id] for row in results)


def _append_in_process(url: str, ids: list[str], tag: str, barrier: Any, out: Any) -> None:
    try:
        barrier.wait(timeout=60)  # both open at once: the migrations race too
        store = open_store(url)
        try:
            barrier.wait(timeout=60)
            rows = [store.append_once(msg(i, text=tag)) for i in ids]
        finally:
            store.close()
        out.put((tag, [(r.id, r.seq, r.text) for r in rows]))
    except BaseException:
        out.put((tag, traceback.format_exc()))
        raise


def test_two_processes_appending_to_one_session_get_each_id_once_in_contiguous_seqs(
    target: Target,
) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    plans = {"A": [f"p:{i}" for i in range(0, 80)], "B": [f"p:{i}" for i in range(40, 120)]}
    procs = [
        ctx.Process(target=_append_in_process, args=(target.url, ids, tag, barrier, out))
        for tag, ids in plans.items()
    ]
    for proc in procs:
        proc.start()
    reports: dict[str, Any] = {}
    try:
        for _ in procs:
            tag, report = out.get(timeout=120)
            reports[tag] = report
            if not isinstance(report, list):
                barrier.abort()  # the other process need not wait out its barrier timeout
    finally:
        for proc in procs:
            proc.join(timeout=30)
    for tag, report in reports.items():
        assert isinstance(report, list), f"process {tag} failed:\n{report}"

    with closing(open_store(target.url)) as store:
        stored = store.list_session("s1")
    assert [m.seq for m in stored] == list(range(1, 121))
    assert sorted(m.id for m in stored) == sorted(f"p:{i}" for i in range(120))
    by_id = {m.id: (m.id, m.seq, m.text) for m in stored}
    for report in reports.values():
        assert all(tuple(row) == by_id[row[0]] for row in report)


def test_open_store_accepts_paths_and_sqlite_urls(tmp_path: Path) -> None:
    for url in [str(tmp_path / "a" / "plain.db"), f"sqlite://{tmp_path}/b/url.db"]:
        store = open_store(url)
        store.append_once(msg("x"))
        store.close()
    assert (tmp_path / "a" / "plain.db").exists() and (tmp_path / "b" / "url.db").exists()


@pytest.mark.fast
@pytest.mark.parametrize("url", [":memory:", "sqlite://:memory:", "mysql://db/x"])
def test_open_store_rejects_what_it_cannot_serve(url: str) -> None:
    with pytest.raises(ValueError, match="session store"):
        open_store(url)


def test_postgres_url_naming_a_missing_schema_fails_with_instructions() -> None:
    pg_admin().close()
    with pytest.raises(RuntimeError, match="CREATE SCHEMA"):
        open_store(pg_url_in(f"errands_test_missing_{uuid.uuid4().hex[:12]}"))


# -- the event log ---------------------------------------------------------------------------


def event(key: str, task: str = "t1", type_: EventType = "round_started", **data: Any) -> NewEvent:
    return NewEvent(task_id=task, key=key, type=type_, cause=f"cause-of-{key}", data=data)


def test_events_get_contiguous_seqs_per_task_and_a_repeated_key_changes_nothing(
    store: SessionStore,
) -> None:
    first = store.append_event(event("round:0", round=0))
    other = store.append_event(event("round:0", task="t2", round=0))
    second = store.append_event(event("round:1", round=1))
    again = store.append_event(event("round:0", round=99))

    assert (first.seq, second.seq, other.seq) == (1, 2, 1)
    assert again == first and again.data == {"round": 0}
    listed = store.list_events("t1")
    assert [(e.seq, e.key, e.cause) for e in listed] == [
        (1, "round:0", "cause-of-round:0"),
        (2, "round:1", "cause-of-round:1"),
    ]
    assert [e.key for e in store.list_events("t1", after_seq=1)] == ["round:1"]
    assert [e.key for e in store.list_events("t1", limit=1)] == ["round:0"]
    assert listed[0].public()["round"] == 0 and listed[0].public()["seq"] == 1


def test_threads_writing_events_with_duplicate_keys_store_each_once_without_gaps(
    store: SessionStore,
) -> None:
    threads, per_thread = 8, 40
    start = threading.Barrier(threads)

    def work(n: int) -> list[int]:
        start.wait()
        # Pairs of threads write the same keys, as a retried activity would.
        return [store.append_event(event(f"k{n // 2}:{i}")).seq for i in range(per_thread)]

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))
    stored = store.list_events("t1", limit=10_000)
    assert [e.seq for e in stored] == list(range(1, threads // 2 * per_thread + 1))
    assert len({e.key for e in stored}) == len(stored)


def test_events_written_in_batches_and_with_a_message_are_written_once_in_order(
    store: SessionStore,
) -> None:
    store.append_events([event("a"), event("b"), event("a", round=9)])  # a repeated key: skipped
    row = NewMessage(id="m-events", session_id="s-events", role="user", kind="user", text="hi")
    store.append_once(row, [event("with-the-message"), event("b")])
    # A retried write finds the message: it and its events are not written again.
    store.append_once(row.model_copy(update={"text": "changed"}), [event("again")])
    store.append_events([])

    stored = store.list_events("t1")
    assert [(e.seq, e.key) for e in stored] == [(1, "a"), (2, "b"), (3, "with-the-message")]
    assert stored[0].data == {}, "the first write of a key stands"
    assert [r.text for r in store.list_session("s-events")] == ["hi"]


def test_threads_writing_batches_with_shared_keys_leave_no_gap(store: SessionStore) -> None:
    threads, batches = 6, 20
    start = threading.Barrier(threads)

    def work(n: int) -> None:
        start.wait()
        for i in range(batches):
            store.append_events([event(f"k{n // 2}:{i}:{j}", task="t-batch") for j in range(3)])

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))
    stored = store.list_events("t-batch", limit=10_000)
    assert [e.seq for e in stored] == list(range(1, threads // 2 * batches * 3 + 1))
    assert len({e.key for e in stored}) == len(stored)
