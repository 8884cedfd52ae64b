"""The stack every benchmark runs on, and the small measuring tools they share.

Each benchmark gets its own tuned dev server (a SQLite file in a temporary directory, no UI),
the scripted model server answering through ``bench._model.responder`` with zero latency, a
SQLite session store, and workers either in this process or as ``python worker.py`` children.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Self, TypeVar

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from bench._floor import FloorChild, FloorPlan, FloorTask, floor_noop
from bench._model import responder
from errands.client import connect
from errands.devserver import DevServer, free_port
from errands.routing import ModelRouter
from errands.scripted import ScriptedModelServer
from errands.settings import Settings
from errands.store import SessionStore, open_store
from errands.workflow_io import RoundSettings, TaskInput, TaskResult
from worker import build_worker

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


class Stack:
    """Dev server + scripted model server + session store for one benchmark."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tmp = tempfile.TemporaryDirectory(prefix=f"errands-bench-{name}-")
        self.dir = Path(self._tmp.name)
        self.server = DevServer(
            port=free_port(),
            ui_port=None,
            db_file=str(self.dir / "temporal.db"),
            log_file=str(self.dir / "temporal.log"),
        )
        self.model = ScriptedModelServer(responder=responder)
        self.database_url = f"sqlite:///{self.dir / 'sessions.db'}"
        self._exit = AsyncExitStack()
        self._children: list[subprocess.Popen[bytes]] = []
        self.client: Client
        self.store: SessionStore

    async def __aenter__(self) -> Self:
        await asyncio.to_thread(self.server.start)
        self.model.start()
        self.store = open_store(self.database_url)
        self.client = await connect(self.server.address)
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self._exit.aclose()
        finally:
            for child in self._children:
                stop_process(child)
            self.store.close()
            self.model.stop()
            await asyncio.to_thread(self.server.stop)
            self._tmp.cleanup()

    def settings(self, task_queue: str | None = None) -> Settings:
        return Settings(
            TEMPORAL_ADDRESS=self.server.address,
            ERRANDS_TASK_QUEUE=task_queue or f"bench-{uuid.uuid4().hex[:8]}",
            ERRANDS_DATABASE_URL=self.database_url,
            OPENAI_API_KEY="sk-bench-not-a-real-key",
            OPENAI_BASE_URL=self.model.openai_base_url,
        )

    async def worker(self, settings: Settings, **options: Any) -> Worker:
        """An in-process errands worker, running until the benchmark's stack closes."""
        router = ModelRouter(settings)
        self._exit.push_async_callback(router.aclose)
        worker = build_worker(self.client, settings, store=self.store, router=router, **options)
        await self._exit.enter_async_context(worker)
        return worker

    async def run_worker(self, worker: Worker) -> Worker:
        """Run any other worker (the floor's, the peer's) for the rest of the benchmark."""
        await self._exit.enter_async_context(worker)
        return worker

    async def floor_worker(self) -> str:
        """A worker for the hand-written floor workflows; returns its task queue."""
        queue = f"floor-{uuid.uuid4().hex[:8]}"
        worker = Worker(
            self.client,
            task_queue=queue,
            workflows=[FloorTask, FloorChild],
            activities=[floor_noop],
        )
        await self.run_worker(worker)
        return queue

    async def run_floor(self, queue: str, plan: FloorPlan) -> tuple[float, str]:
        """One floor workflow, start call to result, like ``run_task``."""
        began = time.perf_counter()
        workflow_id = f"floor-{uuid.uuid4().hex[:10]}"
        await self.client.execute_workflow(FloorTask.run, plan, id=workflow_id, task_queue=queue)
        return time.perf_counter() - began, workflow_id

    def spawn_worker(self, settings: Settings) -> subprocess.Popen[bytes]:
        """``python worker.py`` as a child process, exactly as an operator would run it."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ERRANDS_"))}
        env.update(
            TEMPORAL_ADDRESS=self.server.address,
            ERRANDS_TASK_QUEUE=settings.task_queue,
            ERRANDS_DATABASE_URL=self.database_url,
            OPENAI_API_KEY="sk-bench-not-a-real-key",
            OPENAI_BASE_URL=self.model.openai_base_url,
            PYTHONPATH=str(ROOT),
        )
        log = open(self.dir / f"worker-{len(self._children)}.log", "ab")  # noqa: SIM115
        child = subprocess.Popen(
            [sys.executable, str(ROOT / "worker.py")],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self._children.append(child)
        return child

    def stop_worker(self, child: subprocess.Popen[bytes]) -> None:
        stop_process(child)
        if child in self._children:
            self._children.remove(child)

    async def start_task(
        self,
        settings: Settings,
        model: str,
        *,
        text: str = "Compare three ways to run this service and recommend one.",
        session_id: str | None = None,
        round_settings: RoundSettings | None = None,
    ) -> WorkflowHandle[Any, TaskResult]:
        session = session_id or f"s-{uuid.uuid4().hex[:10]}"
        task_id = f"task-{session}-{uuid.uuid4().hex[:6]}"
        return await self.client.start_workflow(
            "TaskWorkflow",
            TaskInput(
                task_id=task_id,
                session_id=session,
                text=text,
                model=model,
                settings=round_settings or RoundSettings(),
            ),
            id=task_id,
            task_queue=settings.task_queue,
            result_type=TaskResult,
        )

    async def run_task(self, settings: Settings, model: str, **kwargs: Any) -> tuple[float, str]:
        """Start a task and wait for its result: seconds from the start call to the result."""
        began = time.perf_counter()
        handle = await self.start_task(settings, model, **kwargs)
        result = await handle.result()
        elapsed = time.perf_counter() - began
        if result.status != "replied":
            raise RuntimeError(f"task {handle.id} ended {result.status}: {result.error}")
        return elapsed, handle.id


def stop_process(child: subprocess.Popen[bytes], timeout: float = 10) -> None:
    if child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.25)


async def bounded(limit: int, jobs: Iterable[Awaitable[T]]) -> list[T]:
    """Await ``jobs`` with at most ``limit`` in flight, results in order."""
    gate = asyncio.Semaphore(limit)

    async def one(job: Awaitable[T]) -> T:
        async with gate:
            return await job

    return list(await asyncio.gather(*(one(j) for j in jobs)))


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
