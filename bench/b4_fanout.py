"""B4: fan-out. One delegating round with 1, 8 and 32 branches, then a reply.

Sizes run interleaved, one task at a time, on an in-process worker. The round's time is read
from the task's history: from round 0's model call being scheduled to round 1's, which covers
the round's model call, its acknowledgement, starting every branch, every branch's own
activities, the parent taking in the last completion and preparing the next round. End-to-end
time (start call to result) is shown beside it, with the CPU the task cost this process
(worker and client) and the dev server; the scripted model server runs in a process of its own,
its CPU not counted (about 0.6 ms a call). The hand-written floor (B1's floor + local,
its hops counted from the first errands task's history, with N children) runs beside it, with
its own CPU, so the scaling Temporal itself shows on this machine is measured in the same run.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from typing import Any

from temporalio.api.enums.v1 import EventType

from bench._harness import Stack, stack_for
from bench._measure import child_pids, cpu_seconds, history_of
from bench._model import model_name
from bench.b1_overhead import plan_from_history
from errands.contracts.workflows import RoundSettings

TITLE = "B4 · fan-out"
FULL = {"branches": [1, 8, 32], "repeats": 20, "warmup": 1}
"""Twenty tasks of each size: a median of ten moved by 0.1 of the ratio between runs."""
SMOKE = {"branches": [1, 2], "repeats": 1, "warmup": 0}
TARGET = 1.1
"""The largest round's task, end to end, against the hand-written floor of the same width run
beside it: what errands adds to Temporal's own cost of a wide fan-out."""


async def round_seconds(stack: Stack, workflow_id: str) -> float:
    events, _ = await history_of(stack.client, workflow_id)
    model_calls = [
        e.event_time.ToDatetime()
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "round_step"
    ]
    return (model_calls[1] - model_calls[0]).total_seconds()


async def run(
    branches: list[int], repeats: int, warmup: int, stack: Stack | None = None
) -> dict[str, Any]:
    wide = RoundSettings(max_subtasks=max(branches))
    samples: dict[str, dict[int, list[float]]] = {
        k: {n: [] for n in branches}
        for k in (
            "round",
            "end",
            "cpu_here",
            "cpu_server",
            "floor",
            "floor_cpu_here",
            "floor_cpu_server",
        )
    }
    async with stack_for("b4", stack) as stack:
        settings = stack.settings()
        await stack.worker(settings)
        floor_queue = await stack.floor_worker()
        server = child_pids("temporal")
        _, counted_from = await stack.run_task(
            settings, model_name(1, branches[0]), round_settings=wide
        )
        hops, _ = await plan_from_history(stack, counted_from)
        for size in branches[:warmup]:
            await stack.run_task(settings, model_name(1, size), round_settings=wide)
        for _ in range(repeats):
            for size in branches:
                here, there = _cpu(server)
                elapsed, wid = await stack.run_task(
                    settings, model_name(1, size), round_settings=wide
                )
                after = _cpu(server)
                samples["cpu_here"][size].append(after[0] - here)
                samples["cpu_server"][size].append(after[1] - there)
                samples["end"][size].append(elapsed)
                samples["round"][size].append(await round_seconds(stack, wid))
                plan = dataclasses.replace(hops, children=size)
                here, there = _cpu(server)
                samples["floor"][size].append((await stack.run_floor(floor_queue, plan))[0])
                after = _cpu(server)
                samples["floor_cpu_here"][size].append(after[0] - here)
                samples["floor_cpu_server"][size].append(after[1] - there)

    med = {k: {n: statistics.median(v) for n, v in by.items()} for k, by in samples.items()}
    first = branches[0]
    sizes = [
        {
            "branches": n,
            "round_median_ms": round(med["round"][n] * 1000, 1),
            "round_ratio": round(med["round"][n] / med["round"][first], 2),
            "end_to_end_median_ms": round(med["end"][n] * 1000, 1),
            "end_to_end_ratio": round(med["end"][n] / med["end"][first], 2),
            "floor_median_ms": round(med["floor"][n] * 1000, 1),
            "floor_ratio": round(med["floor"][n] / med["floor"][first], 2),
            "against_floor": round(med["end"][n] / med["floor"][n], 2),
            "cpu_s_bench_process": round(med["cpu_here"][n], 2),
            "cpu_s_dev_server": round(med["cpu_server"][n], 2),
            "floor_cpu_s": round(med["floor_cpu_here"][n] + med["floor_cpu_server"][n], 2),
            "floor_cpu_s_bench_process": round(med["floor_cpu_here"][n], 2),
            "floor_cpu_s_dev_server": round(med["floor_cpu_server"][n], 2),
            "n": len(samples["round"][n]),
        }
        for n in branches
    ]
    return {
        "cpus": os.cpu_count(),
        "shape": "round 0 delegates N branches (max_subtasks set to the largest N), "
        f"round 1 replies; floor: {_count(hops.local_before, 'local activity')} and "
        f"{_count(hops.before, 'activity')}, N children of "
        f"{_count(hops.child_activities, 'activity')}, "
        f"{_count(hops.local_after, 'local activity')} and {_count(hops.after, 'activity')}",
        "sizes": sizes,
        "target": f"{branches[-1]}-branch task end to end <= {TARGET}x its floor",
    }


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun.removesuffix('y')}ies"


def _cpu(server: list[int]) -> tuple[float, float]:
    """CPU seconds so far of this process and of the dev server."""
    return time.process_time(), sum(cpu_seconds(p) for p in server)


def verdict(result: dict[str, Any]) -> tuple[str, str, bool]:
    first, last = result["sizes"][0], result["sizes"][-1]
    against = _against_floor(last)
    figure = (
        f"{last['branches']} branches end to end {against}× the {last['branches']}-child floor "
        f"({last['end_to_end_median_ms'] / 1000:.2f} s vs {last['floor_median_ms'] / 1000:.2f} s); "
        f"the round {last['round_ratio']}× the {first['branches']}-branch round, the floor "
        f"{last['floor_ratio']}× its own"
    )
    return figure, f"≤ {TARGET:g}× the floor", against <= TARGET


def _against_floor(size: dict[str, Any]) -> float:
    """End to end against the floor of the same width (computed for results from before it
    was recorded)."""
    if "against_floor" in size:
        return float(size["against_floor"])
    return round(size["end_to_end_median_ms"] / size["floor_median_ms"], 2)


def _floor_cpu(size: dict[str, Any]) -> str:
    """The floor's CPU, split as errands' is (results from before the split give the sum)."""
    if "floor_cpu_s_dev_server" in size:
        return f"{size['floor_cpu_s_bench_process']} / {size['floor_cpu_s_dev_server']}"
    return str(size.get("floor_cpu_s", "—"))


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Shape: {result['shape']}. Medians.",
        "",
        "| branches | delegating round ms | × 1 branch | end to end ms | × 1 branch | floor ms "
        "| floor × 1 | end to end × floor | CPU s: bench process / dev server "
        "| floor CPU s: bench process / dev server | n |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in result["sizes"]:
        lines.append(
            f"| {s['branches']} | {s['round_median_ms']} | **{s['round_ratio']}** | "
            f"{s['end_to_end_median_ms']} | {s['end_to_end_ratio']} | {s['floor_median_ms']} | "
            f"{s['floor_ratio']} | **{_against_floor(s)}** | "
            f"{s['cpu_s_bench_process']} / {s['cpu_s_dev_server']} | "
            f"{_floor_cpu(s)} | {s['n']} |"
        )
    lines += ["", f"Target: {result['target']}. {_limit(result)}"]
    return "\n".join(lines)


def _limit(result: dict[str, Any]) -> str:
    first, last = result["sizes"][0], result["sizes"][-1]
    extra = last["branches"] - first["branches"]
    if extra <= 0:
        return ""
    cpu = (
        last["cpu_s_bench_process"]
        + last["cpu_s_dev_server"]
        - first["cpu_s_bench_process"]
        - first["cpu_s_dev_server"]
    ) / extra
    if "floor_cpu_s" not in last:
        return ""  # a result from before the floor's CPU was measured
    floor_cpu = (last["floor_cpu_s"] - first["floor_cpu_s"]) / extra
    cpus = result.get("cpus") or 1
    one = first["round_median_ms"] / 1000

    def bound(per_branch: float) -> str:
        seconds = one + extra * per_branch / cpus
        return f"{seconds:.1f} s, {seconds / one:.1f}×"

    against = _against_floor(last)
    head = (
        f"Met: {against}× the floor."
        if against <= TARGET
        else f"Missed: {against}× the floor against {TARGET:g}×."
    )
    return (
        f"{head} What limits it, measured: each extra branch costs {cpu * 1000:.0f} ms of CPU "
        "(this process: worker and client; plus the dev server) for a child start, "
        "the child's workflow tasks and model call, and the parent's workflow task taking in "
        f"its completion; the hand-written floor's branch, with no-op bodies, costs "
        f"{floor_cpu * 1000:.0f} ms, all of it Temporal's (the dev server and the SDK). Even "
        f"at the floor's cost, {extra} more branches on {cpus} fully used cores cannot take "
        f"less than {bound(floor_cpu)} the {first['branches']}-branch round; at errands' cost, "
        f"{bound(cpu)}. End to end, errands scales {last['end_to_end_ratio']}× and the floor "
        f"{last['floor_ratio']}× in the same run."
    )
