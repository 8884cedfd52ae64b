"""Answers from the user: their wire form, and the validation an update handler runs before it
accepts one. Every rejection is written for the person answering, through a frontend."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from errands.contracts.asking import (
    EXPECTED_FORM,
    OTHER_LABEL,
    OTHER_PREFIX,
    Answer,
    Question,
    QuestionSet,
)
from errands.errors import AnswerRejected


def is_dismissal(answer: Answer) -> bool:
    """Answered with nothing chosen for any question: "don't decide for me, let's talk"."""
    return answer.status == "answered" and not any(
        value.strip() for values in answer.answers.values() for value in values
    )


def validate_answer(qs: QuestionSet, answer: Answer | Mapping[str, Any] | Any) -> None:
    """Raise ``AnswerRejected`` unless ``answer`` can be accepted for the pending ``qs``."""
    clean_answer(qs, answer)


def clean_answer(qs: QuestionSet, answer: Answer | Mapping[str, Any] | Any) -> Answer:
    """The answer validated and normalised: values trimmed, blanks and repeats dropped, labels
    spelled as offered, free text as ``Other: <text>``, and every question id present."""
    given = _as_answer(answer)
    if given.question_set_id != qs.id:
        raise AnswerRejected(
            f"This answer is for question set {given.question_set_id!r}, but the question "
            f"waiting for an answer is {qs.id!r}. Answer {qs.id!r} instead."
        )
    if given.status == "cancelled":
        return Answer(question_set_id=qs.id, status="cancelled")
    known = [q.id for q in qs.questions]
    for question_id in given.answers:
        if question_id not in known:
            raise AnswerRejected(
                f"There is no question {question_id!r} in question set {qs.id!r}; its "
                f"questions are {', '.join(known)}."
            )
    chosen = {q.id: _clean_values(q, given.answers.get(q.id, [])) for q in qs.questions}
    if any(chosen.values()):  # all empty is a dismissal, which is a valid answer
        for q in qs.questions:
            if q.required and not chosen[q.id]:
                raise AnswerRejected(f"{_name(q)} needs an answer: {how_to_answer(q)}.")
    return Answer(question_set_id=qs.id, status="answered", answers=chosen)


def how_to_answer(q: Question) -> str:
    if q.type == "text":
        return "write the answer as text"
    many = "one or more of" if q.multi_select else "one of"
    return f'choose {many} {_quoted(q.labels())}, or write "{OTHER_PREFIX} <your own answer>"'


def other_text(q: Question, value: str) -> str | None:
    """The free text of an ``Other: <text>`` choice on a multiple-choice question, else None."""
    if q.type == "text" or value in q.labels():
        return None
    if value[: len(OTHER_PREFIX)].casefold() == OTHER_PREFIX.casefold():
        return value[len(OTHER_PREFIX) :].strip()
    return None


def _clean_values(q: Question, values: list[str]) -> list[str]:
    present = [value.strip() for value in values if value.strip()]
    if q.type == "text":
        if len(present) > 1:
            raise AnswerRejected(
                f"{_name(q)} takes one written answer, but {len(present)} were given. Send "
                "them as one text."
            )
        return present
    chosen = list(dict.fromkeys(_choice(q, value) for value in present))
    if len(chosen) > 1 and not q.multi_select:
        raise AnswerRejected(
            f"{_name(q)} takes a single choice, but {len(chosen)} were given: "
            f"{_quoted(chosen)}. Pick one."
        )
    return chosen


def _choice(q: Question, value: str) -> str:
    for label in q.labels():
        if label.casefold() == value.casefold():
            return label
    text = other_text(q, value)
    if text:
        return f"{OTHER_PREFIX} {text}"
    if text is not None or value.casefold() == OTHER_LABEL.casefold():
        raise AnswerRejected(
            f'{_name(q)}: write your own answer after "{OTHER_PREFIX}", for example '
            f'"{OTHER_PREFIX} something else entirely".'
        )
    raise AnswerRejected(
        f"{_name(q)}: {value!r} is not one of the offered options ({_quoted(q.labels())}). To "
        f'answer in your own words, send it as "{OTHER_PREFIX} {value}".'
    )


def _as_answer(answer: Any) -> Answer:
    if isinstance(answer, Answer):
        return answer
    try:
        if isinstance(answer, str | bytes):
            return Answer.model_validate_json(answer)
        return Answer.model_validate(answer)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the answer"
        raise AnswerRejected(
            f"The answer is not in the expected form ({where}: {first['msg']}). Send "
            f"{EXPECTED_FORM}."
        ) from None


def _name(q: Question) -> str:
    return f"{q.id} ({q.header})"


def _quoted(values: list[str]) -> str:
    return ", ".join(f'"{value}"' for value in values)
