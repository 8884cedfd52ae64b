"""B1: an errands task (2 rounds, 3 branches) against the Temporal floor, one task at a time.

Three kinds of task run interleaved on the same server in the same run, each measured from the
``start_workflow`` call to its result:

- errands: round 0 delegates 3 branches, round 1 replies (zero-latency scripted model);
- floor: the issue's floor, a minimal hand-written workflow doing the same model-call
  activities (one per round, one per branch) and child workflows, with no-op bodies;
- floor + local: the floor plus every other hop errands made, counted from the first errands
  task's history, as no-ops: its local activities (the session-store calls) and any other
  activity. What errands adds beyond it is errands' own code, not Temporal's.
"""

from __future__ import annotations

import statistics
from typing import Any

from temporalio.api.enums.v1 import EventType

from bench._floor import FloorPlan
from bench._harness import Stack, stack_for
from bench._measure import (
    activity_durations,
    activity_types,
    busy_path,
    child_ids,
    count_events,
    history_of,
    local_activity_count,
    summary_ms,
    workflow_task_seconds,
)
from bench._model import model_name

TITLE = "B1 · overhead against the Temporal floor"
FULL = {"tasks": 40, "warmup": 3}
SMOKE = {"tasks": 1, "warmup": 0}
TARGET = 1.3

MODEL = model_name(1, 3)
MODEL_CALLS = {"round_step", "branch_step"}
KINDS = ("errands", "floor", "floor_with_local")


async def plan_from_history(stack: Stack, workflow_id: str) -> tuple[FloorPlan, dict[str, Any]]:
    """Every hop an errands task made, read from its history: the floor + local plan."""
    events, _ = await history_of(stack.client, workflow_id)
    first_child = next(
        i
        for i, e in enumerate(events)
        if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    )
    before, after = events[:first_child], events[first_child:]
    children = child_ids(events)
    child_events, _ = await history_of(stack.client, children[0])
    plan = FloorPlan(
        before=len(activity_types(before)),
        children=len(children),
        child_activities=len(activity_types(child_events)),
        after=len(activity_types(after)),
        local_before=local_activity_count(before),
        local_after=local_activity_count(after),
    )
    counted = {
        "parent_activities_before_children": activity_types(before),
        "parent_local_activities_before_children": plan.local_before,
        "children": len(children),
        "activities_per_child": activity_types(child_events),
        "local_activities_per_child": local_activity_count(child_events),
        "parent_activities_after_children": activity_types(after),
        "parent_local_activities_after_children": plan.local_after,
        "parent_workflow_tasks": count_events(events, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED),
        "child_workflow_tasks": count_events(
            child_events, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        ),
        "parent_events": len(events),
        "child_events": len(child_events),
    }
    return plan, counted


def model_call_plan(plan: FloorPlan, counted: dict[str, Any]) -> FloorPlan:
    """The issue's floor: only the model-call activities, and the children."""
    return FloorPlan(
        before=sum(a in MODEL_CALLS for a in counted["parent_activities_before_children"]),
        children=plan.children,
        child_activities=sum(a in MODEL_CALLS for a in counted["activities_per_child"]),
        after=sum(a in MODEL_CALLS for a in counted["parent_activities_after_children"]),
    )


async def run(tasks: int, warmup: int, stack: Stack | None = None) -> dict[str, Any]:
    async with stack_for("b1", stack) as stack:
        settings = stack.settings()
        await stack.worker(settings)
        floor_queue = await stack.floor_worker()

        _, first = await stack.run_task(settings, MODEL)
        with_local, counted = await plan_from_history(stack, first)
        plans = {"floor": model_call_plan(with_local, counted), "floor_with_local": with_local}
        jobs = {
            "errands": lambda: stack.run_task(settings, MODEL),
            "floor": lambda: stack.run_floor(floor_queue, plans["floor"]),
            "floor_with_local": lambda: stack.run_floor(floor_queue, plans["floor_with_local"]),
        }
        for _ in range(warmup):
            for job in jobs.values():
                await job()

        times: dict[str, list[float]] = {k: [] for k in KINDS}
        ids: dict[str, list[str]] = {k: [] for k in KINDS}
        for _ in range(tasks):
            # Interleaved, so drift in the machine's load hits all three alike.
            for kind in KINDS:
                elapsed, wid = await jobs[kind]()
                times[kind].append(elapsed)
                ids[kind].append(wid)

        breakdown: dict[str, dict[str, float]] = {}
        per_activity: dict[str, list[float]] = {}
        # A new run's first workflow task builds its sandbox (importing the workflow's module
        # afresh); later ones only run the workflow code.
        first_wft: dict[str, list[float]] = {k: [] for k in KINDS}
        later_wft: dict[str, list[float]] = {k: [] for k in KINDS}
        for kind in KINDS:
            paths = [await busy_path(stack.client, wid) for wid in ids[kind]]
            breakdown[kind] = {
                "end_to_end_ms": round(statistics.median(times[kind]) * 1000, 1),
                "workflow_tasks_ms": round(
                    statistics.median(p["workflow_task_s"] for p in paths) * 1000, 1
                ),
                "activities_ms": round(statistics.median(p["activity_s"] for p in paths) * 1000, 1),
            }
            for wid in ids[kind]:
                events, _ = await history_of(stack.client, wid)
                children = child_ids(events)
                for source in [events] + [(await history_of(stack.client, children[0]))[0]]:
                    for name, spans in activity_durations(source).items():
                        per_activity.setdefault(name, []).extend(spans)
                    wfts = workflow_task_seconds(source)
                    first_wft[kind] += wfts[:1]
                    later_wft[kind] += wfts[1:]

    errands_ms = statistics.median(times["errands"])
    return {
        "shape": "2 rounds: round 0 delegates 3 branches, round 1 replies",
        "hops_counted_from_errands_history": counted,
        "floor_plans": {kind: vars(plan) for kind, plan in plans.items()},
        "latency": {kind: summary_ms(values) for kind, values in times.items()},
        "ratio_to_floor": round(errands_ms / statistics.median(times["floor"]), 2),
        "ratio_to_floor_with_local": round(
            errands_ms / statistics.median(times["floor_with_local"]), 2
        ),
        "ratio_of_minimums": round(min(times["errands"]) / min(times["floor"]), 2),
        "critical_path_medians": breakdown,
        "workflow_task_median_ms": {
            kind: {
                "first_of_a_run": round(statistics.median(first_wft[kind]) * 1000, 1),
                "later": round(statistics.median(later_wft[kind]) * 1000, 1),
            }
            for kind in KINDS
        },
        "activity_median_ms": {
            name: round(statistics.median(spans) * 1000, 1)
            for name, spans in sorted(per_activity.items())
        },
        "target": f"ratio to the floor <= {TARGET}",
    }


def markdown(result: dict[str, Any]) -> str:
    lat, plans = result["latency"], result["floor_plans"]
    counted = result["hops_counted_from_errands_history"]
    hops = {
        "errands": "as counted below",
        "floor": _hops(plans["floor"]),
        "floor_with_local": _hops(plans["floor_with_local"]),
    }
    lines = [
        "| task | hops | median ms | p95 ms | min ms | max ms | n |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind in KINDS:
        s = lat[kind]
        lines.append(
            f"| {_label(kind)} | {hops[kind]} | {s['median_ms']} | {s['p95_ms']} | "
            f"{s['min_ms']} | {s['max_ms']} | {s['n']} |"
        )
    lines += [
        "",
        f"**Ratio (median errands / median floor): {result['ratio_to_floor']}** "
        f"(target ≤ {TARGET}); against the floor + local: "
        f"{result['ratio_to_floor_with_local']}. Ratio of the fastest runs, the least disturbed "
        f"by other load: {result['ratio_of_minimums']}.",
        "",
        "Hops counted from an errands history: before the children, activities "
        f"`{', '.join(counted['parent_activities_before_children'])}` and "
        f"{counted['parent_local_activities_before_children']} local activities; "
        f"{counted['children']} children each running "
        f"`{', '.join(counted['activities_per_child'])}` "
        f"({counted['local_activities_per_child']} local activities); after them, "
        f"`{', '.join(counted['parent_activities_after_children'])}` and "
        f"{counted['parent_local_activities_after_children']} local activities; "
        f"{counted['parent_workflow_tasks']} workflow tasks in the parent and "
        f"{counted['child_workflow_tasks']} in each child.",
        "",
        "Where the time goes on the critical path (parent plus its slowest child), medians; "
        "local activities run inside workflow tasks:",
        "",
        "| task | end to end ms | in workflow tasks ms | in activities ms | rest (server, "
        "dispatch) ms |",
        "|---|---|---|---|---|",
    ]
    for kind, b in result["critical_path_medians"].items():
        rest = round(b["end_to_end_ms"] - b["workflow_tasks_ms"] - b["activities_ms"], 1)
        lines.append(
            f"| {_label(kind)} | {b['end_to_end_ms']} | {b['workflow_tasks_ms']} | "
            f"{b['activities_ms']} | {rest} |"
        )
    lines += [
        "",
        "Median time of one activity, started to completed (the floor's is a no-op): "
        + ", ".join(f"`{n}` {ms} ms" for n, ms in result["activity_median_ms"].items())
        + ".",
        "",
        "Median time of one workflow task, started to completed: "
        + "; ".join(
            f"{_label(kind)} {w['first_of_a_run']} ms for a run's first, "
            f"{w['later']} ms for later ones"
            for kind, w in result["workflow_task_median_ms"].items()
        )
        + ".",
        "",
        _gap(result),
    ]
    return "\n".join(lines)


def _gap(result: dict[str, Any]) -> str:
    paths, lat = result["critical_path_medians"], result["latency"]
    ours, floor, local = (paths[k] for k in KINDS)
    ratio = result["ratio_to_floor"]
    verdict = (
        f"The target is met with {TARGET - ratio:.2f} to spare."
        if ratio <= TARGET
        else f"The target is missed by {ratio / TARGET - 1:.0%} ({ratio} against {TARGET})."
    )
    total = lat["errands"]["median_ms"] - lat["floor"]["median_ms"]
    locals_cost = lat["floor_with_local"]["median_ms"] - lat["floor"]["median_ms"]
    act = ours["activities_ms"] - local["activities_ms"]
    wft = ours["workflow_tasks_ms"] - local["workflow_tasks_ms"]
    counted = result["hops_counted_from_errands_history"]
    n_local = (
        counted["parent_local_activities_before_children"]
        + counted["parent_local_activities_after_children"]
    )
    return (
        f"{verdict} Where the {total:.0f} ms errands adds to the floor go, measured (medians): "
        f"{locals_cost:.0f} ms is what Temporal itself charges for the {n_local} session-store "
        "calls errands makes as local activities (the floor + local runs the same calls as "
        f"no-ops); beyond that, {act:.0f} ms is the model calls' real work inside their "
        "activities (reading the session, rendering the request, the HTTP round trip through "
        f"the OpenAI client, storing the result) and {wft:.0f} ms is in workflow tasks "
        "(errands' workflow code, the store calls' real work, pydantic payloads, search-"
        f"attribute upserts), {total - locals_cost - act - wft:+.0f} ms elsewhere (dispatch)."
    )


def verdict(result: dict[str, Any]) -> tuple[str, str, bool]:
    ratio = result["ratio_to_floor"]
    figure = (
        f"{ratio}× the floor ({result['latency']['errands']['median_ms']:.0f} vs "
        f"{result['latency']['floor']['median_ms']:.0f} ms median); "
        f"{result['ratio_to_floor_with_local']}× the floor + local"
    )
    return figure, f"≤ {TARGET}×", ratio <= TARGET


def _label(kind: str) -> str:
    return {"errands": "errands", "floor": "floor", "floor_with_local": "floor + local"}[kind]


def _hops(plan: dict[str, int]) -> str:
    local = (
        f"{plan['local_before']} local + " if plan["local_before"] else "",
        f"{plan['local_after']} local + " if plan["local_after"] else "",
    )
    return (
        f"{local[0]}{plan['before']} act → {plan['children']} children × "
        f"{plan['child_activities']} act → {local[1]}{plan['after']} act"
    )
