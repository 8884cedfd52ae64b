"""The worker's MCP connection pool against servers that misbehave (tests/mcp_counter_server.py):
one that exits in the middle of a call, one that never answers ``initialize``, one that hangs,
one that floods its stdout with text that is not MCP. Each costs the call it was in, within the
call's timeout, and the pool goes on with a new process; many calls cost one process."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from errands.adapters.mcp.config import McpServerConfig
from errands.adapters.mcp.pool import McpPool
from tests.helpers import eventually
from tests.mcp_counter_server import events_in

TIMEOUT = 3.0
"""The timeout of a call under test."""
SLACK = 2.0
"""What a call may take beyond its timeout on a loaded 2-core machine."""


def counter(events: Path, *extra: str) -> McpServerConfig:
    command = [sys.executable, "-m", "tests.mcp_counter_server", "--events", str(events), *extra]
    return McpServerConfig(command=command)


def started(events: Path) -> list[int]:
    return [e["pid"] for e in events_in(events) if e["event"] == "started"]


def gone(pid: int) -> bool:
    """Whether the process ``pid`` has exited and been reaped."""
    return not Path(f"/proc/{pid}").exists()


def running(argument: str) -> list[int]:
    """This process's children whose command line has ``argument`` (zombies included): a
    server killed before it could say it started is found too."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and argument.encode() in command:
            found.append(int(entry.name))
    return found


def rss_mb() -> float:
    """This process's resident memory, in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.fixture
async def pool(tmp_path: Path) -> AsyncIterator[McpPool]:
    made = McpPool(
        {
            "c": counter(tmp_path / "events.jsonl"),
            "mute": counter(tmp_path / "mute.jsonl", "--mode", "never-initialize"),
        }
    )
    yield made
    await made.aclose()


async def count(pool: McpPool) -> int:
    """A ``count`` call that works; the pid that answered it."""
    outcome = await pool.call("c", "count", {}, idempotency_key="k", timeout=20)
    assert not outcome.is_error, outcome.text
    pid: int = json.loads(outcome.text)["pid"]
    return pid


async def test_a_server_that_exits_mid_call_costs_that_call_and_the_next_gets_a_new_one(
    pool: McpPool, tmp_path: Path
) -> None:
    first = await count(pool)
    began = time.monotonic()
    outcome = await pool.call("c", "crash", {}, idempotency_key="x", timeout=TIMEOUT)
    assert time.monotonic() - began < TIMEOUT + SLACK
    assert outcome.is_error
    assert "during the call" in outcome.text and "may or may not" in outcome.text
    second = await count(pool)
    assert second != first
    await eventually(lambda: gone(first), "the crashed process reaped")


async def test_a_server_that_never_answers_initialize_times_out_and_is_killed(
    pool: McpPool, tmp_path: Path
) -> None:
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="did not answer within 3 s"):
        await pool.call("mute", "anything", {}, idempotency_key="x", timeout=TIMEOUT)
    assert time.monotonic() - began < TIMEOUT + SLACK
    await eventually(
        lambda: not running("never-initialize"), "the mute server killed", timeout=SLACK
    )
    assert pool.stats().processes == 0
    await count(pool)


async def test_a_call_that_hangs_times_out_and_its_process_is_killed(
    pool: McpPool, tmp_path: Path
) -> None:
    first = await count(pool)
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        await pool.call("c", "hang", {}, idempotency_key="h", timeout=TIMEOUT)
    assert time.monotonic() - began < TIMEOUT + SLACK
    await eventually(lambda: gone(first), "the hung server killed", timeout=SLACK)
    assert await count(pool) != first


async def test_a_server_that_floods_stdout_costs_its_call_within_the_timeout_in_bounded_memory(
    pool: McpPool, tmp_path: Path
) -> None:
    first = await count(pool)
    before = rss_mb()
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        await pool.call("c", "flood", {}, idempotency_key="f", timeout=TIMEOUT)
    assert time.monotonic() - began < TIMEOUT + SLACK
    assert rss_mb() - before < 100
    await eventually(lambda: gone(first), "the flooding server killed", timeout=SLACK)
    assert await count(pool) != first


async def test_the_loop_stays_responsive_while_a_server_floods(pool: McpPool) -> None:
    await count(pool)
    flood = asyncio.ensure_future(pool.call("c", "flood", {}, idempotency_key="f", timeout=TIMEOUT))
    worst = 0.0
    while not flood.done():  # how long the loop takes to come back to this task, each time
        began = time.monotonic()
        await asyncio.sleep(0.01)
        worst = max(worst, time.monotonic() - began)
    with pytest.raises(TimeoutError):
        flood.result()
    assert worst < 0.5, f"the loop was held for {worst:.2f} s"


async def test_200_sequential_calls_use_one_process(pool: McpPool, tmp_path: Path) -> None:
    pids = {await count(pool) for _ in range(200)}
    assert len(pids) == 1
    assert started(tmp_path / "events.jsonl") == list(pids)
    stats = pool.stats()
    assert (stats.processes, stats.connections, stats.sessions) == (1, 1, 0)


async def test_an_oversized_answer_is_cut_for_its_call_alone(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "tests.mcp_hostile_server", "--dir", str(tmp_path)]
    pool = McpPool({"h": McpServerConfig(command=command)})
    try:
        cut = await pool.call(
            "h", "dump", {"size": 3_000_000}, idempotency_key="a", timeout=60, max_bytes=10_000
        )
        assert not cut.is_error and cut.text.startswith("dump start")
        assert len(cut.text.encode()) < 12_000 and "dump end" not in cut.text
        whole = await pool.call(
            "h", "dump", {"size": 50_000}, idempotency_key="b", timeout=60, max_bytes=100_000
        )
        assert whole.text.endswith("dump end") and len(whole.text) == 50_000
        small = await pool.call(
            "h", "dump", {"size": 500}, idempotency_key="c", timeout=60, max_bytes=10_000
        )
        assert small.text.endswith("dump end")
        assert pool.stats().processes == 1  # one process served the three
    finally:
        await pool.aclose()
