"""B8: stateful MCP sessions: what a worker holds after a thousand tasks have each opened one.

One ``python worker.py`` process serves a queue of its own; its ``ERRANDS_MCP_SERVERS`` gives the
main agent tests/mcp_tiny_server.py (a stdlib MCP server that starts in milliseconds) with
``"session": "task"``. Each task's round 0 calls ``mcp__tiny__count`` once (a new session: a
server process of its own on the worker), then replies; its session is closed as the task ends.
After a warm-up, the worker's MCP server processes (its children whose command line names the
server, from /proc), its resident memory (VmRSS) and its open file descriptors are read; then
N tasks run, 20 in flight; once every session the server saw start has closed again (its
``--events`` file: ``closed`` matches ``started``, all but the worker's shared listing
connections), the same figures are read, and once more after M tasks more. The growth over those
last M tasks is the leak rate. Idle sessions are never reaped here (``idle_seconds`` an hour):
what closes them is their task's end.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from bench._harness import ROOT, Stack, bounded, stack_for, stop_process, wait_for
from bench._measure import cpu_seconds, load_average, rss_mib
from bench._model import model_name
from errands.settings import Settings

TITLE = "B8 · stateful MCP sessions: leak bound"
FULL = {"tasks": 1000, "more": 500, "warm_up": 20}
SMOKE = {"tasks": 3, "more": 2, "warm_up": 1, "inline": True}

SERVER = "tiny"
PROGRAM = ROOT / "tests" / "mcp_tiny_server.py"
MODEL = model_name(0, 0, main_tool=True)
IN_FLIGHT = 20
"""Tasks in flight at once: each holds one session (one server process) while it runs."""
SETTLE_TIMEOUT = 120.0
"""Longest wait for the sessions of finished tasks to close; past it, what is open is counted."""
SAMPLE_SECONDS = 0.5
"""How often the worker's MCP processes are counted while tasks run (their peak)."""
FLAT_KIB_PER_TASK = 10.0
"""RSS growth per task over the last ``more`` tasks below which the worker counts as flat: far
below what a session left open costs (a process handle, pipes, buffers, a client session)."""


def mcp_servers(events: Path) -> dict[str, Any]:
    """The worker's ``ERRANDS_MCP_SERVERS``: the tiny server's ``count``, one session per task,
    for the main agent only."""
    return {
        SERVER: {
            "command": [sys.executable, str(PROGRAM), "--events", str(events)],
            "tools": ["count"],
            "session": "task",
            "for": ["main"],
            "idle_seconds": 3600,
        }
    }


def server_processes(parent: int) -> int:
    """Running children of ``parent`` whose command line names the tiny server."""
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # it exited while we looked
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        if int(ppid) == parent and state != "Z" and str(PROGRAM).encode() in cmdline:
            count += 1
    return count


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def sessions(events: Path) -> tuple[int, int]:
    """Server processes that started, and those that closed, as the events file says so far."""
    lines = events.read_text().splitlines() if events.exists() else []
    seen = [json.loads(line)["event"] for line in lines if line.strip()]
    return seen.count("started"), seen.count("closed")


async def tasks_replied(stack: Stack, settings: Settings, count: int) -> float:
    """Run ``count`` tasks, ``IN_FLIGHT`` at a time, each to its reply: seconds it took."""

    async def one() -> None:
        await stack.result(await stack.start_task(settings, MODEL))

    began = time.perf_counter()
    await bounded(IN_FLIGHT, (one() for _ in range(count)))
    return time.perf_counter() - began


async def with_peak(pid: int, job: Awaitable[float]) -> tuple[float, int]:
    """``job``'s result and the most tiny-server children ``pid`` had while it ran (sampled
    every ``SAMPLE_SECONDS``)."""
    peak = server_processes(pid)

    async def sample() -> None:
        nonlocal peak
        while True:
            await asyncio.sleep(SAMPLE_SECONDS)
            peak = max(peak, server_processes(pid))

    sampler = asyncio.create_task(sample())
    try:
        result = await job
    finally:
        sampler.cancel()
    return result, peak


async def settled(events: Path, shared: int) -> float:
    """Seconds until at most ``shared`` server processes are open (every session closed), or
    ``SETTLE_TIMEOUT`` when some never close."""
    began = time.perf_counter()

    async def closed() -> bool:
        started, ended = sessions(events)
        return started - ended <= shared

    try:
        await wait_for(closed, SETTLE_TIMEOUT, "the finished tasks' MCP sessions to close")
    except TimeoutError:
        return SETTLE_TIMEOUT
    return time.perf_counter() - began


def reading(pid: int, events: Path, tasks: int, settle_s: float) -> dict[str, Any]:
    """What the worker holds now, after ``tasks`` tasks in all."""
    started, closed = sessions(events)
    return {
        "tasks": tasks,
        "mcp_processes": server_processes(pid),
        "open_in_events": started - closed,
        "rss_mib": round(rss_mib(pid), 1),
        "open_files": open_files(pid),
        "sessions_started": started,
        "sessions_closed": closed,
        "settle_s": round(settle_s, 2),
    }


async def run(
    tasks: int, more: int, warm_up: int, inline: bool = False, stack: Stack | None = None
) -> dict[str, Any]:
    """``inline`` runs the worker in this process (the smoke test's quick path)."""
    async with stack_for("b8", stack) as stack:
        events = stack.dir / f"b8-events-{uuid.uuid4().hex[:8]}.jsonl"
        settings = stack.settings(mcp_servers=mcp_servers(events))
        child = None if inline else stack.spawn_worker(settings)
        if child is None:
            await stack.worker(settings)
        pid = os.getpid() if child is None else child.pid
        try:
            await tasks_replied(stack, settings, warm_up)
            # Each warm-up task opened one session; what else started, and stays open, is the
            # worker's shared connections for listings (one, unless listings ran at once).
            started, _ = sessions(events)
            settle = await settled(events, shared=started - warm_up)
            warm = reading(pid, events, warm_up, settle)
            shared = warm["open_in_events"]

            load_before, cpu0 = load_average(), cpu_seconds(pid)
            wall, peak = await with_peak(pid, tasks_replied(stack, settings, tasks))
            cpu = cpu_seconds(pid) - cpu0
            load_after = load_average()
            after = reading(pid, events, warm_up + tasks, await settled(events, shared))

            await tasks_replied(stack, settings, more)
            last = reading(pid, events, warm_up + tasks + more, await settled(events, shared))
        finally:
            if child is not None:
                stop_process(child)
    return {
        "shape": "round 0 calls mcp__tiny__count once in the task's own session, then replies",
        "worker": "this process" if inline else "python worker.py",
        "in_flight": IN_FLIGHT,
        "readings": [warm, after, last],
        "mcp_processes_peak": peak,
        "sessions_opened": after["sessions_started"] - warm["sessions_started"],
        "sessions_closed": after["sessions_closed"] - warm["sessions_closed"],
        "tasks_per_s": round(tasks / wall, 2),
        "worker_cpu_ms_per_task": round(cpu * 1000 / tasks, 1),
        "load_before": load_before,
        "load_after": load_after,
        "rss_kib_per_task": round((after["rss_mib"] - warm["rss_mib"]) * 1024 / tasks, 2),
        "rss_kib_per_task_last": round((last["rss_mib"] - after["rss_mib"]) * 1024 / more, 2),
    }


def verdict(result: dict[str, Any]) -> tuple[str, str, bool]:
    warm, after, last = result["readings"]
    figure = (
        f"MCP processes {warm['mcp_processes']} → {after['mcp_processes']} after "
        f"{after['tasks'] - warm['tasks']:,} tasks → {last['mcp_processes']} after "
        f"{last['tasks'] - after['tasks']:,} more; RSS {warm['rss_mib']:.0f} → "
        f"{after['rss_mib']:.0f} → {last['rss_mib']:.0f} MiB "
        f"({result['rss_kib_per_task_last']:+.1f} KiB a task over the last "
        f"{last['tasks'] - after['tasks']:,})"
    )
    met = (
        warm["mcp_processes"] == after["mcp_processes"] == last["mcp_processes"]
        and result["rss_kib_per_task_last"] <= FLAT_KIB_PER_TASK
    )
    return figure, "process count back to the start; RSS flat", met


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Shape: {result['shape']}. Worker: {result['worker']}; {result['in_flight']} tasks in "
        "flight.",
        "",
        "| after | tasks in all | worker's MCP processes | open in the events file | worker "
        "RSS MiB | worker's open files | server processes started / closed | sessions closed "
        "within s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    names = ["warm-up", "the measured tasks", "more tasks"]
    for name, r in zip(names, result["readings"], strict=True):
        lines.append(
            f"| {name} | {r['tasks']:,} | **{r['mcp_processes']}** | {r['open_in_events']} | "
            f"**{r['rss_mib']}** | {r['open_files']} | {r['sessions_started']:,} / "
            f"{r['sessions_closed']:,} | {r['settle_s']} |"
        )
    lines += [
        "",
        f"- Over the measured tasks: {result['sessions_opened']:,} sessions opened, "
        f"{result['sessions_closed']:,} closed; {result['tasks_per_s']} tasks/s, worker CPU "
        f"{result['worker_cpu_ms_per_task']} ms a task; load average "
        f"{' / '.join(f'{v:.2f}' for v in result['load_before'])} before, "
        f"{' / '.join(f'{v:.2f}' for v in result['load_after'])} after.",
        f"- At most {result['mcp_processes_peak']} MCP processes at once while they ran "
        f"(sampled every {SAMPLE_SECONDS:g} s; the pool's bound is "
        f"`ERRANDS_MCP_MAX_PROCESSES`, 32 by default).",
        f"- RSS growth: {result['rss_kib_per_task']:+.2f} KiB a task over the measured tasks, "
        f"{result['rss_kib_per_task_last']:+.2f} over the last ones (flat: at most "
        f"{FLAT_KIB_PER_TASK:g}).",
        "",
        "Every task's session closes with its task. The server processes still open are the "
        "worker's shared connections, which serve tool listings: one is opened for each listing "
        "that finds none idle (the warm-up's tasks start together, so several list at once), "
        "and they stay open for later listings until idle past `idle_seconds`.",
    ]
    return "\n".join(lines)
