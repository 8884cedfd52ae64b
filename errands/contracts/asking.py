"""Asking the user: a question set as the user is asked it, an answer as frontends send it, and
an accepted answer as the session remembers it. The rules (parsing an ``ask_user`` call,
validating an answer, matching remembered answers) live in ``errands.agent.asking``."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field, field_validator

from errands.contracts.principals import Principal

QuestionType = Literal["multiple_choice", "text"]

MAX_QUESTIONS = 3
MIN_OPTIONS = 2
MAX_OPTIONS = 4
OTHER_LABEL = "Other"
HEADER_DEFAULT_LENGTH = 24


class Option(BaseModel):
    label: str
    description: str | None = None


class Question(BaseModel):
    id: str
    """``q1`` … ``qN``, in the order the model asked."""
    question: str
    header: str
    header_derived: bool = False
    """True when the model gave no header and it was cut from the question; such a header is
    shown to the user but never counts as a shared header when matching remembered decisions."""
    type: QuestionType = "multiple_choice"
    options: list[Option] = Field(default_factory=list)
    """Empty for ``text`` questions. The automatic "Other" is not listed here."""
    multi_select: bool = False
    required: bool = True

    def labels(self) -> list[str]:
        return [option.label for option in self.options]


class QuestionSet(BaseModel):
    """One ``ask_user`` call, validated: what the user is asked and what is pending."""

    id: str
    questions: list[Question]
    cited_decision_id: str | None = None
    """The remembered decision the model asks to reopen, if any."""
    new_evidence: str | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def decision_id(self) -> str:
        """The id the answer is remembered under: the cited id when reopening a decision (so
        reopening overwrites it), otherwise the content id of the questions."""
        return self.cited_decision_id or decision_id(self.questions)

    @property
    def reopens(self) -> bool:
        """The call cites a decision and says why it should be asked again."""
        return bool(self.cited_decision_id and self.new_evidence)

    def question(self, question_id: str) -> Question | None:
        return next((q for q in self.questions if q.id == question_id), None)


def decision_id(questions: QuestionSet | Sequence[Question]) -> str:
    """``dec-`` + the first 16 hex digits of SHA-256 over the questions' content.

    The hashed bytes are, for each question in order, its prompt and then each option label in
    order, every part lower-cased, trimmed, UTF-8 encoded and followed by one NUL byte. Headers,
    descriptions and flags do not count: rewording a tab title is still the same ambiguity.
    """
    items = questions.questions if isinstance(questions, QuestionSet) else questions
    digest = hashlib.sha256()
    for q in items:
        for part in (q.question, *q.labels()):
            digest.update(part.strip().lower().encode("utf-8") + b"\0")
    return "dec-" + digest.hexdigest()[:16]


AnswerStatus = Literal["answered", "cancelled"]

OTHER_PREFIX = OTHER_LABEL + ":"
"""A choice written ``Other: <text>`` is the user's own words (the automatic "Other")."""

EXPECTED_FORM = (
    '{"question_set_id": "...", "status": "answered" or "cancelled", '
    '"answers": {"q1": ["an offered label" or "Other: your own words"]}}'
)


class Answer(BaseModel):
    """An answer to one pending question set, as frontends send it."""

    question_set_id: str
    status: AnswerStatus = "answered"
    answers: dict[str, list[str]] = Field(default_factory=dict)
    """Per question id: offered labels, ``Other: <text>``, or for a text question its text."""
    by: Principal | None = None
    """Who answered, as the client established (``question_answered`` names them)."""

    @field_validator("answers", mode="before")
    @classmethod
    def _one_value_is_a_list_of_one(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: [v] if isinstance(v, str) else v for k, v in value.items()}
        return value


class RememberedAnswer(BaseModel):
    """An accepted answer, remembered for the session under ``decision_id``."""

    decision_id: str
    question_set: QuestionSet
    """The questions as they were asked."""
    answers: dict[str, list[str]]
    """The accepted answer, normalised (see ``clean_answer``)."""
    summary: str
    """One line per question, keyed by header, as the model read it when the user answered."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def headers(self) -> list[str]:
        return [q.header for q in self.question_set.questions]
