"""Live progress without history: the task is polled, never asked to publish.

Each tick reads what already exists and writes nothing: ``describe`` and the ``status`` query
(queries add no history events) and the task's ack and branch rows in the session store. A
``Tracker`` turns successive snapshots into events, each emitted once under a stable key, in the
task's own order (round started, its question, its delegation, its branches, the end). One
``TaskWatch`` polls a task however many clients stream it; it stops when the last one leaves or
the task ends. A late client gets the backlog first, then the live events.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import WorkflowExecutionStatus

from errands.contracts import StoredMessage
from errands.gateway._errors import ApiError
from errands.gateway._tasks import TaskOps
from errands.ids import branch_rows_prefix
from errands.store import SessionStore

log = logging.getLogger("errands.gateway")

TERMINAL = ("replied", "failed", "canceled")
EXCERPT = 2000


@dataclass(frozen=True)
class ProgressEvent:
    key: str
    """Unique within the task: the SSE id, so a reconnecting client resumes after it."""
    type: str
    data: dict[str, Any]

    @property
    def resumable(self) -> bool:
        """Phase events are notes, not steps: another poller may number them differently, so
        they carry no SSE id and a client never resumes from one."""
        return self.type != "phase"

    def sse(self) -> str:
        head = f"id: {self.key}\n" if self.resumable else ""
        return f"{head}event: {self.type}\ndata: {json.dumps(self.data)}\n\n"


@dataclass
class Snapshot:
    status: str
    round: int
    phase: str = ""
    pending: dict[str, Any] | None = None
    state: dict[str, Any] = field(default_factory=dict)
    """The full state as ``GET /v1/tasks/{id}`` returns it; sent with the last event."""
    rows: list[StoredMessage] = field(default_factory=list)
    """The task's ack and branch rows, in session order."""

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL


class Tracker:
    """Turns successive snapshots of one task into progress events, each emitted once."""

    def __init__(self) -> None:
        self._emitted: set[str] = set()
        self._questions: dict[str, tuple[int, dict[str, Any]]] = {}
        self._phase = ""
        self._phases = 0

    def update(self, snap: Snapshot) -> list[ProgressEvent]:
        out: list[ProgressEvent] = []

        def emit(key: str, type_: str, data: dict[str, Any]) -> None:
            if key not in self._emitted:
                self._emitted.add(key)
                out.append(ProgressEvent(key, type_, data))

        acks = {r.round: r for r in snap.rows if r.kind == "ack" and r.round is not None}
        branches = [r for r in snap.rows if r.kind == "branch" and r.round is not None]
        if snap.pending and snap.pending["id"] not in self._questions:
            self._questions[snap.pending["id"]] = (snap.round, snap.pending)
        pending_id = snap.pending["id"] if snap.pending else None
        top = max([snap.round, *acks, *(r for r, _ in self._questions.values())])
        for round_ in range(top + 1):
            emit(f"round:{round_}", "round_started", {"round": round_})
            for qid, (asked_in, question) in self._questions.items():
                if asked_in != round_:
                    continue
                emit(f"question:{qid}", "waiting_for_user", {"round": round_, "question": question})
                if qid != pending_id:
                    emit(
                        f"question:{qid}:answered",
                        "question_answered",
                        {"round": round_, "question_set_id": qid},
                    )
            if round_ in acks:
                ack = acks[round_]
                subtasks = ack.meta.get("subtasks", [])
                emit(
                    f"round:{round_}:delegated",
                    "delegated",
                    {
                        "round": round_,
                        "branches": len(subtasks),
                        "reply": ack.text,
                        "subtasks": [
                            {"ordinal": k, "type": s.get("type"), "prompt": _cut(s.get("prompt"))}
                            for k, s in enumerate(subtasks, 1)
                        ],
                    },
                )
            for row in branches:
                if row.round == round_:
                    ordinal = row.meta.get("ordinal")
                    emit(
                        f"round:{round_}:branch:{ordinal}",
                        "branch_finished",
                        {
                            "round": round_,
                            "ordinal": ordinal,
                            "subtask_id": row.meta.get("subtask_id"),
                            "type": row.meta.get("type"),
                            "status": row.meta.get("status"),
                            "text": _cut(row.text),
                        },
                    )
        if snap.ended:
            emit("end", snap.status, snap.state)
        elif snap.phase and snap.phase != self._phase:
            self._phase, self._phases = snap.phase, self._phases + 1
            emit(f"phase:{self._phases}", "phase", {"round": snap.round, "phase": snap.phase})
        return out


class SnapshotSource:
    """Reads one task's state and rows; adds nothing to its history."""

    def __init__(self, ops: TaskOps, store: Callable[[], SessionStore]) -> None:
        self._ops = ops
        self._store = store

    async def snapshot(self, task_id: str) -> Snapshot:
        description = await self._ops.describe(task_id)
        live = None
        if description.status == WorkflowExecutionStatus.RUNNING:
            live = await self._ops.live_status(task_id)
        if live is not None:
            state = live.model_dump(mode="json")
        else:
            state = await self._ops.closed_state(task_id, description)
        session_id = state.get("session_id")
        rows: list[StoredMessage] = []
        if session_id:
            rows = await asyncio.to_thread(
                self._store().list_by_prefix, session_id, branch_rows_prefix(task_id)
            )
        if live is not None:
            return Snapshot(
                status=live.status,
                round=live.round,
                phase=live.phase,
                pending=live.pending_question,
                state=state,
                rows=rows,
            )
        return Snapshot(status=state["status"], round=_last_round(rows), state=state, rows=rows)


class TaskWatch:
    """The one poller of a task, fanning its events out to every subscriber."""

    def __init__(
        self,
        task_id: str,
        source: SnapshotSource,
        interval: float,
        on_done: Callable[[TaskWatch], None],
    ) -> None:
        self.task_id = task_id
        self.log: list[ProgressEvent] = []
        self.subscribers: set[asyncio.Queue[ProgressEvent | None]] = set()
        self.finished = False
        self.ticks = 0
        self.joining = 0
        """Subscribers waiting for the first read."""
        self.first_tick = asyncio.Event()
        """Set once the first snapshot is in the log (or the watch has ended)."""
        self._source = source
        self._interval = interval
        self._on_done = on_done
        self._task = asyncio.create_task(self._run(), name=f"progress {task_id}")

    async def _run(self) -> None:
        tracker, failures = Tracker(), 0
        try:
            while True:
                self.ticks += 1
                try:
                    snap = await self._source.snapshot(self.task_id)
                except ApiError as error:
                    if error.status == 404:
                        self._publish(ProgressEvent("gone", "error", {"detail": error.message}))
                        return
                    failures += 1
                    log.warning("progress of %s: %s (retrying)", self.task_id, error.message)
                    await asyncio.sleep(min(5.0, self._interval * 2**failures))
                    continue
                failures = 0
                for event in tracker.update(snap):
                    self._publish(event)
                self.first_tick.set()
                if snap.ended:
                    return
                await asyncio.sleep(self._interval)
        finally:
            self.finished = True
            self.first_tick.set()
            for queue in self.subscribers:
                queue.put_nowait(None)
            self._on_done(self)

    def _publish(self, event: ProgressEvent) -> None:
        self.log.append(event)
        for queue in self.subscribers:
            queue.put_nowait(event)

    def stop(self) -> None:
        self._task.cancel()

    async def wait(self) -> None:
        await asyncio.gather(self._task, return_exceptions=True)


class ProgressHub:
    """One ``TaskWatch`` per task, shared by every stream of it."""

    def __init__(self, source: SnapshotSource, interval: float = 0.25) -> None:
        self._source = source
        self._interval = interval
        self._watches: dict[str, TaskWatch] = {}

    def watch_of(self, task_id: str) -> TaskWatch | None:
        """The task's poller while one runs (tests use it to see that streams share it)."""
        return self._watches.get(task_id)

    @asynccontextmanager
    async def subscribe(
        self, task_id: str, after: str | None = None
    ) -> AsyncIterator[asyncio.Queue[ProgressEvent | None]]:
        """A queue with the backlog (from just past the event ``after``, when it is in it), then
        the live events; ``None`` marks the end."""
        watch = self._watches.get(task_id)
        if watch is None:
            watch = TaskWatch(task_id, self._source, self._interval, self._forget)
            self._watches[task_id] = watch
        queue: asyncio.Queue[ProgressEvent | None] = asyncio.Queue()
        # A new watch first reads the task once, so ``after`` is found in what exists already.
        watch.joining += 1
        try:
            await watch.first_tick.wait()
        finally:
            watch.joining -= 1
            if not watch.first_tick.is_set():  # the client left before the first read
                self._release(watch)
        # No await between copying the backlog and subscribing: no event falls in between.
        keys = [event.key for event in watch.log]
        start = keys.index(after) + 1 if after in keys else 0
        for event in watch.log[start:]:
            queue.put_nowait(event)
        if watch.finished:
            queue.put_nowait(None)
        else:
            watch.subscribers.add(queue)
        try:
            yield queue
        finally:
            watch.subscribers.discard(queue)
            self._release(watch)

    def _release(self, watch: TaskWatch) -> None:
        """Stop a poller nobody follows any more."""
        if not watch.subscribers and not watch.joining and not watch.finished:
            watch.stop()
            self._forget(watch)

    def _forget(self, watch: TaskWatch) -> None:
        if self._watches.get(watch.task_id) is watch:
            del self._watches[watch.task_id]

    async def aclose(self) -> None:
        watches = list(self._watches.values())
        for watch in watches:
            watch.stop()
        for watch in watches:
            await watch.wait()


def _last_round(rows: list[StoredMessage]) -> int:
    """A closed task's last round, from its rows: after the last delegation once all of its
    branches are in, else that delegation's own round."""
    acks = [r for r in rows if r.kind == "ack" and r.round is not None]
    if not acks:
        return 0
    last = max(acks, key=lambda r: r.round or 0)
    assert last.round is not None
    done = sum(1 for r in rows if r.kind == "branch" and r.round == last.round)
    return last.round + 1 if done >= len(last.meta.get("subtasks", [])) else last.round


def _cut(text: Any) -> str:
    value = "" if text is None else str(text)
    return value if len(value) <= EXCERPT else value[:EXCERPT] + "…"
