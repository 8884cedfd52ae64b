"""A pending question set as an MCP form (elicitation ``requestedSchema``), and a filled form
back as errands' answers. One mapping, used by the elicitation path of ``run_task`` and by the
tasks extension's ``inputRequests``::

    question                          form field(s)
    single-select, options            QID: string, enum of the labels
    multi-select, options             QID: array of string, items an enum of the labels
    the automatic "Other"             QID_other: string ("Other: <words>" when filled)
    text question (no options)        QID: string

    elicitation action                errands answer
    accept                            answered (the fields filled; the task validates them)
    decline                           dismissed (nothing chosen: the agent stops and waits)
    cancel                            the question cancelled (the agent goes on without it)

No field is required by the form: a required question left empty is refused by the task with
its own message, and the form is asked again with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from errands.contracts.asking import OTHER_PREFIX

OTHER_SUFFIX = "_other"
"""The form field of a question's "Other" answer: ``q1_other``."""

Action = Literal["accept", "decline", "cancel"]


def offered(question: Mapping[str, Any]) -> list[str]:
    """The labels a question offers (the automatic "Other" is not one)."""
    return [
        str(option["label"])
        for option in question.get("options") or []
        if not option.get("free_text", False)
    ]


def form_schema(pending: Mapping[str, Any]) -> dict[str, Any]:
    """The ``requestedSchema`` of a pending question set (``pending_question`` of the status)."""
    properties: dict[str, Any] = {}
    for question in pending["questions"]:
        qid, labels = str(question["id"]), offered(question)
        about = {"title": str(question["header"]), "description": str(question["question"])}
        if not labels:
            properties[qid] = {"type": "string", **about}
            continue
        if question.get("multi_select"):
            items = {"type": "string", "enum": labels}
            properties[qid] = {"type": "array", "items": items, **about}
        else:
            properties[qid] = {"type": "string", "enum": labels, **about}
        properties[qid + OTHER_SUFFIX] = {
            "type": "string",
            "title": f"{question['header']}: other",
            "description": "Your own answer instead of (or besides) the options",
        }
    return {"type": "object", "properties": properties}


def form_message(task_id: str, pending: Mapping[str, Any], rejected: str | None = None) -> str:
    """What the form says above its fields: the task, each question, and why a previous
    answer was refused."""
    lines = []
    if rejected:
        lines.append(f"Your answer was not accepted: {rejected}. Please answer again.")
    lines.append(f"Task {task_id} asks:")
    for question in pending["questions"]:
        optional = "" if question.get("required", True) else " (optional)"
        lines.append(f"- {question['header']}: {question['question']}{optional}")
    lines.append("Decline to choose nothing (the agent stops and waits); cancel to withdraw it.")
    return "\n".join(lines)


def answers_from(
    pending: Mapping[str, Any], content: Mapping[str, Any] | None
) -> dict[str, list[str]]:
    """The answers a filled form gives, per question id (unfilled questions left out)."""
    content = content or {}
    answers: dict[str, list[str]] = {}
    for question in pending["questions"]:
        qid, labels = str(question["id"]), offered(question)
        chosen = _strings(content.get(qid))
        if labels:
            other = " ".join(_strings(content.get(qid + OTHER_SUFFIX)))
            if other:
                chosen.append(f"{OTHER_PREFIX} {other}")
        if chosen:
            answers[qid] = chosen
    return answers


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, Sequence):
        return [str(v) for v in value if isinstance(v, str) and v.strip()]
    return []
