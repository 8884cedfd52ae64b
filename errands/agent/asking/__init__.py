"""Asking the user (SPEC §2): the ``ask_user`` tool, its answers, decision memory and the
results the model reads. Pure and deterministic, so workflow code imports it directly.

The answer wire form, for every frontend (``errands answer TASK q1=...``, the HTTP API, the
workflow update and signal)::

    {"question_set_id": "...", "status": "answered" | "cancelled",
     "answers": {"q1": ["PostgreSQL"], "q2": ["Other: a managed service"], "q3": ["free text"]}}

- A multiple-choice value is an offered label (matched trimmed and case-insensitively, stored
  as offered) or the automatic "Other" written ``Other: <your own words>``. Any other value is
  rejected with the offered labels, so a typo never passes for free text. A bare ``Other`` or
  ``Other:`` with nothing after it is rejected too.
- A text question takes one value, any text.
- Blank values count as nothing. A single-select question takes at most one choice; a required
  question needs one, unless nothing at all is chosen for any question: that is a dismissal
  ("don't decide for me, let's talk"), which is valid and never remembered as a decision.
- A bare string where a list is expected is read as a list of one.

The model side: ``parse_ask_user`` trims every text; a missing or blank header is cut from the
question (at most 24 characters, on a word boundary) and never counts as a shared header in
decision matching; an option labelled exactly "Other" is dropped (the free-text Other is always
offered) before the 2-4 option count is checked.
"""

from errands.agent.asking._answers import clean_answer, is_dismissal, validate_answer
from errands.agent.asking._decisions import (
    Similarity,
    accepted_decision,
    check_citation,
    find_remembered,
    similarity,
    terms,
)
from errands.agent.asking._questions import ask_user_spec, parse_ask_user
from errands.agent.asking._results import (
    answer_lines,
    answered_result,
    cancelled_result,
    dismissed_result,
    headless_result,
    malformed_result,
    pending_view,
    remembered_result,
    result_for_answer,
    timed_out_result,
)
from errands.contracts.asking import (
    OTHER_PREFIX,
    Answer,
    AnswerStatus,
    Option,
    Question,
    QuestionSet,
    QuestionType,
    RememberedAnswer,
    decision_id,
)

__all__ = [
    "OTHER_PREFIX",
    "Answer",
    "AnswerStatus",
    "RememberedAnswer",
    "Option",
    "Question",
    "QuestionSet",
    "QuestionType",
    "Similarity",
    "accepted_decision",
    "answer_lines",
    "answered_result",
    "ask_user_spec",
    "cancelled_result",
    "check_citation",
    "clean_answer",
    "decision_id",
    "dismissed_result",
    "find_remembered",
    "headless_result",
    "is_dismissal",
    "malformed_result",
    "parse_ask_user",
    "pending_view",
    "remembered_result",
    "result_for_answer",
    "similarity",
    "terms",
    "timed_out_result",
    "validate_answer",
]
