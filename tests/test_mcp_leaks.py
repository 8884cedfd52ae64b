"""Stateful MCP sessions leave nothing behind (issue 26, acceptance 3): after a burst of short
tasks through a ``python worker.py`` process, every session the server saw start is closed (all
but the worker's shared listing connection) and the worker runs as many MCP server processes as
it did after its warm-up; a task that fails after opening its session closes it too.

The server is tests/mcp_tiny_server.py (stdlib only: it starts in milliseconds), configured with
``"session": "task"`` for the main agent. Its ``--events`` file records each process's start and
close; the worker's MCP processes are its children whose command line names the server (Linux:
/proc). Real dev server, scripted model through the real OpenAI client.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from temporalio.client import Client

from errands.adapters.scripted import Fail, RecordedRequest, Reply, ScriptedModelServer
from errands.contracts.workflows import TaskResult
from tests.conftest import ROOT, ProcessWorkers, worker_process
from tests.helpers import eventually, final, start_task, tool
from tests.mcp_counter_server import events_in

SERVER = ROOT / "tests" / "mcp_tiny_server.py"
COUNT = "mcp__tiny__count"
SCRIPTED = "gpt-leaks"
MODEL = f"openai:{SCRIPTED}"
TASKS = 40
IN_FLIGHT = 10
COUNTED = re.compile(r'"count":\s*(\d+)')
PID = re.compile(r'"pid":\s*(\d+)')


def tiny_env(workers: ProcessWorkers, events: Path) -> dict[str, str]:
    """A worker's environment whose main agent has the tiny server, one session per task."""
    tiny = {
        "command": [sys.executable, str(SERVER), "--events", str(events)],
        "session": "task",
        "for": ["main"],
    }
    return {**workers.env, "ERRANDS_MCP_SERVERS": json.dumps({"tiny": tiny})}


def open_pids(events: Path) -> set[int]:
    """Server processes that wrote ``started`` and not yet ``closed``."""
    seen = events_in(events)
    started = {e["pid"] for e in seen if e["event"] == "started"}
    return started - {e["pid"] for e in seen if e["event"] == "closed"}


def started_pids(events: Path) -> set[int]:
    return {e["pid"] for e in events_in(events) if e["event"] == "started"}


def mcp_children(worker: subprocess.Popen[bytes]) -> set[int]:
    """The worker's child processes running the tiny server."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # it exited while we looked
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        if parent == worker.pid and str(SERVER).encode() in cmdline:
            found.add(int(entry.name))
    return found


def counting_once(
    seen: list[str], then: Callable[[], Reply | Fail] = lambda: final("counted")
) -> Callable[[RecordedRequest], Reply | Fail]:
    """The main agent's step: call ``count`` once, then (its result in ``seen``) ``then``."""

    def step(request: RecordedRequest) -> Reply | Fail:
        results = [m["content"] for m in request.body["messages"] if m["role"] == "tool"]
        if not results:
            return tool(COUNT)
        seen.extend(results)
        return then()

    return step


async def replied(
    client: Client, queue: str, count: int, in_flight: int = IN_FLIGHT
) -> list[TaskResult]:
    """Run ``count`` tasks, ``in_flight`` at a time; each must reply."""
    gate = asyncio.Semaphore(in_flight)

    async def one(n: int) -> TaskResult:
        async with gate:
            handle = await start_task(client, queue, f"Count once ({n}).", model=MODEL)
            return await asyncio.wait_for(handle.result(), 120)

    results = await asyncio.gather(*(one(n) for n in range(count)))
    for result in results:
        assert result.status == "replied", result.error
    return list(results)


async def test_forty_tasks_leave_every_session_closed_and_no_server_process_behind(
    client: Client,
    scripted: ScriptedModelServer,
    process_workers: ProcessWorkers,
    tmp_path: Path,
) -> None:
    events = tmp_path / "events.jsonl"
    seen: list[str] = []
    scripted.script(SCRIPTED, *[counting_once(seen)] * (2 * (1 + TASKS)))

    with worker_process(tiny_env(process_workers, events)) as worker:
        await replied(client, process_workers.queue, 1)
        # The warm-up's session closes; the worker's listing connection stays open.
        listing = await eventually(
            lambda: len(open_pids(events)) == 1 and open_pids(events),
            "the warm-up task's session to close",
        )
        warm = await eventually(lambda: mcp_children(worker), "the worker's listing process")
        assert warm == listing

        await replied(client, process_workers.queue, TASKS)

        await eventually(
            lambda: open_pids(events) == listing,
            f"every session of the {TASKS} tasks to close",
        )
        await eventually(
            lambda: mcp_children(worker) == warm,
            "the worker to run only its warm-up's MCP process",
        )
    # Each task opened a session of its own: the server counted its call as the first.
    assert [int(COUNTED.findall(text)[-1]) for text in seen] == [1] * (1 + TASKS)
    assert len(started_pids(events) - listing) == 1 + TASKS


async def test_a_task_that_fails_after_opening_its_session_closes_it(
    client: Client,
    scripted: ScriptedModelServer,
    process_workers: ProcessWorkers,
    tmp_path: Path,
) -> None:
    events = tmp_path / "events.jsonl"
    seen: list[str] = []
    revoked = counting_once(seen, then=lambda: Fail(401, "key revoked"))
    scripted.script(SCRIPTED, revoked, revoked)

    with worker_process(tiny_env(process_workers, events)) as worker:
        handle = await start_task(client, process_workers.queue, "Count, then fail.", model=MODEL)
        result = await asyncio.wait_for(handle.result(), 120)

        assert result.status == "failed"
        assert result.error is not None and result.error.kind == "credential"
        [text] = seen
        session = int(PID.findall(text)[-1])
        await eventually(
            lambda: session not in open_pids(events), "the failed task's session to close"
        )
        await eventually(
            lambda: session not in mcp_children(worker) and len(mcp_children(worker)) == 1,
            "the worker to keep only its listing process",
        )
    assert session in started_pids(events)
