"""The worker's MCP connection pool (errands.adapters.mcp.pool) against real server processes:
tests/mcp_counter_server.py, whose state is a counter and its process id, over stdio and over
Streamable HTTP. Shared connections and ``task``/``branch`` sessions are reused; a session that
ends without ``close_scope`` is reported lost at its next call, with why; listings are cached."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from errands.adapters.devserver import free_port
from errands.adapters.mcp._listings import Listings
from errands.adapters.mcp.config import McpServerConfig, McpTool, ToolOutcome
from errands.adapters.mcp.pool import McpPool, SessionKey
from tests.helpers import eventually
from tests.mcp_counter_server import events_in
from tests.mcp_notes import start_listening, stop

TIMEOUT = 20.0
"""A call's timeout: a bound on a broken test, not the behaviour under test."""

Pools = Callable[..., McpPool]


def counter(events: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tests.mcp_counter_server", "--events", str(events), *extra]


def stdio(events: Path, **settings: Any) -> McpServerConfig:
    return McpServerConfig(command=counter(events), **settings)


def counted(outcome: ToolOutcome) -> tuple[int, int]:
    """``(pid, count)`` of a ``count`` call's answer."""
    assert not outcome.is_error, outcome.text
    answer = json.loads(outcome.text)
    return answer["pid"], answer["count"]


def gone(pid: int) -> bool:
    """Whether the process ``pid`` has exited and been reaped (a zombie is still in /proc)."""
    return not Path(f"/proc/{pid}").exists()


def pids(events: Path, event: str = "started") -> list[int]:
    return [found["pid"] for found in events_in(events) if found["event"] == event]


@pytest.fixture
async def pools() -> AsyncIterator[Pools]:
    """Pools for a test, each closed at its end."""
    made: list[McpPool] = []

    def make(servers: dict[str, McpServerConfig], **options: Any) -> McpPool:
        made.append(McpPool(servers, **options))
        return made[-1]

    yield make
    for pool in made:
        await pool.aclose()


async def count(pool: McpPool, key: SessionKey | None = None, n: int = 0) -> tuple[int, int]:
    if key is None:
        return counted(await pool.call("c", "count", {}, idempotency_key=f"k{n}", timeout=TIMEOUT))
    outcome, lost = await pool.session_call(
        key, "count", {}, idempotency_key=f"k{n}", timeout=TIMEOUT
    )
    assert lost is None
    return counted(outcome)


async def test_five_shared_calls_run_in_one_process_counting_1_to_5(
    pools: Pools, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    pool = pools({"c": stdio(events)})
    answers = [await count(pool, n=n) for n in range(5)]
    assert {pid for pid, _ in answers} == set(pids(events))
    assert [n for _, n in answers] == [1, 2, 3, 4, 5]
    calls = [e for e in events_in(events) if e["event"] == "call"]
    assert [e["key"] for e in calls] == ["k0", "k1", "k2", "k3", "k4"]
    assert pool.stats().processes == 1


async def test_five_calls_of_one_session_run_in_one_process_counting_1_to_5(
    pools: Pools, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    pool = pools({"c": stdio(events, session="task")})
    key = SessionKey("task-1", "c")
    answers = [await count(pool, key, n) for n in range(5)]
    assert len({pid for pid, _ in answers}) == 1
    assert [n for _, n in answers] == [1, 2, 3, 4, 5]
    assert pool.holds(key) and pool.stats().sessions == 1


async def test_two_sessions_have_a_process_and_a_counter_each(pools: Pools, tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    pool = pools({"c": stdio(events, session="branch")})
    one, two = SessionKey("thread-1", "c"), SessionKey("thread-2", "c")
    answers = [await count(pool, key, n) for n, key in enumerate([one, two, one, two, one])]
    assert [n for _, n in answers] == [1, 1, 2, 2, 3]
    assert answers[0][0] == answers[2][0] == answers[4][0] != answers[1][0] == answers[3][0]
    assert pool.stats().sessions == 2


async def test_close_scope_ends_the_session_and_a_later_call_opens_a_new_one_unlost(
    pools: Pools, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    pool = pools({"c": stdio(events, session="task")})
    key = SessionKey("task-1", "c")
    first, _ = await count(pool, key)
    assert await pool.close_scope("task-1") == 1
    assert first in pids(events, "closed")  # the server saw its stdin end
    assert gone(first) and not pool.holds(key)
    second, n = await count(pool, key)  # asserts lost is None
    assert second != first and n == 1


async def test_an_idle_session_is_closed_and_its_next_call_says_idle(
    pools: Pools, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    pool = pools({"c": stdio(events, session="task", idle_seconds=0.3)})
    key = SessionKey("task-1", "c")
    first, _ = await count(pool, key)
    await eventually(lambda: not pool.holds(key), "the idle session closed")
    await eventually(lambda: first in pids(events, "closed"), "the server to see the close")
    outcome, lost = await pool.session_call(key, "count", {}, idempotency_key="k", timeout=TIMEOUT)
    assert lost == "idle"
    assert counted(outcome)[0] != first and counted(outcome)[1] == 1


async def test_a_session_whose_server_exits_mid_call_says_its_state_is_lost(
    pools: Pools, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    pool = pools({"c": stdio(events, session="task")})
    key = SessionKey("task-1", "c")
    first, _ = await count(pool, key)
    outcome, lost = await pool.session_call(key, "crash", {}, idempotency_key="x", timeout=TIMEOUT)
    assert outcome.is_error and lost is None
    assert "during the call" in outcome.text and "state" in outcome.text
    assert "lost" in outcome.text
    outcome, lost = await pool.session_call(key, "count", {}, idempotency_key="y", timeout=TIMEOUT)
    assert lost == "exited"
    assert counted(outcome)[0] != first and counted(outcome)[1] == 1
    await eventually(lambda: gone(first), "the crashed process reaped")


async def test_the_process_bound_evicts_the_least_recently_used_idle_session(
    pools: Pools, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    pool = pools({"c": stdio(events, session="task")}, max_processes=2)
    a, b, c = (SessionKey(f"task-{name}", "c") for name in "abc")
    first_a, _ = await count(pool, a)
    await count(pool, b)
    await count(pool, a)  # b is now the least recently used
    await count(pool, c)
    assert pool.stats().processes == 2
    assert pool.holds(a) and pool.holds(c) and not pool.holds(b)
    outcome, lost = await pool.session_call(b, "count", {}, idempotency_key="k", timeout=TIMEOUT)
    assert lost == "evicted" and counted(outcome)[1] == 1
    assert pool.stats().processes == 2
    assert not pool.holds(a)  # a was the least recently used then
    outcome, lost = await pool.session_call(a, "count", {}, idempotency_key="k", timeout=TIMEOUT)
    assert lost == "evicted" and counted(outcome)[0] != first_a


async def test_a_listing_is_cached_until_the_server_says_its_tools_changed(
    pools: Pools, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    pool = pools({"c": stdio(events)})
    for _ in range(3):
        listed = await pool.list_tools("c", timeout=TIMEOUT)
        assert "count" in [tool.name for tool in listed]
        assert "extra" not in [tool.name for tool in listed]
    assert len(pids(events, "list")) == 1
    outcome = await pool.call("c", "change_tools", {}, idempotency_key="c", timeout=TIMEOUT)
    assert not outcome.is_error, outcome.text

    async def extra_listed() -> bool:
        return "extra" in [t.name for t in await pool.list_tools("c", timeout=TIMEOUT)]

    await eventually(extra_listed, "the changed tools listed")


async def test_with_a_listing_ttl_of_0_every_listing_asks_the_server(
    pools: Pools, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    pool = pools({"c": stdio(events, list_ttl_seconds=0)})
    for _ in range(3):
        await pool.list_tools("c", timeout=TIMEOUT)
    assert len(pids(events, "list")) == 3
    assert len(pids(events)) == 1  # one process served the three


async def test_over_http_five_calls_share_one_session_and_its_connection_counting_1_to_5(
    pools: Pools, tmp_path: Path
) -> None:
    # The SDK closes each answer's event stream as soon as it has read the answer; the pool
    # reads on to the stream's end, so the TCP connection serves the next call.
    events = tmp_path / "events.jsonl"
    port = free_port()
    server = start_listening(counter(events, "--http", str(port)), port, tmp_path / "log")
    try:
        pool = pools({"c": McpServerConfig(url=f"http://127.0.0.1:{port}/mcp")})
        answers = [await count(pool, n=n) for n in range(5)]
        assert [n for _, n in answers] == [1, 2, 3, 4, 5]
        sessions = {e["session"] for e in events_in(events) if e["event"] == "call"}
        assert len(sessions) == 1 and None not in sessions
        ports = {e["port"] for e in events_in(events) if e["event"] == "call"}
        assert None not in ports and len(ports) <= 2, ports  # one a call, before
        assert pool.stats() == pool.stats().__class__(processes=0, connections=1, sessions=0)
    finally:
        stop(server)


async def test_over_http_a_server_that_holds_its_answer_streams_open_still_answers_each_call(
    tmp_path: Path,
) -> None:
    # Its streams end a minute after each answer: the pool reads on for a moment only, and
    # closes the stream; no call, and not the pool's close, waits for the minute.
    events = tmp_path / "events.jsonl"
    port = free_port()
    command = counter(events, "--http", str(port), "--linger", "60")
    server = start_listening(command, port, tmp_path / "log")
    pool = McpPool({"c": McpServerConfig(url=f"http://127.0.0.1:{port}/mcp")})
    try:
        answers = [await asyncio.wait_for(count(pool, n=n), 30) for n in range(3)]
        assert [n for _, n in answers] == [1, 2, 3]
        await asyncio.wait_for(pool.aclose(), 30)
    finally:
        await pool.aclose()  # again, after a failure: closing twice is harmless
        stop(server)


async def test_aclose_ends_every_process_and_leaves_no_zombie(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    pool = McpPool({"c": stdio(events, session="task"), "s": stdio(events)})
    await count(pool, SessionKey("task-1", "c"))
    await count(pool, SessionKey("task-2", "c"))
    await pool.call("s", "count", {}, idempotency_key="k", timeout=TIMEOUT)
    started = pids(events)
    assert len(started) == 3 and pool.stats().processes == 3
    await pool.aclose()
    assert all(gone(pid) for pid in started)
    assert sorted(pids(events, "closed")) == sorted(started)  # each saw its stdin close
    assert not children_of(os.getpid(), started)
    assert pool.stats().connections == 0


def children_of(parent: int, among: list[int]) -> list[int]:
    """Which of ``among`` are still child processes of ``parent`` (zombies included)."""
    found = []
    for pid in among:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.append(pid)
    return found


def test_the_counter_server_answers_nothing_in_never_initialize_mode(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    process = subprocess.run(
        counter(events, "--mode", "never-initialize"),
        input=b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}\n',
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert process.stdout == b""
    assert [e["event"] for e in events_in(events)] == ["started", "closed"]


async def test_over_http_a_restarted_server_gets_a_new_session_and_a_task_session_is_lost(
    pools: Pools, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    port = free_port()
    command = counter(events, "--http", str(port))
    server = start_listening(command, port, tmp_path / "log")
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        pool = pools({"c": McpServerConfig(url=url), "t": McpServerConfig(url=url, session="task")})
        key = SessionKey("task-1", "t")
        await pool.call("c", "count", {}, idempotency_key="a", timeout=TIMEOUT)
        _, lost = await pool.session_call(key, "count", {}, idempotency_key="b", timeout=TIMEOUT)
        assert lost is None
        stop(server)
        server = start_listening(command, port, tmp_path / "log")  # it forgot every session
        assert (await count(pool, n=1))[1] == 1  # sent again, once, on a new session
        outcome, lost = await pool.session_call(
            key, "count", {}, idempotency_key="c", timeout=TIMEOUT
        )
        assert lost == "exited" and counted(outcome)[1] == 2
        calls = [e["key"] for e in events_in(events) if e["event"] == "call"]
        assert calls == ["a", "b", "k1", "c"]  # nothing ran twice
    finally:
        stop(server)


async def test_a_call_that_finds_every_process_busy_waits_then_names_the_bound(
    pools: Pools, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    pool = pools({"c": stdio(events), "t": stdio(events, session="task")}, max_processes=1)
    busy = asyncio.ensure_future(pool.call("c", "hang", {}, idempotency_key="h", timeout=60))
    await eventually(lambda: len(pids(events)) == 1, "the hanging call's server started")
    with pytest.raises(TimeoutError, match="ERRANDS_MCP_MAX_PROCESSES"):
        await pool.session_call(
            SessionKey("task-1", "t"), "count", {}, idempotency_key="k", timeout=1
        )
    assert len(pids(events)) == 1  # it never started a second process
    busy.cancel()
    with pytest.raises(asyncio.CancelledError):
        await busy
    outcome, lost = await pool.session_call(
        SessionKey("task-1", "t"), "count", {}, idempotency_key="k", timeout=TIMEOUT
    )
    assert lost is None and counted(outcome)[1] == 1  # the place was free once the call ended


@pytest.mark.fast
def test_a_listing_is_held_for_its_ttl_and_not_when_the_tools_changed_as_it_ran() -> None:
    tool = McpTool(name="count", description="", input_schema={"type": "object"})
    listings = Listings()
    listings.keep("a", [tool], ttl=300, since=10.0, epoch=listings.epoch("a"))
    listings.keep("never", [tool], ttl=0, since=10.0, epoch=0)
    started = listings.epoch("b")
    listings.changed("b")  # while b was being listed
    listings.keep("b", [tool], ttl=300, since=10.0, epoch=started)

    assert listings.get("a", 309.9) == [tool]
    assert listings.get("a", 310.0) is None  # its ttl is over
    assert listings.get("never", 10.0) is None
    assert listings.get("b", 10.0) is None
    listings.changed("a")
    assert listings.get("a", 11.0) is None
