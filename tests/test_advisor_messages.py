"""The advisor's nested request (SPEC §4): which context it inherits, in which order, and the
result the agent reads."""

from __future__ import annotations

import json

import pytest

from errands.agent.advisor import (
    ADVISOR_INSTRUCTIONS,
    ADVISOR_TAIL_BUDGET_BYTES,
    DEFAULT_QUESTION,
    QUESTION_MAX_CHARS,
    advice_result,
    advisor_request,
    advisor_spec,
    build_advisor_messages,
    error_result,
    json_size,
    limit_reached,
    limit_reached_result,
    parse_question,
)
from errands.contracts.messages import AdvisorResult, Message, ToolCall
from tests.helpers import user

pytestmark = pytest.mark.fast


def texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]


def test_twenty_newest_messages_follow_the_instructions_and_precede_the_question() -> None:
    conversation = [user(f"message {i}") for i in range(25)]
    messages = build_advisor_messages(["be helpful"], conversation, "What next?")
    assert [m.role for m in messages] == ["system", "system"] + ["user"] * 21
    assert texts(messages) == [
        "be helpful",
        ADVISOR_INSTRUCTIONS,
        *[f"message {i}" for i in range(5, 25)],
        "What next?",
    ]


def test_advisor_instructions_are_the_last_system_message() -> None:
    conversation = [user("hi"), Message(role="system", text="injected later"), user("go on")]
    messages = build_advisor_messages(["base prompt"], conversation, "q")
    system = [m.text for m in messages if m.role == "system"]
    assert system == ["base prompt", "injected later", ADVISOR_INSTRUCTIONS]
    assert texts(messages[3:]) == ["hi", "go on", "q"]


def test_an_oversized_message_stops_the_tail_even_if_older_ones_are_small() -> None:
    conversation = [user("old and small"), user("x" * 13_000), user("recent 1"), user("recent 2")]
    messages = build_advisor_messages([], conversation, "q")
    assert texts(messages) == [ADVISOR_INSTRUCTIONS, "recent 1", "recent 2", "q"]


def test_the_tail_stops_at_the_first_message_over_the_byte_budget() -> None:
    conversation = [user(f"{i:02d}" + "y" * 998) for i in range(20)]
    tail = build_advisor_messages([], conversation, "q")[1:-1]
    kept = conversation[len(conversation) - len(tail) :]
    assert texts(tail) == texts(kept)
    used = sum(json_size(m) for m in kept)
    assert used <= ADVISOR_TAIL_BUDGET_BYTES
    assert used + json_size(conversation[-len(tail) - 1]) > ADVISOR_TAIL_BUDGET_BYTES


def test_an_oversized_system_message_is_skipped_and_an_older_smaller_one_kept() -> None:
    messages = build_advisor_messages(["older, small", "z" * 13_000], [user("hi")], "q")
    assert texts(messages) == ["older, small", ADVISOR_INSTRUCTIONS, "hi", "q"]


def test_of_two_nine_kilobyte_system_messages_only_the_newer_is_kept() -> None:
    older, newer = "a" * 9_000, "b" * 9_000
    messages = build_advisor_messages([older, newer], [], "q")
    assert texts(messages) == [newer, ADVISOR_INSTRUCTIONS, "q"]


def test_kept_system_messages_keep_their_original_order() -> None:
    messages = build_advisor_messages(["first", "second", "third"], [], "q")
    assert texts(messages)[:4] == ["first", "second", "third", ADVISOR_INSTRUCTIONS]


def test_tool_exchanges_become_plain_notes() -> None:
    conversation = [
        user("Fix the failing test."),
        Message(
            role="assistant",
            text="Let me look at the file.",
            tool_calls=[ToolCall(id="c1", name="read_file", arguments='{"path": "a.py"}')],
        ),
        Message(role="tool", tool_call_id="c1", tool_name="read_file", text="def f(): ..."),
        Message(role="assistant", tool_calls=[ToolCall(id="c2", name="run_tests")]),
        Message(role="tool", tool_call_id="c2", text="2 failed", is_error=True),
    ]
    messages = build_advisor_messages([], conversation, "q")[1:-1]
    assert [(m.role, m.text) for m in messages] == [
        ("user", "Fix the failing test."),
        ("assistant", "Let me look at the file."),
        (
            "user",
            '[Note: the agent ran read_file with input {"path": "a.py"} and got: def f(): ...]',
        ),
        ("user", "[Note: the agent ran run_tests with input {} and it failed with: 2 failed]"),
    ]
    assert all(not m.tool_calls and m.role != "tool" for m in messages)


def test_a_result_whose_call_was_cut_off_becomes_an_anonymous_note() -> None:
    conversation = [
        Message(role="assistant", tool_calls=[ToolCall(id="c1", name="search")]),
        Message(role="tool", tool_call_id="c1", tool_name="search", text="3 hits"),
        *[user(f"message {i}") for i in range(19)],
    ]
    messages = build_advisor_messages([], conversation, "q")
    assert messages[1] == Message(role="user", text="[Note: a tool returned: 3 hits]")
    assert len(messages) == 1 + 20 + 1


def test_a_call_without_a_result_yet_is_left_out() -> None:
    conversation = [
        user("Plan it."),
        Message(role="assistant", tool_calls=[ToolCall(id="c9", name="advisor")]),
    ]
    assert texts(build_advisor_messages([], conversation, "q")) == [
        ADVISOR_INSTRUCTIONS,
        "Plan it.",
        "q",
    ]


def test_a_window_that_opens_with_the_assistant_opens_with_a_user_note() -> None:
    conversation = [user("x" * 13_000), Message(role="assistant", text="Done."), user("Thanks")]
    messages = build_advisor_messages([], conversation, "q")
    assert [(m.role, m.text) for m in messages[1:-1]] == [
        ("user", "[Note: earlier, the agent wrote: Done.]"),
        ("user", "Thanks"),
    ]


def test_a_blank_question_becomes_the_default() -> None:
    assert build_advisor_messages([], [], "  \n ")[-1] == Message(
        role="user", text=DEFAULT_QUESTION
    )


def test_a_long_question_is_capped_at_two_thousand_characters() -> None:
    question = build_advisor_messages([], [], "q" * 5_000)[-1].text
    assert len(question) == QUESTION_MAX_CHARS
    assert question.startswith("q" * 1_900)
    assert question.endswith("[…truncated]")


def test_the_advisor_request_offers_no_tools() -> None:
    request = advisor_request(["sys"], [user("hi")], "q")
    assert request.tools == []
    assert request.system == f"sys\n\n{ADVISOR_INSTRUCTIONS}"
    assert request.messages == [user("hi\n\nq")]


def test_the_tool_spec_takes_one_question() -> None:
    spec = advisor_spec()
    assert spec.name == "advisor"
    assert list(spec.parameters["properties"]) == ["question"]


def test_an_unreadable_call_reads_as_a_blank_question() -> None:
    assert parse_question('{"question": "Is this right?"}') == "Is this right?"
    assert parse_question("not json") == ""
    assert parse_question('{"question": 3}') == ""


def test_advice_result_json_shape() -> None:
    result = advice_result("strong-model", "  Check the cache first. ", uses=0)
    assert json.loads(result.to_tool_text()) == {
        "type": "advice",
        "advice": "Check the cache first.",
        "advisor_model": "strong-model",
        "remaining_uses": 2,
    }


def test_limit_reached_result_tells_the_agent_to_use_its_own_judgment() -> None:
    assert limit_reached(3) and not limit_reached(2)
    payload = json.loads(limit_reached_result("strong-model").to_tool_text())
    assert payload["type"] == "limit_reached"
    assert payload["remaining_uses"] == 0
    assert payload["advisor_model"] == "strong-model"
    assert "own judgment" in payload["error"]
    assert "advice" not in payload


def test_failed_or_empty_advice_is_an_error_that_uses_nothing_up() -> None:
    empty = advice_result("strong-model", "   ", uses=1)
    failed = error_result("strong-model", "timeout", uses=1)
    for result in (empty, failed):
        payload = json.loads(result.to_tool_text())
        assert payload["type"] == "error"
        assert payload["remaining_uses"] == 2
        assert "advice" not in payload
    assert failed.error is not None and "timeout" in failed.error
    assert AdvisorResult.model_validate_json(failed.to_tool_text()) == failed
