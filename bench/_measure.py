"""Measuring tools the benchmarks share: statistics, workflow histories, and processes read
from /proc (CPU seconds, resident memory)."""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

# -- statistics ------------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def summary_ms(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 1),
        "p95_ms": round(percentile(ms, 95), 1),
        "min_ms": round(min(ms), 1),
        "max_ms": round(max(ms), 1),
    }


# -- histories -------------------------------------------------------------------------------


async def history_of(client: Client, workflow_id: str) -> tuple[list[Any], int]:
    """A workflow's events and the size of its history as JSON (what an export weighs)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return list(history.events), len(history.to_json().encode())


def child_ids(events: list[Any]) -> list[str]:
    initiated = EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    return [
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id
        for e in events
        if e.event_type == initiated
    ]


async def task_tree(client: Client, workflow_id: str) -> dict[str, Any]:
    """Events and bytes of a task's workflow plus every child it started, recursively."""
    events, size = await history_of(client, workflow_id)
    tree: dict[str, Any] = {"events": len(events), "bytes": size, "children": []}
    for child in child_ids(events):
        tree["children"].append(await task_tree(client, child))
    tree["total_events"] = tree["events"] + sum(c["total_events"] for c in tree["children"])
    tree["total_bytes"] = tree["bytes"] + sum(c["total_bytes"] for c in tree["children"])
    return tree


def activity_types(events: list[Any]) -> list[str]:
    scheduled = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == scheduled
    ]


LOCAL_ACTIVITY_MARKER = "core_local_activity"
"""The marker a local activity's result is recorded under."""


def local_activity_count(events: list[Any]) -> int:
    recorded = EventType.EVENT_TYPE_MARKER_RECORDED
    return sum(
        1
        for e in events
        if e.event_type == recorded
        and e.marker_recorded_event_attributes.marker_name == LOCAL_ACTIVITY_MARKER
    )


def activity_durations(events: list[Any]) -> dict[str, list[float]]:
    """Seconds from started to completed of each activity, by activity type."""
    names: dict[int, str] = {}
    started: dict[int, Any] = {}
    out: dict[str, list[float]] = {}
    for e in events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started[e.activity_task_started_event_attributes.scheduled_event_id] = e.event_time
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            scheduled = e.activity_task_completed_event_attributes.scheduled_event_id
            began = started.get(scheduled)
            if began is not None:
                seconds = (e.event_time.ToDatetime() - began.ToDatetime()).total_seconds()
                out.setdefault(names[scheduled], []).append(seconds)
    return out


def count_events(events: list[Any], event_type: int) -> int:
    return sum(1 for e in events if e.event_type == event_type)


# -- processes -------------------------------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc/PID/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    # After the command name: state is field 3, utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_mib(pid: int) -> float:
    """Resident memory of a process, from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS line for process {pid}")


def child_pids(name: str) -> list[int]:
    """Processes started by this one whose command name is ``name`` (e.g. the dev server)."""
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == me and comm == name:
            found.append(int(entry.name))
    return found


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def workflow_task_seconds(events: list[Any]) -> list[float]:
    """Seconds from started to completed of each workflow task, in order."""
    out, opened = [], None
    for e in events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            opened = e.event_time.ToDatetime()
        elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and opened:
            out.append((e.event_time.ToDatetime() - opened).total_seconds())
            opened = None
    return out


def _spans(events: list[Any], started: int, closed: tuple[int, ...]) -> float:
    """Sum of seconds from each ``started`` event to the next ``closed`` event after it."""
    total, opened = 0.0, None
    for e in events:
        if e.event_type == started:
            opened = e.event_time.ToDatetime()
        elif e.event_type in closed and opened is not None:
            total += (e.event_time.ToDatetime() - opened).total_seconds()
            opened = None
    return total


async def busy_path(client: Client, workflow_id: str) -> dict[str, float]:
    """Seconds the critical path of a task spends in workflow tasks and in activities: the
    workflow's own, plus those of its slowest child (children run in parallel).

    Activities of one workflow here run one at a time, so their spans add up; the rest of the
    end-to-end time is server dispatch and the hops between them."""
    events, _ = await history_of(client, workflow_id)
    wft = _spans(
        events,
        EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
        (
            EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
            EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
        ),
    )
    act = _spans(
        events,
        EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED,
        (
            EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
        ),
    )
    children = [await busy_path(client, c) for c in child_ids(events)]
    slowest = max(children, key=lambda c: c["workflow_task_s"] + c["activity_s"], default=None)
    if slowest is not None:
        wft += slowest["workflow_task_s"]
        act += slowest["activity_s"]
    return {"workflow_task_s": wft, "activity_s": act}
