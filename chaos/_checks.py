"""The invariants every scenario checks: what a user could see while tasks ran, what the store
holds after, and what the histories hold.

The store is read the way a frontend reads it (``list_session``), over and over while faults are
injected, because a duplicate that a later retry cleans up would still have been visible.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from chaos._report import Outcome
from errands.adapters.store import SessionStore
from errands.contracts import ids
from errands.contracts.messages import StoredMessage
from errands.plugin import WORKFLOWS

_WFT_FAILED = EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED

BENIGN_CAUSES = {
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_UPDATE,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_STICKY_TASK_QUEUE,
}
"""Server-side races, not our code failing: a signal or update arrived while the worker was
completing the task (the server asks again with the new event), or a sticky worker vanished."""


class RowWatcher:
    """Lists every watched session again and again, as a frontend polling it would, and notes
    anything a user could have seen twice or seen change."""

    def __init__(self, store: SessionStore, outcome: Outcome) -> None:
        self._store = store
        self._outcome = outcome
        self._sessions: dict[str, str] = {}
        self._seen: dict[str, tuple[int, str]] = {}
        self._reported: set[str] = set()
        self.polls = 0

    def watch(self, session_id: str, task_id: str) -> None:
        self._sessions[session_id] = task_id

    async def run(self, stop: asyncio.Event, interval: float = 0.15) -> None:
        while not stop.is_set():
            for session_id in list(self._sessions):
                rows = await asyncio.to_thread(self._store.list_session, session_id)
                self.observe(session_id, rows)
            self.polls += 1
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except TimeoutError:
                pass

    def observe(self, session_id: str, rows: list[StoredMessage]) -> None:
        counts = Counter(r.id for r in rows)
        for row_id, n in counts.items():
            if n > 1:
                self._once(f"dup:{row_id}", "messages duplicated", f"{row_id} listed {n} times")
        replies = [r.id for r in rows if r.kind == "reply"]
        if len(replies) > 1:
            self._once(
                f"replies:{session_id}",
                "second reply visible",
                f"session {session_id} showed {len(replies)} replies at once: {replies}",
            )
        for row in rows:
            first = self._seen.setdefault(row.id, (row.seq, row.text))
            if first != (row.seq, row.text):
                self._once(
                    f"changed:{row.id}",
                    "message changed after it was seen",
                    f"{row.id}: first seen as seq {first[0]} {first[1][:60]!r}, later as seq "
                    f"{row.seq} {row.text[:60]!r}",
                )

    def _once(self, key: str, what: str, detail: str) -> None:
        if key not in self._reported:
            self._reported.add(key)
            self._outcome.lose(what, detail)


@dataclass
class ExpectedRows:
    """The rows one task must leave in its session, each exactly once, with their text."""

    session_id: str
    rows: dict[str, str] = field(default_factory=dict)
    """id → text; an empty text is not compared."""
    threads: dict[str, int] = field(default_factory=dict)
    """branch thread id → model steps it must hold."""


def audit_rows(store: SessionStore, expected: ExpectedRows, outcome: Outcome) -> int:
    """Compare the session with what the task must have written; returns the rows checked."""
    rows = store.list_session(expected.session_id)
    counts = Counter(r.id for r in rows)
    by_id = {r.id: r for r in rows}
    for row_id, text in expected.rows.items():
        n = counts.get(row_id, 0)
        if n == 0:
            outcome.lose("messages missing", f"{row_id} was never written")
        elif n > 1:
            outcome.lose("messages duplicated", f"{row_id} stored {n} times", n - 1)
        elif text and by_id[row_id].text != text:
            outcome.lose(
                "messages with wrong content",
                f"{row_id} holds {by_id[row_id].text[:80]!r}, expected {text[:80]!r}",
            )
    for row_id in counts.keys() - expected.rows.keys():
        outcome.lose("unexpected messages", f"{row_id} in session {expected.session_id}")
    checked = len(rows)
    for thread_id, steps in expected.threads.items():
        thread = store.list_session(thread_id)
        checked += len(thread)
        kinds = Counter(r.kind for r in thread)
        if kinds["step"] != steps:
            what = "messages duplicated" if kinds["step"] > steps else "messages missing"
            outcome.lose(
                what, f"branch thread {thread_id} holds {kinds['step']} steps, not {steps}"
            )
        if len({r.id for r in thread}) != len(thread):
            outcome.lose("messages duplicated", f"branch thread {thread_id} repeats an id")
        instructions = store.get(ids.thread_instructions_id(thread_id))
        if instructions is None:
            outcome.lose("messages missing", f"branch thread {thread_id} has no instructions")
    return checked


def task_failures(history: WorkflowHistory) -> tuple[int, int, list[str]]:
    """Workflow task failures in one history: (ours, benign, causes of ours)."""
    ours, benign, causes = 0, 0, []
    for event in history.events:
        if event.event_type != _WFT_FAILED:
            continue
        cause = event.workflow_task_failed_event_attributes.cause
        if cause in BENIGN_CAUSES:
            benign += 1
            continue
        ours += 1
        failure = event.workflow_task_failed_event_attributes.failure
        causes.append(f"{WorkflowTaskFailedCause.Name(cause)}: {failure.message[:160]}")
    return ours, benign, causes


async def fetch_histories(client: Client, queue: str) -> list[WorkflowHistory]:
    """Every run of every workflow on ``queue``: tasks, their later runs, branches."""
    histories = []
    async for execution in client.list_workflows(f"TaskQueue = '{queue}'"):
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        histories.append(await handle.fetch_history())
    return histories


async def audit_histories(
    client: Client,
    queues: list[str],
    secrets: list[str],
    outcome: Outcome,
    *,
    probed: set[str] | None = None,
    sealed: tuple[str, ...] = (),
) -> None:
    """No key in any exported history, no workflow task failure of ours, every history
    replays against the current workflow code (with the client's converter, so encrypted
    histories are decrypted as a worker would). On the ``probed`` queues a key or a workflow
    task failure is a probe's finding, counted by the probe itself; they still replay.

    ``sealed``: with encryption on, texts users and models wrote (the planned tasks' words)
    that must not be readable in any history: looked for in its protobuf bytes, where a
    payload's data is as written (the JSON export shows it in base64)."""
    histories: list[WorkflowHistory] = []
    scanned = benign_total = 0
    for queue in queues:
        found = await fetch_histories(client, queue)
        histories += found
        for history in found:
            exported = history.to_json()
            scanned += len(exported)
            # The export shows payload data in base64; the protobuf bytes hold it as written.
            stored = b"".join(event.SerializeToString() for event in history.events)
            for secret in [] if queue in (probed or set()) else secrets:
                # The whole key, and its tail alone: providers that echo a key mask its start.
                if any(s in exported or s.encode() in stored for s in (secret, secret[-12:])):
                    outcome.lose("secrets in history", f"a provider key in {history.workflow_id}")
            for text in sealed:
                if text.encode() in stored:
                    outcome.lose(
                        "user text readable in history", f"{text!r} in {history.workflow_id}"
                    )
            ours, benign, causes = task_failures(history)
            benign_total += benign
            if ours and queue not in (probed or set()):
                outcome.lose("workflow task failures", f"{history.workflow_id}: {causes[0]}", ours)
    replayer = Replayer(workflows=WORKFLOWS, data_converter=client.data_converter)
    results = await replayer.replay_workflows(_each(histories), raise_on_replay_failure=False)
    by_run = {h.run_id: h.workflow_id for h in histories}
    for run_id, failure in results.replay_failures.items():
        outcome.lose(
            "histories that do not replay", f"{by_run.get(run_id, run_id)}: {failure}"[:300]
        )
    outcome.facts["histories exported and scanned for keys"] = len(histories)
    outcome.facts["bytes of history scanned"] = scanned
    outcome.facts["histories replayed"] = len(histories)
    if sealed:
        outcome.facts["texts looked for in the encrypted histories"] = ", ".join(
            repr(t) for t in sealed
        )
    outcome.facts["workflow task retries after server-side races (benign)"] = benign_total


async def _each(histories: list[WorkflowHistory]) -> AsyncIterator[WorkflowHistory]:
    for history in histories:
        yield history
