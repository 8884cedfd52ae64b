"""B6: tasks parked on a question. What a worker costs while they wait, and how fast they resume.

For each size, a fresh ``python worker.py`` process serves a fresh task queue. N tasks start at
once; each asks the user one question in round 0 and parks (counted through the
``ErrandsWaitingForUser`` search attribute). After a short settle, the worker's resident memory
(VmRSS, sampled every second) and CPU seconds (utime + stime from /proc) are read over an idle
window. Then every task is answered through the ``answer_question`` update, 100 in flight at a
time, and the clock runs until the last task has replied.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from temporalio.client import Client

from bench._harness import Stack, bounded, child_pids, cpu_seconds, rss_mib, wait_for
from bench._model import ANSWER_LABEL, model_name
from errands.settings import Settings

TITLE = "B6 · parked tasks"
FULL = {"sizes": [200, 1000], "idle_seconds": 30.0, "settle_seconds": 5.0}
SMOKE = {"sizes": [3], "idle_seconds": 1.0, "settle_seconds": 0.0}

MODEL = model_name(0, 0, ask=True)
IN_FLIGHT = 100


async def waiting(client: Client, queue: str) -> int:
    query = f'ErrandsWaitingForUser = true AND TaskQueue = "{queue}"'
    return (await client.count_workflows(query)).count


async def park_and_resume(
    stack: Stack, size: int, idle_seconds: float, settle_seconds: float
) -> dict[str, Any]:
    settings: Settings = stack.settings()
    child = stack.spawn_worker(settings)
    try:
        # One full task first, so the worker's imports and connections are in place.
        warm = await stack.start_task(settings, MODEL)
        await wait_for(lambda: _is(waiting(stack.client, settings.task_queue), 1), 120, "warm-up")
        await _answer(warm)
        await warm.result()
        rss_empty = rss_mib(child.pid)

        server = child_pids("temporal")
        worker_park0 = cpu_seconds(child.pid)
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
            "worker": cpu_seconds(child.pid) - worker_park0,
            "dev_server": sum(cpu_seconds(p) for p in server) - server_park0,
        }
        await asyncio.sleep(settle_seconds)

        cpu0 = cpu_seconds(child.pid)
        server0 = sum(cpu_seconds(p) for p in server)
        samples = []
        end = time.monotonic() + idle_seconds
        while time.monotonic() < end:
            samples.append(rss_mib(child.pid))
            await asyncio.sleep(min(1.0, max(0.0, end - time.monotonic())))
        idle_cpu = cpu_seconds(child.pid) - cpu0
        server_cpu = sum(cpu_seconds(p) for p in server) - server0

        worker_resume0 = cpu_seconds(child.pid)
        server_resume0 = sum(cpu_seconds(p) for p in server)
        began = time.perf_counter()
        await bounded(IN_FLIGHT, (_answer(h) for h in handles))
        accepted_s = time.perf_counter() - began
        results = await bounded(IN_FLIGHT, (h.result() for h in handles))
        resume_s = time.perf_counter() - began
        resume_cpu = {
            "worker": cpu_seconds(child.pid) - worker_resume0,
            "dev_server": sum(cpu_seconds(p) for p in server) - server_resume0,
        }
        failed = [r.task_id for r in results if r.status != "replied"]
        if failed:
            raise RuntimeError(f"{len(failed)} tasks did not reply after their answer: {failed}")
        rss_after = rss_mib(child.pid)
    finally:
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
    await handle.execute_update(
        "answer_question",
        {"question_set_id": f"{handle.id}-q1", "answers": {"q1": [ANSWER_LABEL]}},
    )


async def _is(count: Any, wanted: int) -> bool:
    return bool(await count >= wanted)


async def run(sizes: list[int], idle_seconds: float, settle_seconds: float) -> dict[str, Any]:
    async with Stack("b6") as stack:
        runs = [await park_and_resume(stack, n, idle_seconds, settle_seconds) for n in sizes]
    return {
        "shape": "round 0 asks one question and waits; the answer resumes it and it replies",
        "runs": runs,
    }


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
    return "\n".join(lines)
