"""The ``ask_user`` tool: its model-facing schema, and the parsing that turns a call into a
``QuestionSet`` or a ``ModelMistake`` the model can repair."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from errands.agent.arguments import nested, parse_arguments
from errands.agent.control import ASK_USER, NOT_BLANK
from errands.contracts.asking import (
    HEADER_DEFAULT_LENGTH,
    MAX_OPTIONS,
    MAX_QUESTIONS,
    MIN_OPTIONS,
    OTHER_LABEL,
    Option,
    Question,
    QuestionSet,
    QuestionType,
)
from errands.contracts.messages import ToolCall, ToolSpec
from errands.errors import ModelMistake

_Fail = Callable[[str], ModelMistake]


def ask_user_spec() -> ToolSpec:
    return ToolSpec(
        name=ASK_USER,
        description=(
            "Put a structured question to the user and wait for the answer. Use it only for a "
            "real fork that is the user's to decide and that neither the conversation nor a "
            "sensible default settles: which approach, which scope, which of several valid "
            "readings of the request. When one option is clearly sensible, take it and go on "
            f"instead of asking. Ask 1 to {MAX_QUESTIONS} related questions in one call. A "
            f"multiple-choice question has {MIN_OPTIONS} to {MAX_OPTIONS} options, the one you "
            "recommend first. The user can always answer in their own words through an "
            '"Other" choice that is added automatically, so never add an "Other" option '
            'yourself. Use type "text" only when no short list of options fits.\n'
            "Answers are remembered for the session: asking the same thing again returns the "
            "remembered answer and its decision_id instead of asking. To reopen a remembered "
            "decision, pass its decision_id together with new_evidence saying what changed."
        ),
        parameters={
            "type": "object",
            "properties": {
                "questions": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_QUESTIONS,
                    "description": "The questions, asked together. Ask each ambiguity once.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "question": {
                                "type": "string",
                                "pattern": NOT_BLANK,
                                "description": "The full question, as the user will read it.",
                            },
                            "header": {
                                "type": "string",
                                "pattern": NOT_BLANK,
                                "description": (
                                    'A very short title for the question, e.g. "Database".'
                                ),
                            },
                            "type": {
                                "type": "string",
                                "enum": ["multiple_choice", "text"],
                                "default": "multiple_choice",
                                "description": (
                                    "multiple_choice: the user picks among your options. "
                                    "text: the user writes the answer; give no options."
                                ),
                            },
                            "options": {
                                "type": "array",
                                "minItems": MIN_OPTIONS,
                                "maxItems": MAX_OPTIONS,
                                "description": (
                                    "For multiple_choice only: the choices, recommended one "
                                    'first, labels all different. No "Other": it is added '
                                    "for you."
                                ),
                                "items": {
                                    "type": "object",
                                    "properties": {
                                        "label": {
                                            "type": "string",
                                            "pattern": NOT_BLANK,
                                            "description": "The choice, in a few words.",
                                        },
                                        "description": {
                                            "type": "string",
                                            "description": "Optional: what this choice means.",
                                        },
                                    },
                                    "required": ["label"],
                                },
                            },
                            "multi_select": {
                                "type": "boolean",
                                "default": False,
                                "description": "Let the user pick more than one option.",
                            },
                            "required": {
                                "type": "boolean",
                                "default": True,
                                "description": "False when the user may leave it unanswered.",
                            },
                        },
                        "required": ["question", "header"],
                    },
                },
                "decision_id": {
                    "type": "string",
                    "pattern": NOT_BLANK,
                    "description": (
                        "Only to reopen a remembered decision: its decision_id, as a result "
                        "gave it to you. Needs new_evidence."
                    ),
                },
                "new_evidence": {
                    "type": "string",
                    "pattern": NOT_BLANK,
                    "description": (
                        "With decision_id: what you learned since that makes the user's earlier "
                        "answer worth asking again."
                    ),
                },
            },
            "required": ["questions"],
            "additionalProperties": False,
        },
    )


def parse_ask_user(call: ToolCall, *, set_id: str) -> QuestionSet:
    """Validate an ``ask_user`` call; every rejection is written for the model to repair."""
    args = parse_arguments(call.arguments, tool=ASK_USER, send="a JSON object with `questions`")
    raw_questions = nested(args.get("questions"))
    if not isinstance(raw_questions, list):
        raise ModelMistake(
            f"ask_user: `questions` must be a list of 1 to {MAX_QUESTIONS} question objects."
        )
    if not 1 <= len(raw_questions) <= MAX_QUESTIONS:
        raise ModelMistake(
            f"ask_user: {len(raw_questions)} questions given; ask 1 to {MAX_QUESTIONS} in one "
            "call (only the ones whose answers you need now)."
        )
    questions = [_parse_question(n, raw) for n, raw in enumerate(raw_questions, 1)]
    return QuestionSet(
        id=set_id,
        questions=questions,
        cited_decision_id=_optional_text(args, "decision_id"),
        new_evidence=_optional_text(args, "new_evidence"),
    )


def _parse_question(n: int, raw: Any) -> Question:
    def fail(message: str) -> ModelMistake:
        return ModelMistake(f"question {n}: {message}")

    if not isinstance(raw, dict):
        raise fail(
            "must be an object with `question`, `header` and, for multiple choice, `options`."
        )
    text = raw.get("question")
    if not isinstance(text, str) or not text.strip():
        raise fail("`question` must be non-blank text the user can read.")
    text = text.strip()
    given_type = raw.get("type")
    if given_type not in (None, "multiple_choice", "text"):
        raise fail(f'unknown type {given_type!r}; use "multiple_choice" (the default) or "text".')
    kind: QuestionType = "text" if given_type == "text" else "multiple_choice"
    header = raw.get("header")
    if header is not None and not isinstance(header, str):
        raise fail("`header` must be a short text.")
    header = (header or "").strip()
    multi_select = _flag(raw, ("multi_select", "multiSelect"), False, fail)
    required = _flag(raw, ("required",), True, fail)
    raw_options = nested(raw.get("options"))
    if kind == "text":
        if raw_options:
            raise fail(
                'a "text" question takes no `options`; remove them, or make it "multiple_choice".'
            )
        options: list[Option] = []
        multi_select = False  # one written answer; nothing to select several of
    else:
        options = _parse_options(raw_options, fail)
    return Question(
        id=f"q{n}",
        question=text,
        header=header or _short_header(text),
        header_derived=not header,
        type=kind,
        options=options,
        multi_select=multi_select,
        required=required,
    )


def _parse_options(raw: Any, fail: _Fail) -> list[Option]:
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise fail(
            f"`options` must be a list of {MIN_OPTIONS} to {MAX_OPTIONS} objects with a `label`."
        )
    options: list[Option] = []
    positions: dict[str, int] = {}
    for m, item in enumerate(raw, 1):
        if isinstance(item, str):
            item = {"label": item}
        if not isinstance(item, dict):
            raise fail(f"option {m} must be an object with a `label`.")
        label = item.get("label")
        if not isinstance(label, str) or not label.strip():
            raise fail(f"option {m} needs a non-blank text `label` of a few words.")
        label = label.strip()
        description = item.get("description")
        if description is not None and not isinstance(description, str):
            raise fail(f"option {m}: `description` must be text.")
        key = label.casefold()
        if key == OTHER_LABEL.casefold():
            continue  # the automatic free-text "Other" already covers it
        if key in positions:
            raise fail(
                f"options {positions[key]} and {m} have the same label {label!r}; give every "
                "option a different label."
            )
        positions[key] = m
        options.append(Option(label=label, description=(description or "").strip() or None))
    if not MIN_OPTIONS <= len(options) <= MAX_OPTIONS:
        raise fail(
            f"a multiple-choice question needs {MIN_OPTIONS} to {MAX_OPTIONS} options, not "
            f'counting "Other" (added automatically); {len(options)} given. With no options '
            'to offer, use type "text".'
        )
    return options


def _flag(raw: dict[str, Any], keys: tuple[str, ...], default: bool, fail: _Fail) -> bool:
    for key in keys:
        value = raw.get(key)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise fail(f"`{keys[0]}` must be true or false.")
        return value
    return default


def _short_header(question: str) -> str:
    """A tab title cut from the question, for a model that gave no header."""
    text = question.rstrip("?？:： ")
    if len(text) <= HEADER_DEFAULT_LENGTH:
        return text or question
    cut = text[:HEADER_DEFAULT_LENGTH]
    if " " in cut:
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip(" ,;:") + "…"


def _optional_text(args: dict[str, Any], key: str) -> str | None:
    value = args.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ModelMistake(f"ask_user: `{key}` must be text.")
    return value.strip() or None
