"""B6: tasks parked on a question. What a worker costs while they wait, and how fast they resume.

For each size, a fresh ``python worker.py`` process serves a fresh task queue. N tasks start at
once; each asks the user one question in round 0 and parks (counted through the
``ErrandsWaitingForUser`` search attribute). After a short settle, the worker's resident memory
(VmRSS, sampled every second) and CPU seconds (utime + stime from /proc) are read over an idle
window. Then every task is answered through the ``answer_question`` update (25 in flight, each
sent again under the same update id if its RPC times out), and the clock runs until the last
task has replied.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from temporalio.client import Client, WorkflowUpdateRPCTimeoutOrCancelledError, WorkflowUpdateStage

from bench._harness import Stack, bounded, stack_for, wait_for
from bench._measure import child_pids, cpu_seconds, rss_mib
from bench._model import ANSWER_LABEL, model_name
from errands.settings import Settings

TITLE = "B6 · parked tasks"
FULL = {"sizes": [200, 1000], "idle_seconds": 30.0, "settle_seconds": 5.0}
SMOKE = {"sizes": [3], "idle_seconds": 1.0, "settle_seconds": 0.0, "inline": True}

MODEL = model_name(0, 0, ask=True)
IN_FLIGHT = 100
"""Starts and result waits in flight at once."""
ANSWERS_IN_FLIGHT = 25
"""Answers in flight at once: enough to keep the worker busy, few enough that each one's RPC
is not left waiting behind a long queue."""
ANSWER_ATTEMPTS = 5


async def waiting(client: Client, queue: str) -> int:
    query = f'ErrandsWaitingForUser = true AND TaskQueue = "{queue}"'
    return (await client.count_workflows(query)).count


async def park_and_resume(
    stack: Stack, size: int, idle_seconds: float, settle_seconds: float, inline: bool
) -> dict[str, Any]:
    settings: Settings = stack.settings()
    child = None if inline else stack.spawn_worker(settings)
    if inline:
        await stack.worker(settings)
    pid = os.getpid() if child is None else child.pid
    try:
        # One full task first, so the worker's imports and connections are in place.
        warm = await stack.start_task(settings, MODEL)
        await wait_for(lambda: _is(waiting(stack.client, settings.task_queue), 1), 120, "warm-up")
        await _answer(warm)
        await stack.result(warm)
        rss_empty = rss_mib(pid)

        server = child_pids("temporal")
        worker_park0 = cpu_seconds(pid)
        server_park0 = sum(cpu_seconds(p) for p in server)
        began = time.perf_counter()
        handles = await bounded(IN_FLIGHT, (stack.start_task(settings, MODEL) for _ in range(size)))
        await wait_for(
            lambda: _is(waiting(stack.client, settings.task_queue), size),
            600,
            f"{size} tasks to wait on their question",
        )
        park_s = time.perf_counter() - began
        park_cpu = {
            "worker": cpu_seconds(pid) - worker_park0,
            "dev_server": sum(cpu_seconds(p) for p in server) - server_park0,
        }
        await asyncio.sleep(settle_seconds)

        cpu0 = cpu_seconds(pid)
        server0 = sum(cpu_seconds(p) for p in server)
        samples = []
        end = time.monotonic() + idle_seconds
        while time.monotonic() < end:
            samples.append(rss_mib(pid))
            await asyncio.sleep(min(1.0, max(0.0, end - time.monotonic())))
        idle_cpu = cpu_seconds(pid) - cpu0
        server_cpu = sum(cpu_seconds(p) for p in server) - server0

        worker_resume0 = cpu_seconds(pid)
        server_resume0 = sum(cpu_seconds(p) for p in server)
        began = time.perf_counter()
        await bounded(ANSWERS_IN_FLIGHT, (_answer(h) for h in handles))
        accepted_s = time.perf_counter() - began
        await bounded(IN_FLIGHT, (stack.result(h) for h in handles))
        resume_s = time.perf_counter() - began
        resume_cpu = {
            "worker": cpu_seconds(pid) - worker_resume0,
            "dev_server": sum(cpu_seconds(p) for p in server) - server_resume0,
        }
        rss_after = rss_mib(pid)
    finally:
        if child is not None:
            stack.stop_worker(child)
    return {
        "tasks": size,
        "park_s": round(park_s, 1),
        "park_cpu_ms_per_task": {k: round(v * 1000 / size) for k, v in park_cpu.items()},
        "rss_mib_before_tasks": round(rss_empty, 1),
        "rss_mib_idle_max": round(max(samples), 1),
        "rss_mib_idle_last": round(samples[-1], 1),
        "rss_kib_per_parked_task": round((samples[-1] - rss_empty) * 1024 / size, 1),
        "idle_window_s": idle_seconds,
        "worker_cpu_s_idle": round(idle_cpu, 2),
        "worker_cpu_percent_idle": round(100 * idle_cpu / idle_seconds, 2),
        "dev_server_cpu_s_idle": round(server_cpu, 2),
        "answers_accepted_s": round(accepted_s, 1),
        "resume_all_s": round(resume_s, 1),
        "resumed_per_s": round(size / resume_s, 1),
        "resume_cpu_ms_per_task": {k: round(v * 1000 / size) for k, v in resume_cpu.items()},
        "rss_mib_after_resume": round(rss_after, 1),
    }


async def _answer(handle: Any) -> None:
    """Answer through the update and wait until the task has accepted it. While the worker is
    saturated the update's RPC can time out before the workflow gets to it; sending it again
    under the same update id is safe (the server deduplicates by id)."""
    for _ in range(ANSWER_ATTEMPTS):
        try:
            await handle.start_update(
                "answer_question",
                {"question_set_id": f"{handle.id}-q1", "answers": {"q1": [ANSWER_LABEL]}},
                id=f"{handle.id}-answer",
                wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            )
            return
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            continue
    raise RuntimeError(f"task {handle.id} never accepted its answer")


async def _is(count: Any, wanted: int) -> bool:
    return bool(await count >= wanted)


async def run(
    sizes: list[int],
    idle_seconds: float,
    settle_seconds: float,
    inline: bool = False,
    stack: Stack | None = None,
) -> dict[str, Any]:
    """``inline`` runs the worker in this process (the smoke test's quick path)."""
    async with stack_for("b6", stack) as stack:
        runs = [
            await park_and_resume(stack, n, idle_seconds, settle_seconds, inline) for n in sizes
        ]
    return {
        "shape": "round 0 asks one question and waits; the answer resumes it and it replies",
        "runs": runs,
    }


def verdict(result: dict[str, Any]) -> tuple[str, None, None]:
    parts = [
        f"{r['tasks']:,} parked: worker RSS {r['rss_mib_idle_max']:.0f} MiB, idle CPU "
        f"{r['worker_cpu_percent_idle']}%, all resumed in {r['resume_all_s']} s"
        for r in result["runs"]
    ]
    return "; ".join(parts), None, None


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Shape: {result['shape']}. One `python worker.py` process per size.",
        "",
        "| parked tasks | time to park all s | worker RSS before → idle MiB | per parked task "
        "KiB | worker CPU over idle window | dev server CPU over idle window | answers "
        "accepted s | all resumed and replied s | resumed/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        lines.append(
            f"| {r['tasks']:,} | {r['park_s']} | {r['rss_mib_before_tasks']} → "
            f"{r['rss_mib_idle_max']} | {r['rss_kib_per_parked_task']} | "
            f"{r['worker_cpu_s_idle']} s / {r['idle_window_s']:g} s "
            f"({r['worker_cpu_percent_idle']}%) | {r['dev_server_cpu_s_idle']} s | "
            f"{r['answers_accepted_s']} | **{r['resume_all_s']}** | {r['resumed_per_s']} |"
        )
    lines.append("")
    for r in result["runs"]:
        park, resume = r["park_cpu_ms_per_task"], r["resume_cpu_ms_per_task"]
        lines.append(
            f"- {r['tasks']:,} tasks: CPU per task to park {park['worker']} ms in the worker + "
            f"{park['dev_server']} ms in the dev server, to resume {resume['worker']} + "
            f"{resume['dev_server']} ms; worker RSS {r['rss_mib_after_resume']} MiB after all "
            "replied."
        )
    lines += [
        "",
        "Parking and resuming are CPU-bound the way B2 is: the time to resume N tasks is N times "
        "the per-task CPU above, spread over the cores left by other work. A parked task costs "
        "the worker no CPU at all while it waits (a durable timer on the server, nothing "
        "polling), only the memory of its cached workflow run.",
    ]
    return "\n".join(lines)
