"""What the model reads back from ``ask_user`` in every outcome, and the pending question as
frontends see it. No outcome is ever a bare "no answer": each says what happened and what to do."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from errands.agent.asking._answers import clean_answer, how_to_answer, is_dismissal, other_text
from errands.contracts.asking import OTHER_LABEL, OTHER_PREFIX, Answer, Question, QuestionSet

if TYPE_CHECKING:
    from errands.contracts.asking import RememberedAnswer

_NOTHING_CHOSEN = (
    "Do not treat any option as chosen. Go on only with work that does not depend on this "
    "answer; if everything depends on it, end with a reply that says what you need the user to "
    "decide."
)


def answer_lines(qs: QuestionSet, answers: dict[str, list[str]]) -> list[str]:
    """One line per question, keyed by its header (and its id when headers repeat)."""
    headers = [q.header for q in qs.questions]
    lines = []
    for q in qs.questions:
        key = q.header if headers.count(q.header) == 1 else f"{q.header} ({q.id})"
        chosen = answers.get(q.id) or []
        if chosen:
            lines.append(f"- {key}: " + "; ".join(_shown(q, value) for value in chosen))
        else:
            lines.append(f"- {key}: left unanswered; do not assume any choice for it")
    return lines


def answered_result(qs: QuestionSet, answer: Answer) -> str:
    """The user's choices and the decision id. A dismissal gets ``dismissed_result`` instead:
    an empty answer must never read as permission to proceed."""
    clean = clean_answer(qs, answer)
    if is_dismissal(clean):
        return dismissed_result(qs)
    lines = answer_lines(qs, clean.answers)
    return "\n".join(["The user answered:", *lines, "", f"decision_id: {qs.decision_id}"])


def result_for_answer(qs: QuestionSet, answer: Answer) -> str:
    """The tool result for a validated answer, whatever its status."""
    if answer.status == "cancelled":
        return cancelled_result()
    return answered_result(qs, answer)


def dismissed_result(qs: QuestionSet) -> str:
    return (
        f"The user closed your question ({_topics(qs)}) without choosing anything. Read that as "
        "\"don't decide this for me; let's talk first\", not as leave to pick for them. Do not "
        "choose an option, run a tool or delegate anything toward it. End this round now with "
        "a short final_reply, a sentence or two at most, and wait for the user's next message."
    )


def cancelled_result() -> str:
    return (
        "The question was cancelled before anyone answered it, so nothing was chosen. "
        + _NOTHING_CHOSEN
    )


def timed_out_result(hours: float) -> str:
    unit = "hour" if hours == 1 else "hours"
    return (
        f"Nobody answered within {hours:g} {unit}, so the question expired and nothing was "
        "chosen. " + _NOTHING_CHOSEN
    )


def malformed_result(error: str) -> str:
    return (
        f"An answer arrived but could not be read ({error.strip() or 'no detail'}), so the "
        "user's choice is unknown; do not guess it from that answer. " + _NOTHING_CHOSEN
    )


def headless_result(qs: QuestionSet) -> str:
    return (
        f"Nobody can answer questions in this run (it runs unattended), so your question "
        f"({_topics(qs)}) was not put to anyone and no user answered. Decide it yourself: "
        "whatever you pick is your own assumption, not the user's answer. Say plainly in your "
        "reply which assumption you made and, where the options differ in risk, choose the "
        "safest one that is easiest to undo."
    )


def remembered_result(decision: RememberedAnswer) -> str:
    return "\n".join(
        [
            "Not asked again: the user already answered this earlier in this session "
            f"(decision_id: {decision.decision_id}). Their answer:",
            decision.summary,
            "",
            "Go on with that answer. Only if you have learned something that changes the "
            f'picture, call ask_user again with decision_id "{decision.decision_id}" and '
            "new_evidence saying what changed.",
        ]
    )


def pending_view(qs: QuestionSet) -> dict[str, Any]:
    """The pending question set for ``errands status --json`` and the HTTP status."""
    view: dict[str, Any] = {
        "id": qs.id,
        "decision_id": qs.decision_id,
        "questions": [_question_view(q) for q in qs.questions],
        "how_to_answer": (
            f'Per question id, send offered labels or "{OTHER_PREFIX} <your own words>"; a text '
            "question takes any text. Sending nothing for every question dismisses it."
        ),
    }
    if qs.reopens:
        view["reopens"] = {"decision_id": qs.cited_decision_id, "new_evidence": qs.new_evidence}
    return {"pending_question": view}


def _question_view(q: Question) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": q.id,
        "header": q.header,
        "question": q.question,
        "type": q.type,
        "multi_select": q.multi_select,
        "required": q.required,
        "options": [],
        "answer": how_to_answer(q),
    }
    if q.type == "multiple_choice":
        view["options"] = [
            {"label": o.label, "description": o.description, "free_text": False} for o in q.options
        ] + [
            {
                "label": OTHER_LABEL,
                "description": f'Your own answer, sent as "{OTHER_PREFIX} <text>".',
                "free_text": True,
            }
        ]
    return view


def _shown(q: Question, value: str) -> str:
    if q.type == "text":
        return json.dumps(value, ensure_ascii=False)
    text = other_text(q, value)
    if text:
        return f"{OTHER_LABEL}, in the user's own words: {json.dumps(text, ensure_ascii=False)}"
    return value


def _topics(qs: QuestionSet) -> str:
    return ", ".join(f'"{q.header}"' for q in qs.questions)
