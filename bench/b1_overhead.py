"""B1: an errands task (2 rounds, 3 branches) against the Temporal floor, one task at a time.

Six kinds of task run interleaved on the same server in the same run, each measured from the
``start_workflow`` call to its result:

- errands: round 0 delegates 3 branches, round 1 replies (zero-latency scripted model);
- floor: the issue's floor, a minimal hand-written workflow doing the same model-call
  activities (one per round, one per branch) and child workflows, with no-op bodies;
- floor + local: the floor plus every other hop errands made, counted from the first errands
  task's history, as no-ops: its local activities (the session-store calls) and any other
  activity. What errands adds beyond it is errands' own code, not Temporal's;
- errands + tool: round 0 delegates one ``general`` branch, which calls one MCP tool
  (``mcp__almanac__lookup`` of the bundled ``errands.adapters.demo_tools`` server) and then answers
  in text; round 1 replies. Twice, each on a worker of its own whose ``ERRANDS_MCP_SERVERS``
  gives the server to branches only (``"for": ["*"]``): over Streamable HTTP, a server process
  the benchmark starts once (the main figure), and over stdio, a server process the worker
  starts and keeps in its pool (``errands.adapters.mcp.pool``), reused by every task;
- floor + tool: the floor of that shape, one no-op activity more in the child for the tool
  call: the model-call and tool-call activities counted from the first HTTP task's history;
- errands, log off: the errands task on a worker whose store drops every event and whose
  model calls do not stream (``ERRANDS_STREAMING=false``): what the event log and live text
  cost the errands row, which has them on as by default.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from typing import Any, cast

from temporalio.api.enums.v1 import EventType

from bench._floor import FloorPlan
from bench._harness import ROOT, Stack, stack_for
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
from errands.adapters.mcp import config as mcp
from errands.adapters.store import SessionStore
from errands.contracts import ids
from errands.contracts.events import NewEvent, StoredEvent
from errands.contracts.messages import NewMessage, StoredMessage
from errands.settings import Settings

TITLE = "B1 · overhead against the Temporal floor"
FULL = {"tasks": 80, "warmup": 3}
SMOKE = {"tasks": 1, "warmup": 0}
TARGET = 1.3
TOOL_TARGETS = {"errands_tool_http": 1.3, "errands_tool_stdio": 1.5}
"""The tool rows' targets against the floor + tool: the worker's pool keeps both kinds of
server open, so a call costs almost nothing beyond the floor's own activity."""

MODEL = model_name(1, 3)
TOOL_MODEL = model_name(1, 1, tool=True)
MODEL_CALLS = {"round_step", "branch_step"}
TOOL_CALLS = {"run_branch_tool"}
KINDS = ("errands", "floor", "floor_with_local")
TOOL_KINDS = ("errands_tool_http", "errands_tool_stdio", "floor_tool")
SERVER = "almanac"
TOOL = mcp.tool_name(SERVER, "lookup")
LOG_KINDS = ("errands_log_off",)
LOG_TARGET = 1.05
ALL_KINDS = KINDS + TOOL_KINDS + LOG_KINDS
TRANSPORTS = {"errands_tool_http": "Streamable HTTP", "errands_tool_stdio": "stdio"}


class WithoutEventLog:
    """The benchmark's store with the event log switched off: an event is acknowledged and
    dropped; every other call goes to the store."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def append_event(self, event: NewEvent) -> StoredEvent:
        return StoredEvent(**event.model_dump(), seq=0, at="")

    def append_events(self, events: Sequence[NewEvent]) -> None:
        pass

    def append_once(self, message: NewMessage, events: Sequence[NewEvent] = ()) -> StoredMessage:
        return self._store.append_once(message)


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


def model_call_plan(
    plan: FloorPlan, counted: dict[str, Any], calls: set[str] = MODEL_CALLS
) -> FloorPlan:
    """The issue's floor: only the model-call activities (and any other ``calls``), and the
    children."""
    return FloorPlan(
        before=sum(a in calls for a in counted["parent_activities_before_children"]),
        children=plan.children,
        child_activities=sum(a in calls for a in counted["activities_per_child"]),
        after=sum(a in calls for a in counted["parent_activities_after_children"]),
    )


async def tool_settings(stack: Stack) -> dict[str, Settings]:
    """Worker settings offering the almanac to branches, by transport (HTTP starts its server)."""
    url = await stack.serve_mcp_http()
    command = [sys.executable, "-m", "errands.adapters.demo_tools"]
    return {
        "errands_tool_http": stack.settings(mcp_servers={SERVER: {"url": url, "for": ["*"]}}),
        "errands_tool_stdio": stack.settings(
            mcp_servers={SERVER: {"command": command, "cwd": str(ROOT), "for": ["*"]}}
        ),
    }


async def checked_tool_task(
    stack: Stack, workflow_id: str, transport: str
) -> tuple[FloorPlan, dict[str, Any]]:
    """The hops a tool task made, after checking its branch called the tool once, and well."""
    plan, counted = await plan_from_history(stack, workflow_id)
    child = child_ids((await history_of(stack.client, workflow_id))[0])[0]
    calls = counted["activities_per_child"].count("run_branch_tool")
    stored = stack.store.get(ids.thread_tool_result_id(child, 0, 0))
    if counted["children"] != 1 or calls != 1 or stored is None or stored.meta.get("is_error"):
        raise RuntimeError(
            f"the {transport} tool task {workflow_id} did not make exactly one good tool call: "
            f"hops {counted}, tool result {stored.text if stored else None!r}"
        )
    return plan, counted


async def run(tasks: int, warmup: int, stack: Stack | None = None) -> dict[str, Any]:
    async with stack_for("b1", stack) as stack:
        settings = stack.settings()
        await stack.worker(settings)
        floor_queue = await stack.floor_worker()

        by_transport = await tool_settings(stack)
        for tool_worker in by_transport.values():
            await stack.worker(tool_worker)
        log_off = stack.settings().model_copy(update={"streaming": False})
        # A proxy for the store protocol (it forwards all but append_event).
        await stack.worker(log_off, store=cast(SessionStore, WithoutEventLog(stack.store)))

        _, first = await stack.run_task(settings, MODEL)
        with_local, counted = await plan_from_history(stack, first)
        tool_plans, tool_counted = {}, {}
        for kind, tool_worker in by_transport.items():
            _, first_tool = await stack.run_task(tool_worker, TOOL_MODEL)
            found = await checked_tool_task(stack, first_tool, TRANSPORTS[kind])
            tool_plans[kind], tool_counted[kind] = found
        plans = {
            "floor": model_call_plan(with_local, counted),
            "floor_with_local": with_local,
            "floor_tool": model_call_plan(
                tool_plans["errands_tool_http"],
                tool_counted["errands_tool_http"],
                MODEL_CALLS | TOOL_CALLS,
            ),
        }
        http, stdio = by_transport["errands_tool_http"], by_transport["errands_tool_stdio"]
        jobs = {
            "errands": lambda: stack.run_task(settings, MODEL),
            "floor": lambda: stack.run_floor(floor_queue, plans["floor"]),
            "floor_with_local": lambda: stack.run_floor(floor_queue, plans["floor_with_local"]),
            "errands_tool_http": lambda: stack.run_task(http, TOOL_MODEL),
            "errands_tool_stdio": lambda: stack.run_task(stdio, TOOL_MODEL),
            "floor_tool": lambda: stack.run_floor(floor_queue, plans["floor_tool"]),
            "errands_log_off": lambda: stack.run_task(log_off, MODEL),
        }
        for _ in range(warmup):
            for job in jobs.values():
                await job()

        times: dict[str, list[float]] = {k: [] for k in ALL_KINDS}
        run_ids: dict[str, list[str]] = {k: [] for k in ALL_KINDS}
        for _ in range(tasks):
            # Interleaved, so drift in the machine's load hits every kind alike.
            for kind in ALL_KINDS:
                elapsed, wid = await jobs[kind]()
                times[kind].append(elapsed)
                run_ids[kind].append(wid)

        logged = stack.store.list_events(run_ids["errands"][0])
        logged_off = stack.store.list_events(run_ids["errands_log_off"][0])
        breakdown: dict[str, dict[str, float]] = {}
        per_activity: dict[str, list[float]] = {}
        # The tool tasks' activities by kind and by their place in the task: a branch's first
        # step also lists the task's tools.
        tool_activities: dict[str, dict[str, list[float]]] = {k: {} for k in TOOL_KINDS}
        # A new run's first workflow task builds its sandbox (importing the workflow's module
        # afresh); later ones only run the workflow code.
        first_wft: dict[str, list[float]] = {k: [] for k in ALL_KINDS}
        later_wft: dict[str, list[float]] = {k: [] for k in ALL_KINDS}
        for kind in ALL_KINDS:
            paths = [await busy_path(stack.client, wid) for wid in run_ids[kind]]
            breakdown[kind] = {
                "end_to_end_ms": round(statistics.median(times[kind]) * 1000, 1),
                "workflow_tasks_ms": round(
                    statistics.median(p["workflow_task_s"] for p in paths) * 1000, 1
                ),
                "activities_ms": round(statistics.median(p["activity_s"] for p in paths) * 1000, 1),
            }
            for wid in run_ids[kind]:
                events, _ = await history_of(stack.client, wid)
                children = child_ids(events)
                for place, source in (
                    ("parent", events),
                    ("child", (await history_of(stack.client, children[0]))[0]),
                ):
                    for name, spans in activity_durations(source).items():
                        if kind in TOOL_KINDS:
                            for label, span in _placed(name, place, spans):
                                tool_activities[kind].setdefault(label, []).append(span)
                        else:
                            per_activity.setdefault(name, []).extend(spans)
                    wfts = workflow_task_seconds(source)
                    first_wft[kind] += wfts[:1]
                    later_wft[kind] += wfts[1:]

    errands_ms = statistics.median(times["errands"])
    floor_tool_ms = statistics.median(times["floor_tool"])
    log_off_ms = statistics.median(times["errands_log_off"])
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
            for kind in ALL_KINDS
        },
        "activity_median_ms": {
            name: round(statistics.median(spans) * 1000, 1)
            for name, spans in sorted(per_activity.items())
        },
        "tool_call": {
            "shape": "2 rounds: round 0 delegates 1 `general` branch, which calls "
            f"`{TOOL}` once and answers in text; round 1 replies",
            "transports": TRANSPORTS,
            "hops_counted_from_errands_history": tool_counted,
            "ratio_to_floor_tool": {
                kind: round(statistics.median(times[kind]) / floor_tool_ms, 2)
                for kind in TRANSPORTS
            },
            "ratio_of_minimums": {
                kind: round(min(times[kind]) / min(times["floor_tool"]), 2) for kind in TRANSPORTS
            },
            "activity_median_ms": {
                kind: {
                    label: round(statistics.median(spans) * 1000, 1)
                    for label, spans in by_label.items()
                }
                for kind, by_label in tool_activities.items()
            },
        },
        "event_log": {
            "ratio_on_to_off": round(errands_ms / log_off_ms, 3),
            "ratio_of_minimums": round(min(times["errands"]) / min(times["errands_log_off"]), 3),
            "events_per_task": len(logged),
            "reply_deltas_per_task": sum(e.type == "reply_delta" for e in logged),
            "events_per_task_log_off": len(logged_off),
            "target": f"ratio on / off <= {LOG_TARGET}",
        },
        "target": f"ratio to the floor <= {TARGET}",
    }


def _placed(name: str, place: str, spans: list[float]) -> list[tuple[str, float]]:
    """Each span of a tool task's activity labelled by where it ran: a branch's steps apart."""
    if name == "branch_step":
        return [(f"branch_step {step}", span) for step, span in enumerate(spans)]
    if name == "floor_noop":
        return [(f"floor_noop ({place})", span) for span in spans]
    return [(name, span) for span in spans]


def markdown(result: dict[str, Any]) -> str:
    lat, plans = result["latency"], result["floor_plans"]
    counted = result["hops_counted_from_errands_history"]
    hops = {
        "errands": "as counted below",
        "floor": _hops(plans["floor"]),
        "floor_with_local": _hops(plans["floor_with_local"]),
    }
    lines = [*_latency_table(lat, KINDS, hops)]
    lines += [
        "",
        f"**Ratio (median errands / median floor): {result['ratio_to_floor']}** "
        f"(target ≤ {TARGET}); against the floor + local: "
        f"{result['ratio_to_floor_with_local']}. Ratio of the fastest runs, the least disturbed "
        f"by other load: {result['ratio_of_minimums']}.",
        "",
        f"Hops counted from an errands history: {_counted(counted)}",
    ]
    if "tool_call" in result:
        lines += ["", *_tool_section(result)]
    if "event_log" in result:
        lines += ["", _log_section(result)]
    lines += [
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
    if "tool_call" in result:
        lines += ["", _tool_gap(result)]
    return "\n".join(lines)


def _latency_table(
    lat: dict[str, dict[str, float]], kinds: tuple[str, ...], hops: dict[str, str]
) -> list[str]:
    lines = [
        "| task | hops | median ms | p95 ms | min ms | max ms | n |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind in kinds:
        s = lat[kind]
        lines.append(
            f"| {_label(kind)} | {hops[kind]} | {s['median_ms']} | {s['p95_ms']} | "
            f"{s['min_ms']} | {s['max_ms']} | {s['n']} |"
        )
    return lines


def _counted(counted: dict[str, Any]) -> str:
    """What an errands history's hops were, as a sentence."""
    return (
        "before the children, activities "
        f"`{', '.join(counted['parent_activities_before_children'])}` and "
        f"{counted['parent_local_activities_before_children']} local activities; "
        f"{counted['children']} {'child' if counted['children'] == 1 else 'children'} each "
        f"running `{', '.join(counted['activities_per_child'])}` "
        f"({counted['local_activities_per_child']} local activities); after them, "
        f"`{', '.join(counted['parent_activities_after_children'])}` and "
        f"{counted['parent_local_activities_after_children']} local activities; "
        f"{counted['parent_workflow_tasks']} workflow tasks in the parent and "
        f"{counted['child_workflow_tasks']} in each child."
    )


def _tool_section(result: dict[str, Any]) -> list[str]:
    tool, lat = result["tool_call"], result["latency"]
    ratio, fastest = tool["ratio_to_floor_tool"], tool["ratio_of_minimums"]
    hops = {
        "errands_tool_http": "as counted below",
        "errands_tool_stdio": "as counted below",
        "floor_tool": _hops(result["floor_plans"]["floor_tool"]),
    }
    counted = tool["hops_counted_from_errands_history"]
    same = counted["errands_tool_stdio"] == counted["errands_tool_http"]
    lines = [
        f"With one MCP tool call ({tool['shape']}; the tool is the bundled almanac server's "
        "`lookup`, the HTTP row's server a process the benchmark started once, the stdio row's "
        "a process the worker keeps in its pool; each worker's connection is reused by every "
        "task):",
        "",
        *_latency_table(lat, TOOL_KINDS, hops),
        "",
        "**Ratio (median errands + tool over Streamable HTTP / median floor + tool): "
        f"{ratio['errands_tool_http']}** (target ≤ {TOOL_TARGETS['errands_tool_http']}); over "
        f"stdio: **{ratio['errands_tool_stdio']}** (target ≤ "
        f"{TOOL_TARGETS['errands_tool_stdio']}). Ratio of "
        f"the fastest runs: {fastest['errands_tool_http']} over HTTP, "
        f"{fastest['errands_tool_stdio']} over stdio.",
        "",
        "Hops counted from an HTTP tool task's history: "
        + _counted(counted["errands_tool_http"])
        + (
            " The stdio task's were the same."
            if same
            else " The stdio task's: " + _counted(counted["errands_tool_stdio"])
        ),
    ]
    return lines


def _log_section(result: dict[str, Any]) -> str:
    log, lat = result["event_log"], result["latency"]
    on, off = lat["errands"], lat["errands_log_off"]
    return (
        f"With the event log on (the errands row: streamed model calls, "
        f"{log['events_per_task']} events a task written to the store, "
        f"{log['reply_deltas_per_task']} of them live text) against a worker with it off (no "
        f"event written, no streaming): median {on['median_ms']} ms against {off['median_ms']} "
        f"ms, **ratio {log['ratio_on_to_off']}** (target ≤ {LOG_TARGET}); of the fastest runs "
        f"{log['ratio_of_minimums']}."
    )


def _tool_gap(result: dict[str, Any]) -> str:
    tool, lat = result["tool_call"], result["latency"]
    acts = tool["activity_median_ms"]
    floor_ms = lat["floor_tool"]["median_ms"]

    def part(kind: str) -> str:
        a = acts[kind]
        listing = a.get("branch_step 0", 0.0) - a.get("branch_step 1", 0.0)
        return (
            f"over {TRANSPORTS[kind]} the task took {lat[kind]['median_ms'] - floor_ms:.0f} ms "
            f"more than the floor + tool; its tool call (`run_branch_tool`) took "
            f"{a.get('run_branch_tool', 0.0):.0f} ms, and the branch's first step, which also "
            f"lists the task's tools, {listing:.0f} ms more than its second"
        )

    noops = ", ".join(
        f"`{label}` {ms} ms" for label, ms in acts["floor_tool"].items() if "floor_noop" in label
    )
    per_kind = "; ".join(
        f"{TRANSPORTS[kind]}: "
        + ", ".join(f"`{label}` {ms} ms" for label, ms in sorted(acts[kind].items()))
        for kind in TRANSPORTS
    )
    return (
        f"With the tool call, measured (medians): {part('errands_tool_http')}; "
        f"{part('errands_tool_stdio')}. The floor's no-ops took {noops}. Each activity of the "
        f"tool tasks, started to completed: {per_kind}."
    )


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
    if n_local:
        stores = (
            f"{locals_cost:.0f} ms is what Temporal itself charges for the {n_local} session-"
            "store calls errands makes as local activities (the floor + local runs the same "
            "calls as no-ops)"
        )
    else:
        stores = (
            "errands makes no session-store call of its own, its model steps carry them (the "
            f"floor + local is the floor again, {locals_cost:+.0f} ms apart: noise)"
        )
    return (
        f"{verdict} Where the {total:.0f} ms errands adds to the floor go, measured (medians): "
        f"{stores}; beyond that, {act:.0f} ms is the model calls' real work inside their "
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
    if "tool_call" in result:
        tool = result["tool_call"]["ratio_to_floor_tool"]
        figure += (
            f"; a branch making one MCP tool call: {tool['errands_tool_http']}× the floor + tool "
            f"over HTTP ({result['latency']['errands_tool_http']['median_ms']:.0f} vs "
            f"{result['latency']['floor_tool']['median_ms']:.0f} ms), "
            f"{tool['errands_tool_stdio']}× over stdio"
        )
    if "event_log" in result:
        figure += f"; event log on / off: {result['event_log']['ratio_on_to_off']}×"
    tools = result.get("tool_call", {}).get("ratio_to_floor_tool", {})
    met = ratio <= TARGET and all(tools.get(k, 0) <= limit for k, limit in TOOL_TARGETS.items())
    target = (
        f"≤ {TARGET}×; with a tool ≤ {TOOL_TARGETS['errands_tool_http']}× over HTTP, "
        f"≤ {TOOL_TARGETS['errands_tool_stdio']}× over stdio"
    )
    return figure, target, met


def _label(kind: str) -> str:
    return {
        "errands": "errands",
        "floor": "floor",
        "floor_with_local": "floor + local",
        "errands_tool_http": "errands + tool (HTTP)",
        "errands_tool_stdio": "errands + tool (stdio)",
        "floor_tool": "floor + tool",
        "errands_log_off": "errands, event log off",
    }[kind]


def _hops(plan: dict[str, int]) -> str:
    local = (
        f"{plan['local_before']} local + " if plan["local_before"] else "",
        f"{plan['local_after']} local + " if plan["local_after"] else "",
    )
    children = "1 child" if plan["children"] == 1 else f"{plan['children']} children"
    return (
        f"{local[0]}{plan['before']} act → {children} × "
        f"{plan['child_activities']} act → {local[1]}{plan['after']} act"
    )
