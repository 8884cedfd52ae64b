"""The event log (SPEC §8): every event of a task, in order, outside Temporal history.

Activities write events to the session store as they do their work; frontends read them (SSE,
``errands watch``, ``Client.events``), so a watcher adds nothing to a task's history. Each event
has a per-task ``seq`` (from 1, in the order written, no gaps), its ``type``, the ``at`` time it
was written, the ``cause`` (the id of what it happened to: a step, a branch, a tool call) and its
fields. It is written once under a deterministic ``key``: a retried or replayed activity that
writes it again changes nothing, so a worker killed mid-task leaves no duplicate.

``EVENT_FIELDS`` is the schema, in one place: every type and what its fields mean. A test pins
it, and ``docs/events.md`` is generated from it.

Workflows import this module: it stays free of I/O.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from errands.contracts.principals import Principal

EventType = Literal[
    "task_started",
    "round_started",
    "model_call_started",
    "model_call_finished",
    "reply_delta",
    "delegated",
    "branch_started",
    "branch_finished",
    "tool_requested",
    "tool_approved",
    "tool_denied",
    "tool_finished",
    "approval_requested",
    "approval_answered",
    "approval_recorded",
    "question_asked",
    "question_answered",
    "side_question_asked",
    "side_question_answered",
    "message_received",
    "message_delivered",
    "compaction",
    "replied",
    "failed",
    "canceled",
    "notification_sent",
    "notification_failed",
]

ApprovalOutcome = Literal["approve", "approve_always", "deny", "timed_out", "headless", "cancelled"]
"""What became of a call that waited for approval (``approval_answered``'s ``decision``)."""

TERMINAL: frozenset[str] = frozenset({"replied", "failed", "canceled"})
"""The types that end a task's log."""

_ROUND = "the round (0, 1, …)"
_BY = '{"id", "role"} of the principal'
_CALL_SHA256 = "SHA-256 (hex) of the arguments of the call it answered (approval_requested's)"
_WHERE = '"main" for the main agent, else the branch as "r{round}/b{ordinal}"'

EVENT_FIELDS: dict[str, dict[str, str]] = {
    "task_started": {
        "session_id": "the task's session",
        "text": "the user's message (cut)",
        "owner": "the id of the principal the task belongs to (null: nobody's)",
    },
    "round_started": {"round": _ROUND},
    "model_call_started": {
        "where": _WHERE,
        "step": "the step of the main agent or of the branch",
        "model": "provider:model",
        "attempt": "the activity attempt (1, 2, …)",
    },
    "model_call_finished": {
        "where": _WHERE,
        "step": "as model_call_started",
        "model": "provider:model",
        "attempt": "the activity attempt that answered",
        "usage": "input_tokens, output_tokens, cached_input_tokens, reasoning_tokens",
    },
    "reply_delta": {
        "where": _WHERE,
        "step": "as model_call_started",
        "attempt": "as model_call_started",
        "text": "the text written since the previous delta of this attempt (batched, 100 ms): "
        "a branch's answer, or the main agent's reply as its final_reply call streams",
        "superseded": "true on the marker a retried attempt writes first (text empty): drop "
        "what the step's earlier attempts wrote; false on every other delta",
    },
    "delegated": {
        "round": _ROUND,
        "subtasks": "how many",
        "types": "each subtask's type, in order (absent in logs written before it)",
        "reply": "the acknowledgement",
    },
    "branch_started": {"round": _ROUND, "ordinal": "the subtask (1, 2, …)"},
    "branch_finished": {
        "round": _ROUND,
        "ordinal": "the subtask",
        "subtask_type": "its subtask type",
        "status": "completed or failed",
        "output": "the branch's answer or error (a preview)",
    },
    "tool_requested": {"where": _WHERE, "tool": "the name the model called", "arguments": "cut"},
    "tool_approved": {
        "where": _WHERE,
        "tool": "as tool_requested",
        "by": f"who approved it, each {_BY} (policy two: both; empty for an answer that named "
        "nobody)",
    },
    "tool_denied": {
        "where": _WHERE,
        "tool": "as tool_requested",
        "reason": "what the model is told instead (denied, unanswered, headless, cancelled)",
        "by": f"who denied it, each {_BY} (empty when no person did)",
    },
    "tool_finished": {
        "where": _WHERE,
        "tool": "as tool_requested",
        "is_error": "whether the result is an error",
        "chars": "the result's length (the text is in the store)",
    },
    "approval_requested": {
        "approval_id": "its id (errands approve/deny take it)",
        "tool": "the name the model called",
        "arguments": "the exact arguments the tool will receive, whole, canonical JSON (indented, "
        "invisible characters escaped)",
        "arguments_sha256": "SHA-256 (hex) of arguments as UTF-8; approve/deny may carry it",
        "arguments_bytes": "the UTF-8 size of arguments",
        "why": "the model's own words in the step that made the call, if any (not the call)",
        "where": '"main" for the main agent, else the branch ("round 0 · subtask 2")',
        "can_approve_always": "whether approve_always may answer it (false for policy always)",
        "expires_at": "when the call stops waiting (ISO 8601, UTC)",
        "policy": "who must approve it: ask or always (its owner or an admin), approver (an "
        "approver or an admin), two (two different principals, each its owner, an approver or "
        "an admin; each approval before the last is an approval_recorded)",
    },
    "approval_answered": {
        "approval_id": "as approval_requested",
        "decision": "approve, approve_always, deny, timed_out, headless or cancelled",
        "reason": "why the user denied it (null otherwise)",
        "arguments_sha256": "the digest a person's answer carried (else null)",
        "by": f"who answered: {_BY} (null: an answer that named nobody; absent when no person "
        "answered: timed_out, headless, cancelled)",
        "approved_by": f"everyone who approved the call, each {_BY} (policy two: both; absent "
        "as by)",
        "call_sha256": f"{_CALL_SHA256} (absent as by)",
        "tool": "the name the model called (absent as by)",
    },
    "approval_recorded": {
        "approval_id": "as approval_requested",
        "by": f"who approved: {_BY}",
        "approved_by": "everyone who approved the call so far, this approval included",
        "waiting_for": "approvals it still waits for (policy two: 1) before it runs",
        "arguments_sha256": "as approval_answered",
        "call_sha256": _CALL_SHA256,
        "tool": "the name the model called",
    },
    "question_asked": {"round": _ROUND, "question_set_id": "its id", "headers": "one per question"},
    "question_answered": {
        "round": _ROUND,
        "question_set_id": "its id",
        "status": "how",
        "by": f"who answered: {_BY} (null: an answer that named nobody; absent when it timed out)",
    },
    "side_question_asked": {"question": "the question (cut)"},
    "side_question_answered": {"answer": "the answer (cut)", "model": "provider:model"},
    "message_received": {
        "message_id": "task:{task}:steer:{n}",
        "mode": "steer/interrupt/queue",
        "by": f"who sent it: {_BY} (null: a message that named nobody)",
    },
    "message_delivered": {"message_id": "as message_received", "outcome": "what became of it"},
    "compaction": {"where": _WHERE, "covers": "[first seq, last seq] summarised"},
    "replied": {"replied_by": "model or join", "chars": "the reply's length"},
    "failed": {"kind": "the failure kind", "message": "what happened and what to do"},
    "canceled": {"by": f"who asked: {_BY} (absent when nobody said: a cancellation from Temporal)"},
    "notification_sent": {
        "id": "the webhook-id, the same on every attempt (the receiver's idempotency key)",
        "event": "what it notified: waiting_for_user, replied, failed or canceled",
        "target": "the target's reference: config:NAME or stored:OWNER:K",
        "host": "the host it went to",
        "attempts": "how many attempts it took",
        "status": "the receiver's HTTP status",
    },
    "notification_failed": {
        "id": "as notification_sent",
        "event": "as notification_sent",
        "target": "as notification_sent",
        "host": "the host it was for (absent when the target was unknown)",
        "attempts": "how many attempts were made (0: refused before any)",
        "detail": "why it stopped: refused (and why), a final status, or the retry window closed",
    },
}
"""Every event type and its fields (beyond ``seq``, ``type``, ``task_id``, ``at``, ``cause``)."""

COMMON = ("seq", "type", "task_id", "at", "cause")
"""The fields of every event; no type's own field takes one of these names."""

assert set(EVENT_FIELDS) == set(get_args(EventType)), "every type is documented"
assert not any(set(f) & set(COMMON) for f in EVENT_FIELDS.values()), "no field shadows another"


class NewEvent(BaseModel):
    """An event to write once under ``key`` (unique within the task)."""

    task_id: str
    key: str
    type: EventType
    cause: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class StoredEvent(NewEvent):
    seq: int
    at: str

    def public(self) -> dict[str, Any]:
        """The event as frontends show it (SSE data, ``errands watch --json``)."""
        return {
            **self.data,
            "seq": self.seq,
            "type": self.type,
            "task_id": self.task_id,
            "at": self.at,
            "cause": self.cause,
        }


class LiveText:
    """What a frontend shows of the text being written, from a task's events in order: per
    step (``where``, ``step``), the text of its latest attempt. A ``superseded`` marker, a
    delta of a later attempt or a later attempt's ``model_call_started`` replaces the text of
    the earlier attempts; a delta of an earlier attempt arriving late is ignored. The web page
    follows the same rule (errands/gateway/static/app.js)."""

    def __init__(self) -> None:
        self._steps: dict[tuple[str, int], tuple[int, str]] = {}
        """(where, step) -> (the attempt shown, its text so far)."""

    def apply(self, event: dict[str, Any]) -> None:
        """Take one event (``StoredEvent.public()``; events of other types are ignored)."""
        if event["type"] not in ("reply_delta", "model_call_started"):
            return
        key = (event["where"], event["step"])
        attempt = event["attempt"]
        shown, text = self._steps.get(key, (0, ""))
        if attempt < shown:
            return
        if attempt > shown or event.get("superseded"):
            text = ""
        if event["type"] == "reply_delta" and not event.get("superseded"):
            text += event["text"]
        self._steps[key] = (attempt, text)

    def text(self, where: str = "main") -> str:
        """The text of the latest step of ``where`` that wrote any, trimmed as a reply is
        stored."""
        written = [(step, text) for (w, step), (_, text) in self._steps.items() if w == where]
        return max(((s, t) for s, t in written if t.strip()), default=(0, ""))[1].strip()


def named(principal: Principal | None) -> dict[str, str] | None:
    """A principal as events and views name it: its id and role (never a token; a principal
    holds none)."""
    return None if principal is None else {"id": principal.id, "role": principal.role}


def cut(text: str, limit: int = 400) -> str:
    """``text`` as an event shows it: at most ``limit`` characters."""
    return text if len(text) <= limit else text[:limit] + "…"


def render_schema() -> str:
    """``docs/events.md``: the schema as a reader wants it (a test keeps the file equal to it)."""
    lines = [
        "# The event log",
        "",
        "<!-- generated from errands/contracts/events.py (EVENT_FIELDS);"
        " tests/test_events.py checks it -->",
        "",
        "Every event of a task, in order, written by activities to the session store (never to",
        "Temporal history). Each event has `seq` (per task, from 1, no gaps), `type`, `task_id`,",
        "`at` (when it was written, UTC), `cause` (the id of what it happened to: a step, a",
        "branch, a tool call, a message) and the fields of its type. An event is written once",
        "under a deterministic key: a retried or replayed activity never writes it twice.",
        "",
        "Live text: `reply_delta` events carry what a model call writes as it streams. Keep the",
        "text of each step (`where`, `step`) for its latest attempt: a `superseded` marker, a",
        "delta of a later attempt or that attempt's `model_call_started` replaces the earlier",
        "attempts' text (`errands.contracts.events.LiveText` does this in Python). Read from",
        "`GET /v1/tasks/{id}/events` (server-sent events, `id:` = `seq`, resume with",
        "`Last-Event-ID`), `errands watch TASK --json` or `TaskHandle.events()`.",
        "",
        "| type | fields |",
        "|---|---|",
    ]
    for type_, fields in EVENT_FIELDS.items():
        shown = "; ".join(f"`{name}`: {meaning}" for name, meaning in fields.items()) or "—"
        lines.append(f"| `{type_}` | {shown} |")
    return "\n".join(lines) + "\n"
