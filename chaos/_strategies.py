"""Generated bad input: what a careless frontend, a confused user or a misbehaving model sends.

Most of it is near-valid on purpose (the right keys with wrong values, offered labels with odd
case and spacing, references just outside the catalog), since that is what reaches the deep
validation paths; the rest is any JSON at all.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

PENDING = "<pending question set id>"
"""Stands for the id of the question actually waiting; replaced just before sending."""

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=24),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)

# -- answers to a pending question ------------------------------------------------------------

QUESTION_SET = {
    "questions": [
        {
            "question": "Which database should the service use?",
            "header": "Database",
            "options": [{"label": "PostgreSQL"}, {"label": "SQLite"}, {"label": "DuckDB"}],
        },
        {
            "question": "Which qualities matter most?",
            "header": "Priorities",
            "options": [{"label": "Speed"}, {"label": "Cost"}, {"label": "Safety"}],
            "multi_select": True,
            "required": False,
        },
        {"question": "Anything else we should know?", "header": "Notes", "type": "text",
         "required": False},
    ]
}  # fmt: skip
"""What the parked tasks ask: single choice, optional multi-select, optional free text."""

_LABELS = ["PostgreSQL", "SQLite", "DuckDB", "Speed", "Cost", "Safety"]


def _respell(label: str, upper: bool, pad: str) -> str:
    return f"{pad}{label.upper() if upper else label.lower()}{pad}"


labels = st.one_of(
    st.sampled_from(_LABELS),
    st.builds(_respell, st.sampled_from(_LABELS), st.booleans(), st.sampled_from(["", " ", "\t"])),
    st.sampled_from(["Other", "Other:", "other:   ", "", "   "]),
    st.builds(lambda t: f"Other: {t}", st.text(max_size=20)),
    st.text(max_size=30),
)
answer_values = st.one_of(st.lists(labels, max_size=4), labels, json_values)
answer_maps = st.dictionaries(
    st.one_of(st.sampled_from(["q1", "q2", "q3", "q4", "Q1", ""]), st.text(max_size=4)),
    answer_values,
    max_size=4,
)
answer_shaped = st.fixed_dictionaries(
    {"question_set_id": st.one_of(st.just(PENDING), st.just(PENDING), st.text(max_size=12))},
    optional={
        "status": st.one_of(st.sampled_from(["answered", "cancelled"]), json_values),
        "answers": st.one_of(answer_maps, answer_maps, json_values),
    },
)
answers = st.tuples(
    st.one_of(answer_shaped, answer_shaped, answer_shaped, json_values),
    st.sampled_from(["update", "signal"]),
)


def with_pending(value: Any, set_id: str) -> Any:
    if value == PENDING:
        return set_id
    if isinstance(value, dict):
        return {k: with_pending(v, set_id) for k, v in value.items()}
    return value


# -- side questions -----------------------------------------------------------------------------

side_texts = st.one_of(
    st.text(max_size=200),
    st.sampled_from(["", "   ", "\n\t ", "?"]),
    st.builds(lambda t, n: t * n, st.text(min_size=1, max_size=8), st.integers(1, 5000)),
)
side_payloads = st.one_of(
    st.fixed_dictionaries({"question": side_texts}),
    st.fixed_dictionaries({"question": side_texts}, optional={"extra": json_values}),
    json_values,
)
SIDE_MODES = ["answers"] * 4 + ["calls a tool"] * 2 + ["answers empty", "fails 500", "fails 400"]
"""How the model behaves toward the side question; the slow failure modes are rarer."""
side_questions = st.tuples(side_payloads, st.sampled_from(SIDE_MODES), st.booleans())

# -- control-tool arguments ---------------------------------------------------------------------

_texts = st.one_of(st.text(max_size=40), st.sampled_from(["", "  ", "\n"]), json_values)
_subtask = st.fixed_dictionaries(
    {"type": st.one_of(st.sampled_from(["general", "astrology", "", "GENERAL"]), json_values),
     "prompt": _texts},
    optional={
        "references": st.one_of(
            st.lists(st.one_of(st.integers(-2, 4), st.booleans(), scalars), max_size=4),
            json_values,
        ),
        "params": json_values,
    },
)  # fmt: skip
_subtasks = st.one_of(st.lists(_subtask, max_size=10), json_values)
_option = st.one_of(
    st.fixed_dictionaries({"label": _texts}, optional={"description": _texts}), st.text(max_size=8)
)
_question = st.fixed_dictionaries(
    {"question": _texts},
    optional={
        "header": _texts,
        "type": st.one_of(st.sampled_from(["multiple_choice", "text", "essay"]), json_values),
        "options": st.one_of(st.lists(_option, max_size=5), json_values),
        "multi_select": st.one_of(st.booleans(), scalars),
        "required": st.one_of(st.booleans(), scalars),
    },
)
_questions = st.one_of(st.lists(_question, max_size=4), json_values)


def _maybe_string(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Models sometimes send a nested list as a JSON string."""
    return st.one_of(strategy, strategy.map(json.dumps))


_shaped = {
    "final_reply": st.fixed_dictionaries({"text": _texts}),
    "delegate": st.fixed_dictionaries(
        {"reply": _texts, "subtasks": _maybe_string(_subtasks)}, optional={"extra": json_values}
    ),
    "ask_user": st.fixed_dictionaries(
        {"questions": _maybe_string(_questions)},
        optional={"decision_id": _texts, "new_evidence": _texts},
    ),
}


def _call(name: str) -> st.SearchStrategy[tuple[str, str]]:
    arguments = st.one_of(
        _shaped[name].map(json.dumps),
        _shaped[name].map(json.dumps),
        json_values.map(json.dumps),
        st.text(max_size=40),
    )
    return st.tuples(st.just(name), arguments)


control_calls = st.lists(
    st.sampled_from(["final_reply", "delegate", "ask_user"]).flatmap(_call), min_size=1, max_size=3
)
"""One model step: one to three control calls with generated arguments (raw strings, so
malformed JSON is in reach)."""


EXPLICIT: dict[str, list[Any]] = {
    "answers": [
        ({"question_set_id": PENDING, "answers": {"q1": ["sqlite "]}}, "signal"),
        ({"question_set_id": PENDING, "answers": {"q1": ["Other: a managed one"]}}, "update"),
    ],
    "side questions": [({"question": "What have you found so far?"}, "answers", False)],
    "control-tool arguments": [
        [("delegate", json.dumps({"reply": "On it.", "subtasks": [{"type": "general",
                                  "prompt": "look", "references": [1]}]}))],
        [("ask_user", json.dumps(QUESTION_SET)), ("final_reply", json.dumps({"text": "no"}))],
    ],
}  # fmt: skip
"""The good paths, run first in every run, however few examples it generates."""
