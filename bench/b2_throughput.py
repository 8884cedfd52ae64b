"""B2: a burst of concurrent tasks against 1 and 2 ``python worker.py`` processes.

Every task has the 2-round shape (round 0 delegates 3 branches, round 1 replies): 4 workflows
each. All tasks are started at once; a task's latency runs from its start
call to its result, and throughput is tasks over the time from the first start to the last
result. CPU seconds of each process over the burst show where the machine's 2 cores went.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from bench._harness import Stack, bounded, stack_for
from bench._measure import child_pids, cpu_seconds, load_average, percentile
from bench._model import model_name

TITLE = "B2 · throughput"
FULL = {"tasks": 200, "workers": [1, 2]}
SMOKE = {"tasks": 3, "workers": [1], "inline": True}

MODEL = model_name(1, 3)


async def burst(stack: Stack, workers: int, tasks: int, inline: bool) -> dict[str, Any]:
    settings = stack.settings()
    children = [] if inline else [stack.spawn_worker(settings) for _ in range(workers)]
    for _ in range(workers if inline else 0):
        await stack.worker(settings)
    try:
        # Warm every process up (sandbox imports, connections) before the clock starts.
        await asyncio.gather(*(stack.run_task(settings, MODEL) for _ in range(2 * workers)))
        server = child_pids("temporal")
        pids = {"workers": [c.pid for c in children], "dev_server": server}
        before = _cpu(pids)
        own_before = time.process_time()
        load_before = load_average()

        latencies: list[float] = []

        async def one() -> None:
            began = time.perf_counter()
            handle = await stack.start_task(settings, MODEL)
            await stack.result(handle)
            latencies.append(time.perf_counter() - began)

        began = time.perf_counter()
        await bounded(tasks, (one() for _ in range(tasks)))
        wall = time.perf_counter() - began
        after = _cpu(pids)
        own = time.process_time() - own_before
    finally:
        for child in children:
            stack.stop_worker(child)
    ms = [x * 1000 for x in latencies]
    return {
        "workers": workers,
        "tasks": tasks,
        "wall_s": round(wall, 2),
        "tasks_per_s": round(tasks / wall, 2),
        "p50_ms": round(percentile(ms, 50)),
        "p95_ms": round(percentile(ms, 95)),
        "max_ms": round(max(ms)),
        "cpu_s": {
            "workers": round(after["workers"] - before["workers"], 1),
            "dev_server": round(after["dev_server"] - before["dev_server"], 1),
            "bench_process (client + model server)": round(own, 1),
        },
        "load_average_before": load_before,
    }


def _cpu(pids: dict[str, list[int]]) -> dict[str, float]:
    return {name: sum(cpu_seconds(p) for p in group) for name, group in pids.items()}


async def run(
    tasks: int, workers: list[int], inline: bool = False, stack: Stack | None = None
) -> dict[str, Any]:
    """``inline`` runs the workers in this process (the smoke test's quick path)."""
    async with stack_for("b2", stack) as stack:
        runs = [await burst(stack, n, tasks, inline) for n in workers]
    return {
        "shape": "2 rounds: round 0 delegates 3 branches, round 1 replies",
        "cpus": os.cpu_count(),
        "runs": runs,
    }


def verdict(result: dict[str, Any]) -> tuple[str, None, None]:
    parts = [
        f"{r['workers']} worker{'s' if r['workers'] > 1 else ''}: {r['tasks_per_s']} tasks/s, "
        f"p50 {r['p50_ms'] / 1000:.1f} s, p95 {r['p95_ms'] / 1000:.1f} s"
        for r in result["runs"]
    ]
    return "; ".join(parts), None, None


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Shape: {result['shape']}; every task started at once.",
        "",
        "| worker processes | tasks | wall s | tasks/s | p50 ms | p95 ms | max ms | CPU s: "
        "workers / dev server / bench process |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        cpu = " / ".join(str(v) for v in r["cpu_s"].values())
        lines.append(
            f"| {r['workers']} | {r['tasks']} | {r['wall_s']} | **{r['tasks_per_s']}** | "
            f"{r['p50_ms']} | {r['p95_ms']} | {r['max_ms']} | {cpu} |"
        )
    cpus = result.get("cpus") or 1
    notes = []
    for r in result["runs"]:
        per_task = sum(r["cpu_s"].values()) / r["tasks"]
        notes.append(
            f"with {r['workers']} worker process{'es' if r['workers'] > 1 else ''}, "
            f"{per_task * 1000:.0f} ms of CPU per task "
            f"({r['cpu_s']['dev_server'] / r['tasks'] * 1000:.0f} ms of it in the dev server), "
            f"so {cpus} idle cores could finish at most {cpus / per_task:.1f} tasks/s"
        )
    lines += [
        "",
        "What limits it, measured: " + "; ".join(notes) + ". The burst is CPU-bound, and the "
        "dev server (one SQLite file, one history shard) takes the largest share: a second "
        "worker process helps only as far as the cores other work leaves free allow. Each "
        "task's latency is mostly its wait behind the others in the burst.",
    ]
    return "\n".join(lines)
