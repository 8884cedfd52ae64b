"""Side questions (SPEC §3): the fallback transcript, the trimmed replay and the question rules."""

from __future__ import annotations

import pytest

from errands.agent.side_questions import (
    EMPTY_CONVERSATION,
    MESSAGE_MAX_CHARS,
    REFUSED_TOOL_TEXT,
    SIDE_MAX_OUTPUT_TOKENS,
    SIDE_TEMPERATURE,
    TRANSCRIPT_MAX_CHARS,
    fallback_request,
    in_progress_summary,
    plain_transcript,
    preferred_request,
    refusal_messages,
    side_question_prompt,
    trim_to_last_assistant,
    validate_side_question,
)
from errands.contracts.messages import Message, ModelRequest, ToolCall, ToolSpec
from tests.helpers import user

pytestmark = pytest.mark.fast


def assistant(text: str = "", *calls: str) -> Message:
    return Message(
        role="assistant", text=text, tool_calls=[ToolCall(id=c, name=f"tool_{c}") for c in calls]
    )


def result(call_id: str, text: str = "ok") -> Message:
    return Message(role="tool", tool_call_id=call_id, text=text)


def test_a_long_conversation_keeps_the_newest_messages_within_budget() -> None:
    messages = [user(f"{i:03d}" + "x" * 397) for i in range(200)]
    lines = plain_transcript(messages).split("\n")
    assert len("\n".join(lines)) <= TRANSCRIPT_MAX_CHARS
    kept = lines[1:]
    assert kept[-1] == "USER: 199" + "x" * 397
    assert kept == [f"USER: {i:03d}" + "x" * 397 for i in range(200 - len(kept), 200)]
    assert lines[0] == f"[… {200 - len(kept)} earlier messages omitted …]"


def test_a_long_message_is_capped_at_two_thousand_characters() -> None:
    line = plain_transcript([user("y" * 10_000)])
    assert line.startswith("USER: yyy")
    assert len(line) == len("USER: ") + MESSAGE_MAX_CHARS
    assert line.endswith("[…truncated]")


def test_an_empty_conversation_says_so() -> None:
    assert plain_transcript([]) == EMPTY_CONVERSATION
    assert plain_transcript([Message(role="system", text="prompt")]) == EMPTY_CONVERSATION


def test_tool_calls_and_results_have_their_own_lines() -> None:
    messages = [
        user("Find it."),
        Message(
            role="assistant",
            tool_calls=[ToolCall(id="1", name="search"), ToolCall(id="2", name="read")],
        ),
        result("1", "3 hits"),
        Message(role="tool", tool_call_id="2", text="denied", is_error=True),
        Message(role="assistant", text="Checking.", tool_calls=[ToolCall(id="3", name="open")]),
        assistant("Found it."),
    ]
    assert plain_transcript(messages).split("\n") == [
        "USER: Find it.",
        "ASSISTANT [called tools: search, read]",
        "TOOL RESULT: 3 hits",
        "TOOL RESULT: error: denied",
        "ASSISTANT [called tools: open]: Checking.",
        "ASSISTANT: Found it.",
    ]


def test_the_system_prompt_is_dropped() -> None:
    messages = [Message(role="system", text="secret instructions"), user("hi")]
    assert plain_transcript(messages) == "USER: hi"


def test_the_newest_message_is_kept_even_when_it_alone_is_long() -> None:
    messages = [user("older"), user("z" * 10_000)]
    lines = plain_transcript(messages, budget=500).split("\n")
    assert lines == ["[… 1 earlier message omitted …]", "USER: " + "z" * 1_987 + " […truncated]"]


def test_trim_keeps_everything_up_to_a_plain_assistant_reply() -> None:
    messages = [user("a"), assistant("b")]
    assert trim_to_last_assistant(messages) == messages


def test_trim_drops_the_in_flight_user_message_and_unanswered_calls() -> None:
    messages = [user("a"), assistant("b"), user("c"), assistant("", "c1")]
    assert trim_to_last_assistant(messages) == messages[:2]


def test_trim_cuts_a_call_whose_results_are_not_all_in() -> None:
    messages = [user("a"), assistant("b"), user("c"), assistant("", "c1", "c2"), result("c1")]
    assert trim_to_last_assistant(messages) == messages[:2]


def test_trim_keeps_a_call_once_every_result_is_in() -> None:
    messages = [user("a"), assistant("", "c1", "c2"), result("c2"), result("c1"), user("more")]
    assert trim_to_last_assistant(messages) == messages[:4]


def test_trim_with_no_completed_assistant_turn_leaves_nothing() -> None:
    assert trim_to_last_assistant([user("a"), assistant("", "c1")]) == []


def test_in_progress_summary_describes_what_was_cut_without_tool_outputs() -> None:
    messages = [
        user("a"),
        assistant("b"),
        user("c"),
        assistant("d", "c1", "c2"),
        result("c1", "SECRET"),
    ]
    summary = in_progress_summary(messages)
    assert summary == (
        "USER: c\nASSISTANT [called tools: tool_c1, tool_c2]: d\nTOOL RESULT: (not shown)"
    )
    assert in_progress_summary(messages[:2]) is None


def test_the_preferred_request_replays_the_round_prefix() -> None:
    tools = [ToolSpec(name="final_reply", description="d", parameters={"type": "object"})]
    messages = [user("a"), assistant("b"), user("c")]
    round_request = ModelRequest(
        system="round system", messages=messages, tools=tools, tool_choice="required"
    )
    request = preferred_request(round_request, "  why b? ", "USER: c")
    assert request.system == "round system"
    assert request.tools == tools
    assert request.messages[:2] == messages[:2]
    assert request.messages[2].role == "user"
    assert request.messages[2].text.endswith("Side question: why b?")
    assert "USER: c" in request.messages[2].text
    assert (request.max_output_tokens, request.temperature) == (2048, 0.3)
    assert request.tool_choice != "required"


def test_the_prompt_states_the_rules() -> None:
    prompt = side_question_prompt("What did you find?", None)
    assert "Answer only the side question" in prompt
    assert "No tools are available" in prompt
    assert "say so plainly" in prompt
    assert prompt.endswith("Side question: What did you find?")


def test_a_refused_tool_call_gets_the_refusal_as_its_result() -> None:
    calls = [ToolCall(id="c1", name="search")]
    step, refusal = refusal_messages("", calls)
    assert step.tool_calls == calls
    assert (refusal.role, refusal.tool_call_id, refusal.text) == ("tool", "c1", REFUSED_TOOL_TEXT)
    assert refusal.is_error


def test_the_fallback_request_is_one_tool_less_call_over_the_transcript() -> None:
    request = fallback_request([Message(role="system", text="hidden"), user("hi")], " why? ")
    assert request.tools == []
    assert "hidden" not in request.system
    assert len(request.messages) == 1
    text = request.messages[0].text
    assert "USER: hi" in text and "hidden" not in text
    assert text.endswith("Side question: why?")
    assert request.max_output_tokens == SIDE_MAX_OUTPUT_TOKENS
    assert request.temperature == SIDE_TEMPERATURE


@pytest.mark.parametrize("blank", ["", "   ", "\n\t"])
def test_a_blank_question_is_an_error(blank: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        validate_side_question(blank)
    with pytest.raises(ValueError, match="empty"):
        fallback_request([], blank)


def test_a_question_is_trimmed() -> None:
    assert validate_side_question("  what now?\n") == "what now?"
