"""Properties of the pure parts every task leans on: control-call parsing, ask_user parsing and
answer validation, and the catalog rendering. Any input ends in a value or in the one error type
written for its reader, never in a crash, and what comes out keeps its invariants.

``python -m chaos`` runs these with many more examples (``ERRANDS_PROPERTY_EXAMPLES``).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos._strategies import QUESTION_SET, answer_shaped, control_calls, json_values, with_pending
from errands.agent.asking import clean_answer, is_dismissal, parse_ask_user
from errands.agent.catalog import render_session
from errands.agent.control import (
    PRECEDENCE,
    parse_delegate,
    parse_final_reply,
    pick_control_call,
)
from errands.agent.subtask_types import GENERAL
from errands.contracts.asking import QuestionSet, decision_id
from errands.contracts.messages import StoredMessage, ToolCall
from errands.errors import AnswerRejected, ModelMistake
from tests.plugins import RESEARCH

pytestmark = pytest.mark.fast

EXAMPLES = int(os.environ.get("ERRANDS_PROPERTY_EXAMPLES", "100"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TYPES = [GENERAL.info(), RESEARCH.info()]
SAFE_ID = re.compile(r"^[A-Za-z0-9_-]+$")


def calls_of(pairs: list[tuple[str, str]]) -> list[ToolCall]:
    return [ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(pairs)]


# -- control calls ------------------------------------------------------------------------------


@PROPERTY
@given(control_calls, st.integers(0, 6))
def test_a_delegate_call_parses_to_valid_subtasks_or_to_an_error_for_the_model(
    pairs: list[tuple[str, str]], catalog_size: int
) -> None:
    calls = [c for c in calls_of(pairs) if c.name == "delegate"] or calls_of(pairs)[:1]
    try:
        decision = parse_delegate(calls, catalog_size=catalog_size, types=TYPES, max_subtasks=8)
    except ModelMistake as error:
        assert str(error).strip()
        return
    assert decision.reply == decision.reply.strip() and decision.reply
    assert 1 <= len(decision.subtasks) <= 8
    for draft in decision.subtasks:
        assert draft.type in {t.key for t in TYPES}
        assert draft.prompt == draft.prompt.strip() and draft.prompt
        assert draft.references == sorted(set(draft.references))
        assert all(1 <= r <= catalog_size for r in draft.references)


@PROPERTY
@given(control_calls)
def test_a_final_reply_is_its_trimmed_non_blank_text_or_an_error(
    pairs: list[tuple[str, str]],
) -> None:
    try:
        decision = parse_final_reply(calls_of(pairs))
    except ModelMistake:
        return
    assert decision.text and decision.text == decision.text.strip()
    assert json.loads(pairs[-1][1])["text"].strip() == decision.text


@PROPERTY
@given(control_calls, st.sets(st.sampled_from(sorted(PRECEDENCE))))
def test_the_most_committal_offered_control_call_wins(
    pairs: list[tuple[str, str]], offered: set[str]
) -> None:
    calls = calls_of(pairs)
    picked = pick_control_call(calls, offered)
    reached = {c.name for c in calls if c.name in offered}
    if not reached:
        assert picked is None
        return
    assert picked is not None
    name, chosen = picked
    assert name == max(reached, key=PRECEDENCE.__getitem__)
    assert chosen == [c for c in calls if c.name == name]


# -- ask_user and its answers -------------------------------------------------------------------


def ask_arguments(pairs: list[tuple[str, str]]) -> list[str]:
    return [a for n, a in pairs if n == "ask_user"] or [a for _, a in pairs]


@PROPERTY
@given(control_calls)
def test_an_ask_user_call_parses_to_a_well_formed_question_set_or_an_error(
    pairs: list[tuple[str, str]],
) -> None:
    for arguments in ask_arguments(pairs):
        call = ToolCall(id="a", name="ask_user", arguments=arguments)
        try:
            questions = parse_ask_user(call, set_id="t-q1")
        except ModelMistake as error:
            assert str(error).strip()
            continue
        assert 1 <= len(questions.questions) <= 3
        assert [q.id for q in questions.questions] == [
            f"q{n}" for n in range(1, len(questions.questions) + 1)
        ]
        for q in questions.questions:
            assert q.question == q.question.strip() and q.question
            assert q.header.strip()
            labels = [o.label.casefold() for o in q.options]
            if q.type == "text":
                assert not labels and not q.multi_select
            else:
                assert 2 <= len(labels) <= 4 and len(set(labels)) == len(labels)
                assert "other" not in labels
        assert re.fullmatch(r"dec-[0-9a-f]{16}", questions.decision_id)
        assert parse_ask_user(call, set_id="t-q1").decision_id == questions.decision_id


@PROPERTY
@given(st.text(min_size=1, max_size=30).filter(str.strip), st.sampled_from(["", " ", "\t"]))
def test_a_decision_id_ignores_case_and_surrounding_space(text: str, pad: str) -> None:
    plain = {"question": text, "header": "H", "options": [{"label": "Yes"}, {"label": "No"}]}
    loud = {
        "question": pad + text.upper() + pad,
        "header": "Other header",
        "options": [{"label": pad + "YES"}, {"label": "no" + pad}],
    }
    ids = [
        parse_ask_user(
            ToolCall(id="a", name="ask_user", arguments=json.dumps({"questions": [q]})),
            set_id="s",
        ).decision_id
        for q in (plain, loud)
    ]
    if text.upper().lower() == text.lower():  # case folding that round-trips
        assert ids[0] == ids[1]
    assert ids[0] == decision_id(
        parse_ask_user(
            ToolCall(id="a", name="ask_user", arguments=json.dumps({"questions": [plain]})),
            set_id="other",
        )
    )


PENDING = parse_ask_user(
    ToolCall(id="a", name="ask_user", arguments=json.dumps(QUESTION_SET)), set_id="t-q1"
)


@PROPERTY
@given(st.one_of(answer_shaped, json_values))
def test_an_answer_is_cleaned_into_offered_choices_or_refused_with_an_answer_error(
    raw: Any,
) -> None:
    payload = with_pending(raw, PENDING.id)
    try:
        answer = clean_answer(PENDING, payload)
    except AnswerRejected as error:
        assert str(error).strip()
        return
    assert answer.question_set_id == PENDING.id
    assert clean_answer(PENDING, answer) == answer, "cleaning is idempotent"
    if answer.status == "cancelled":
        assert not answer.answers
        return
    assert set(answer.answers) == {q.id for q in PENDING.questions}
    for q in PENDING.questions:
        values = answer.answers[q.id]
        assert all(v == v.strip() and v for v in values)
        if q.type == "multiple_choice":
            assert all(v in q.labels() or v.startswith("Other: ") for v in values)
            assert len(values) <= 1 or q.multi_select
        else:
            assert len(values) <= 1
        if q.required and not is_dismissal(answer):
            assert values


def test_the_parked_question_set_is_the_one_the_chaos_suite_asks() -> None:
    assert isinstance(PENDING, QuestionSet) and len(PENDING.questions) == 3


# -- the catalog --------------------------------------------------------------------------------

_KINDS = {"user": "user", "reply": "assistant", "ack": "assistant", "branch": "tool"}
_KINDS |= {"summary": "user", "note": "user"}


@st.composite
def sessions(draw: st.DrawFn) -> list[StoredMessage]:
    """Rows of one session in seq order: this task's and another's, every kind, blank texts."""
    rows: dict[str, StoredMessage] = {}
    for seq in range(1, draw(st.integers(0, 14)) + 1):
        kind = draw(st.sampled_from(sorted(_KINDS)))
        task = draw(st.sampled_from(["t1", "t2"]))
        round_ = draw(st.integers(0, 2))
        ordinal = draw(st.integers(1, 3))
        text = draw(st.one_of(st.text(max_size=30), st.sampled_from(["", "  ", "[ref 9] odd"])))
        ids = {
            "ack": f"task:{task}:round:{round_}:ack",
            "branch": f"task:{task}:round:{round_}:branch:{ordinal}",
            "reply": f"task:{task}:reply",
        }
        meta: dict[str, Any] = {}
        if kind == "branch":
            status = draw(st.sampled_from(["completed", "failed"]))
            meta = {"ordinal": ordinal, "status": status, "type": "general", "prompt": "p"}
        row_id = ids.get(kind, f"row-{seq}")
        rows.setdefault(
            row_id,
            StoredMessage(
                id=row_id,
                session_id="s",
                seq=len(rows) + 1,
                created_at="",
                role=_KINDS[kind],  # type: ignore[arg-type]
                kind=kind,  # type: ignore[arg-type]
                text=text,
                task_id=task if kind != "user" or draw(st.booleans()) else None,
                round=round_ if kind in ("ack", "branch") else None,
                meta=meta,
            ),
        )
    return list(rows.values())


@PROPERTY
@given(sessions())
def test_the_catalog_numbers_every_readable_message_once_in_order(
    rows: list[StoredMessage],
) -> None:
    rendered = render_session(rows, "t1")
    assert render_session(rows, "t1") == rendered, "a pure function of the rows"
    readable = [r for r in rows if r.kind in ("user", "reply") and r.text.strip()]
    assert [(e.index, e.message_id, e.text) for e in rendered.catalog] == [
        (n, r.id, r.text) for n, r in enumerate(readable, 1)
    ]
    marked = [m.text for m in rendered.messages if m.role in ("user", "assistant") and m.text]
    expected = iter(f"[ref {e.index}] {e.text}" for e in rendered.catalog)
    want = next(expected, None)
    for text in marked:
        if text == want:
            want = next(expected, None)
    assert want is None, "every catalog entry appears, as its marker and text, in order"


@PROPERTY
@given(sessions())
def test_every_restored_delegate_call_has_its_result_and_a_provider_safe_id(
    rows: list[StoredMessage],
) -> None:
    messages = render_session(rows, "t1").messages
    own_rounds = {r.round for r in rows if r.kind == "branch" and r.task_id == "t1"}
    calls = [(i, c) for i, m in enumerate(messages) for c in m.tool_calls]
    assert len(calls) == len(own_rounds), "one delegate exchange per round with branches"
    for i, call in calls:
        assert call.name == "delegate" and SAFE_ID.match(call.id)
        result = messages[i + 1]
        assert result.role == "tool" and result.tool_call_id == call.id
        listed = json.loads(result.text)
        assert [b["subtask_id"] for b in listed] == sorted(
            (b["subtask_id"] for b in listed), key=lambda s: int(s.rsplit("b", 1)[1])
        )
    others = [r for r in rows if r.kind == "ack" and r.task_id != "t1"]
    plain = [m for m in messages if m.role == "assistant" and not m.tool_calls]
    assert len(plain) >= len(others), "another task's acknowledgement stays as context"
