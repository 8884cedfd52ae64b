"""A task's progress as events, derived from snapshots of what already exists.

A snapshot is the task's state (the ``status`` query while it runs, its result once it has ended;
queries add no history events) and its ack and branch rows in the session store. A ``Tracker``
turns successive snapshots into events, each emitted once under a stable key, in the task's own
order: round started, its question, its delegation, its branches, the end. ``TaskHandle.progress``
yields them; the gateway streams them as server-sent events.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from errands.contracts.messages import StoredMessage

TERMINAL = ("replied", "failed", "canceled")
EXCERPT = 2000
NOTES = ("phase", "unavailable")
"""Event types that are notes, not steps: another poller may number them differently, so they
carry no SSE id and a client never resumes from one."""


@dataclass(frozen=True)
class ProgressEvent:
    key: str
    """Unique within the task: the SSE id, so a reconnecting client resumes after it."""
    type: str
    """``round_started``, ``waiting_for_user``, ``question_answered``, ``delegated``,
    ``branch_finished``, ``approval_requested``, ``approval_answered``, ``phase``;
    ``unavailable`` while the task cannot be read (no worker,
    Temporal down; ``data["detail"]`` says why); last ``replied``, ``failed`` or ``canceled``,
    whose ``data`` is the task's result as JSON."""
    data: dict[str, Any]

    @property
    def resumable(self) -> bool:
        return self.type not in NOTES

    @property
    def ends(self) -> bool:
        return self.type in TERMINAL

    def sse(self) -> str:
        head = f"id: {self.key}\n" if self.resumable else ""
        return f"{head}event: {self.type}\ndata: {json.dumps(self.data)}\n\n"


@dataclass
class Snapshot:
    status: str
    round: int
    phase: str = ""
    pending: dict[str, Any] | None = None
    approval: dict[str, Any] | None = None
    """The tool call waiting for approval (``pending_approval`` of the status)."""
    state: dict[str, Any] = field(default_factory=dict)
    """The task's result as JSON (what ``TaskResult.public`` gives); sent with the last event."""
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
        self._approvals: dict[str, int] = {}
        self._phase = ""
        self._phases = 0
        self._outages = 0

    def unavailable(self, detail: str) -> ProgressEvent:
        """A note that the task could not be read this time (it is retried)."""
        self._outages += 1
        return ProgressEvent(f"unavailable:{self._outages}", "unavailable", {"detail": detail})

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
        if snap.approval is not None:
            approval_id = snap.approval["approval_id"]
            self._approvals.setdefault(approval_id, snap.round)
            emit(
                f"approval:{approval_id}",
                "approval_requested",
                {"round": snap.round, "approval": snap.approval},
            )
        waiting = snap.approval["approval_id"] if snap.approval else None
        for approval_id, asked_in in self._approvals.items():
            if approval_id != waiting:
                emit(
                    f"approval:{approval_id}:answered",
                    "approval_answered",
                    {"round": asked_in, "approval_id": approval_id},
                )
        if snap.ended:
            emit("end", snap.status, snap.state)
        elif snap.phase and snap.phase != self._phase:
            self._phase, self._phases = snap.phase, self._phases + 1
            emit(f"phase:{self._phases}", "phase", {"round": snap.round, "phase": snap.phase})
        return out


def last_round(rows: list[StoredMessage]) -> int:
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
