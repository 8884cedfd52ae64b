"""Rendering a session for a round: catalog markers, restored delegate exchanges, dropped acks."""

from __future__ import annotations

import json
import re

import pytest

from errands.agent.catalog import referenced_messages, render_session
from errands.contracts.messages import StoredMessage

pytestmark = pytest.mark.fast

TASK = "task-s1-a"


def row(
    seq: int,
    id: str,
    role: str,
    kind: str,
    text: str,
    task_id: str | None = TASK,
    round: int | None = None,
    **meta: object,
) -> StoredMessage:
    return StoredMessage(
        id=id,
        session_id="s1",
        seq=seq,
        role=role,
        kind=kind,
        text=text,
        task_id=task_id,
        round=round,
        meta=dict(meta),
        created_at="t",
    )


def branch(seq: int, round: int, ordinal: int, status: str, text: str) -> StoredMessage:
    return row(
        seq,
        f"task:{TASK}:round:{round}:branch:{ordinal}",
        "tool",
        "branch",
        text,
        round=round,
        ordinal=ordinal,
        status=status,
        type="general",
        prompt=f"p{ordinal}",
        references=[1],
    )


def test_user_and_assistant_messages_are_numbered_in_order() -> None:
    rows = [
        row(1, "a", "user", "user", "hello", task_id="other"),
        row(2, "b", "assistant", "reply", "hi there", task_id="other"),
        row(3, "c", "user", "user", "   "),
        row(4, f"task:{TASK}:user", "user", "user", "do the thing"),
    ]
    rendered = render_session(rows, TASK)
    assert [m.text for m in rendered.messages] == [
        "[ref 1] hello",
        "[ref 2] hi there",
        "[ref 3] do the thing",
    ]
    assert [e.message_id for e in rendered.catalog] == ["a", "b", f"task:{TASK}:user"]


def test_the_summary_opens_the_view_without_an_index_and_the_others_are_not_shown() -> None:
    summary = row(5, "s:summary:1", "system", "summary", "earlier stuff")
    older = row(3, "s:summary:0", "system", "summary", "folded into the newer one")
    rows = [older, row(2, "u", "user", "user", "q"), summary]
    rendered = render_session(rows, TASK, summary)
    assert len(rendered.catalog) == 1 and rendered.catalog[0].message_id == "u"
    assert [m.text for m in rendered.messages] == [
        "(Summary of the earlier conversation, which is no longer shown word for word.)\n"
        "earlier stuff",
        "[ref 1] q",
    ]


def test_an_earlier_ack_becomes_the_delegate_call_and_its_results() -> None:
    rows = [
        row(1, f"task:{TASK}:user", "user", "user", "question"),
        row(2, f"task:{TASK}:round:0:ack", "assistant", "ack", "On it", round=0),
        branch(3, 0, 1, "completed", "answer one"),
        branch(4, 0, 2, "failed", "model call failed: credential"),
    ]
    rendered = render_session(rows, TASK)
    call_msg, result_msg = rendered.messages[1], rendered.messages[2]
    assert call_msg.tool_calls[0].name == "delegate"
    assert json.loads(call_msg.tool_calls[0].arguments)["reply"] == "On it"
    assert re.fullmatch(r"[A-Za-z0-9_-]+", call_msg.tool_calls[0].id)
    assert result_msg.tool_call_id == call_msg.tool_calls[0].id
    results = json.loads(result_msg.text)
    assert [(r["subtask_id"], r["status"], r["output"]) for r in results] == [
        ("r0-b1", "completed", "answer one"),
        ("r0-b2", "failed", "model call failed: credential"),
    ]
    assert len(rendered.catalog) == 1, "the acknowledgement itself is not citable"


def test_an_ack_with_no_branches_behind_it_is_dropped() -> None:
    rows = [
        row(1, f"task:{TASK}:user", "user", "user", "question"),
        row(2, f"task:{TASK}:round:0:ack", "assistant", "ack", "On it", round=0),
    ]
    rendered = render_session(rows, TASK)
    assert [m.text for m in rendered.messages] == ["[ref 1] question"]


def test_another_tasks_ack_is_plain_uncitable_context() -> None:
    rows = [
        row(1, "task:old:round:0:ack", "assistant", "ack", "Old ack", task_id="old", round=0),
        row(2, f"task:{TASK}:user", "user", "user", "question"),
    ]
    rendered = render_session(rows, TASK)
    assert rendered.messages[0].text == "Old ack"
    assert [e.message_id for e in rendered.catalog] == [f"task:{TASK}:user"]


def test_rounds_whose_ack_was_compacted_away_are_appended_in_round_order() -> None:
    rows = [
        branch(1, 1, 1, "completed", "round one result"),
        branch(2, 0, 1, "completed", "round zero result"),
        row(3, f"task:{TASK}:user", "user", "user", "question"),
    ]
    rendered = render_session(rows, TASK)
    assert rendered.messages[0].text == "[ref 1] question"
    tool_results = [json.loads(m.text)[0]["output"] for m in rendered.messages if m.role == "tool"]
    assert tool_results == ["round zero result", "round one result"]


def test_referenced_messages_are_verbatim_and_sorted() -> None:
    rows = [row(1, "a", "user", "user", "alpha"), row(2, "b", "user", "user", "beta")]
    cited = referenced_messages(render_session(rows, TASK).catalog, [2, 1])
    assert [(c.index, c.text) for c in cited] == [(1, "alpha"), (2, "beta")]
