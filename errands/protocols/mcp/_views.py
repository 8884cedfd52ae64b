"""A task as the MCP tools return it: the fields of ``errands status --json`` a client needs
(state, phase, reply or error, the pending question or approval) and a ``summary`` line that
says what to call next."""

from __future__ import annotations

from typing import Any

from errands.contracts.workflows import TaskResult
from errands.protocols.mcp._forms import offered

SHOWN = (
    "task_id",
    "session_id",
    "status",
    "phase",
    "round",
    "reply",
    "error",
    "pending_question",
    "pending_approval",
    "next_task",
    "undelivered",
    "answer_errors",
    "cost_usd",
)
"""The status fields a tool result carries (the round's request and the ledger stay out)."""


def task_view(status: TaskResult, note: str | None = None) -> dict[str, Any]:
    public = status.public()
    view = {key: public[key] for key in SHOWN if key in public}
    view["summary"] = summary(status, note)
    return view


def summary(status: TaskResult, note: str | None = None) -> str:
    task = status.task_id
    if status.status == "replied":
        return status.reply or ""
    if status.status == "failed":
        error = status.error
        kind, message = (error.kind, error.message) if error else ("internal", "no reason given")
        return f"task {task} failed ({kind}): {message}"
    if status.status == "canceled":
        return f"task {task} was canceled"
    if status.pending_question:
        return question_summary(task, status.pending_question, note)
    if status.pending_approval:
        return approval_summary(task, status.pending_approval)
    lead = f"{note}; " if note else ""
    phase = f" ({status.phase})" if status.phase else ""
    return f"{lead}still working{phase}: call task_status({task!r}) to follow task {task}"


def question_summary(task: str, pending: dict[str, Any], note: str | None = None) -> str:
    lines = [note] if note else []
    lines.append(f"task {task} asks (question set {pending['id']}):")
    example: dict[str, list[str]] = {}
    for q in pending["questions"]:
        labels = offered(q)
        how = "one or more of" if q.get("multi_select") else "one of"
        choices = f" [{how}: {', '.join(labels)}; or 'Other: <your words>']" if labels else ""
        lines.append(f"- {q['id']} · {q['header']}: {q['question']}{choices}")
        example[q["id"]] = [labels[0] if labels else "<your answer>"]
    lines.append(
        f"answer with answer(task_id={task!r}, answers={example!r}), or answer(task_id={task!r}, "
        "dismiss=true) to choose nothing, or cancel_question=true to withdraw it"
    )
    return "\n".join(lines)


def approval_summary(task: str, pending: dict[str, Any]) -> str:
    digest = pending.get("arguments_sha256") or "?"
    return (
        f"task {task} waits for approval of a call of tool {pending.get('tool')!r} "
        f"(approval {pending.get('approval_id')}, arguments sha256 {digest}); read "
        "pending_approval, then approve(task_id, sha256) or deny(task_id, sha256, reason)"
    )
