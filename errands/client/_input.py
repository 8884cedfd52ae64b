"""What the client checks in every text a person sends before anything reaches a payload: the
one text rule (``errands.contracts.text``: no character the session stores cannot hold) and a
length limit (``errands.contracts.limits``). A refusal is ``InvalidRequest`` naming the field,
so the gateway answers 422 and the CLI exits 2, and nothing is started or sent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from errands.contracts import limits
from errands.contracts.text import problem
from errands.errors import InvalidRequest


def checked(value: str, field: str, limit: int, *, what: str | None = None) -> str:
    """``value`` if it can be stored and is at most ``limit`` characters; ``InvalidRequest``
    naming ``field`` (``what``: how the message calls it) otherwise."""
    if len(value) > limit:
        raise InvalidRequest(
            f"{what or field} has {len(value):,} characters, more than the {limit:,} allowed; "
            "shorten it",
            field=field,
        )
    found = problem(value, what or field)
    if found is not None:
        raise InvalidRequest(found, field=field)
    return value


def checked_answers(answers: Mapping[str, Sequence[str] | str]) -> dict[str, list[str] | str]:
    """An answer's question ids and texts, each checked (``checked``), and their number."""
    if len(answers) > limits.ANSWER_ITEMS:
        raise InvalidRequest(
            f"the answer names {len(answers):,} questions, more than the {limits.ANSWER_ITEMS} "
            "allowed; answer the questions the pending question set asks",
            field="answers",
        )
    out: dict[str, list[str] | str] = {}
    for key, value in answers.items():
        checked(key, "answers", limits.ID_CHARS, what="a question id of the answer")
        where = f"the answer to {key!r}"
        if isinstance(value, str):
            out[key] = checked(value, "answers", limits.ANSWER_CHARS, what=where)
            continue
        if len(value) > limits.ANSWER_ITEMS:
            raise InvalidRequest(
                f"{where} chooses {len(value):,} labels, more than the {limits.ANSWER_ITEMS} "
                "allowed; choose among the labels offered",
                field="answers",
            )
        out[key] = [checked(v, "answers", limits.ANSWER_CHARS, what=where) for v in value]
    return out
