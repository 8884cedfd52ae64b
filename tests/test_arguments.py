"""The one tool-argument parser (``errands.agent.arguments``): its guards, its JSON-in-JSON
tolerance, and every parser of a tool or control call going through it."""

from __future__ import annotations

import json

import pytest

from errands.agent import advisor, arguments, control, reading
from errands.agent.arguments import (
    MAX_BYTES,
    MAX_DEPTH,
    REFUSED,
    depth,
    guard_call,
    guard_response,
    nested,
    parse_arguments,
    read_arguments,
    refusal,
)
from errands.agent.asking import parse_ask_user
from errands.contracts.messages import ModelResponse, ToolCall
from errands.errors import ModelMistake

pytestmark = pytest.mark.fast

DEEP = "[" * 100_000 + "]" * 100_000
"""Nested 100,000 deep: far past what ``json.loads`` recurses through."""
LONG = json.dumps({"text": "x" * 5_000_000})
"""5 MB of arguments."""


def deep_object(levels: int) -> str:
    return '{"a": ' * levels + "1" + "}" * levels


def test_a_plain_object_is_read_as_it_is() -> None:
    assert parse_arguments('{"text": "hi", "n": [1, {"b": null}]}', tool="t") == {
        "text": "hi",
        "n": [1, {"b": None}],
    }


def test_blank_arguments_are_the_empty_object() -> None:
    assert parse_arguments("", tool="t") == {}
    assert parse_arguments(None, tool="t") == {}


def test_arguments_nested_100000_deep_are_refused_before_any_parse() -> None:
    with pytest.raises(ModelMistake) as raised:
        parse_arguments(DEEP, tool="final_reply")
    message = str(raised.value)
    assert message.startswith("final_reply: ")
    assert f"more than {MAX_DEPTH} levels deep" in message
    assert "Call final_reply again" in message


def test_the_depth_limit_is_exact_and_counts_objects_and_arrays_alike() -> None:
    assert parse_arguments(deep_object(MAX_DEPTH), tool="t")
    with pytest.raises(ModelMistake, match="levels deep"):
        parse_arguments(deep_object(MAX_DEPTH + 1), tool="t")
    mixed = '{"a": ' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "}"
    assert depth(mixed) == MAX_DEPTH + 1


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"text": "[" * 10_000 + '\\"{' * 1_000, "more": "}]" * 50})
    assert depth(text) == 1
    assert parse_arguments(text, tool="t")["text"].startswith("[[[")


def test_an_escaped_quote_does_not_end_a_string() -> None:
    text = '{"a": "x\\"[[[[", "b": [[1]]}'
    assert depth(text) == 3
    assert parse_arguments(text, tool="t") == {"a": 'x"[[[[', "b": [[1]]}


def test_an_unterminated_string_is_a_json_error_not_a_crash() -> None:
    with pytest.raises(ModelMistake, match="not valid JSON"):
        parse_arguments('{"a": [[["unterminated', tool="t")


def test_arguments_5_mb_long_are_refused_and_the_error_names_the_limit() -> None:
    with pytest.raises(ModelMistake) as raised:
        parse_arguments(LONG, tool="mcp__files__write")
    message = str(raised.value)
    assert f"{len(LONG):,} bytes long" in message
    assert f"at most {MAX_BYTES:,} bytes" in message


def test_the_size_is_counted_in_utf8_bytes() -> None:
    text = json.dumps({"t": "é" * (MAX_BYTES // 2)}, ensure_ascii=False)
    assert len(text) < MAX_BYTES < len(text.encode())
    assert refusal(text) is not None
    lone = '{"t": "\ud800"}'  # a lone surrogate, as a decoded response may hold: no crash
    assert refusal(lone) is None


@pytest.mark.parametrize(
    ("text", "kind"),
    [("[1, 2]", "an array"), ('"text"', "a string"), ("3", "a number"), ("null", "null")],
)
def test_a_top_level_other_than_an_object_is_refused(text: str, kind: str) -> None:
    with pytest.raises(ModelMistake, match=f"must be a JSON object, not {kind}"):
        parse_arguments(text, tool="t")


def test_invalid_json_says_where() -> None:
    with pytest.raises(ModelMistake, match="not valid JSON .*at position 9"):
        parse_arguments('{"text": "unterminated', tool="t")


def test_a_number_python_will_not_convert_is_the_models_mistake() -> None:
    with pytest.raises(ModelMistake, match="cannot be read"):
        parse_arguments('{"n": ' + "1" * 5_000 + "}", tool="t")


def test_a_json_string_inside_json_is_read_under_the_same_guards() -> None:
    assert nested('[{"question": "Which?"}]') == [{"question": "Which?"}]
    assert nested(' {"a": 1}') == {"a": 1}
    assert nested("plain words") == "plain words"
    assert nested("[not json") == "[not json"
    assert nested(DEEP) == DEEP  # refused: left as the string, for the caller to name
    assert nested(5) == 5


def test_the_marker_stands_in_for_refused_arguments_and_reads_as_their_refusal() -> None:
    call = ToolCall(id="c1", name="mcp__files__write", arguments=LONG)
    guarded = guard_call(call)
    assert len(guarded.arguments) < 200
    marker = json.loads(guarded.arguments)
    assert list(marker) == [REFUSED]
    with pytest.raises(ModelMistake) as raised:
        parse_arguments(guarded.arguments, tool=call.name)
    assert f"{len(LONG):,} bytes long" in str(raised.value)
    fine = ToolCall(id="c2", name="t", arguments='{"a": 1}')
    assert guard_call(fine) is fine


def test_a_response_is_guarded_call_by_call() -> None:
    calls = [
        ToolCall(id="a", name="read_message", arguments=DEEP),
        ToolCall(id="b", name="t", arguments='{"ok": true}'),
    ]
    response = ModelResponse(tool_calls=calls)
    guarded = guard_response(response)
    assert REFUSED in guarded.tool_calls[0].arguments
    assert guarded.tool_calls[1] == calls[1]
    untouched = ModelResponse(tool_calls=calls[1:])
    assert guard_response(untouched) is untouched


def test_read_arguments_gives_the_problem_without_raising() -> None:
    assert read_arguments('{"a": 1}') == {"a": 1}
    problem = read_arguments(DEEP)
    assert isinstance(problem, str) and "levels deep" in problem


# -- every parser of a call goes through it ----------------------------------------------------


@pytest.mark.parametrize("text", [DEEP, LONG, "[1]"])
def test_control_calls_are_refused_as_the_models_mistake(text: str) -> None:
    with pytest.raises(ModelMistake, match="^final_reply: "):
        control.parse_final_reply([ToolCall(id="c", name="final_reply", arguments=text)])
    with pytest.raises(ModelMistake, match="^delegate: "):
        control.parse_delegate(
            [ToolCall(id="c", name="delegate", arguments=text)],
            catalog_size=0,
            types=[],
            max_subtasks=8,
        )
    with pytest.raises(ModelMistake, match="^ask_user: "):
        parse_ask_user(ToolCall(id="c", name="ask_user", arguments=text), set_id="s")


def test_delegate_subtasks_sent_as_a_json_string_are_read() -> None:
    subtasks = json.dumps([{"type": "general", "prompt": "look"}])
    decision = control.parse_delegate(
        [
            ToolCall(
                id="c", name="delegate", arguments=json.dumps({"reply": "ok", "subtasks": subtasks})
            )
        ],
        catalog_size=0,
        types=[control.SubtaskTypeInfo(key="general", description="anything")],
        max_subtasks=8,
    )
    assert [d.prompt for d in decision.subtasks] == ["look"]


def test_ask_user_questions_sent_as_a_json_string_are_read() -> None:
    questions = json.dumps([{"question": "Which?", "options": ["a", "b"]}])
    asked = parse_ask_user(
        ToolCall(id="c", name="ask_user", arguments=json.dumps({"questions": questions})),
        set_id="s",
    )
    assert [o.label for o in asked.questions[0].options] == ["a", "b"]


@pytest.mark.parametrize("text", [DEEP, LONG])
def test_read_message_tells_the_model_what_is_wrong(text: str) -> None:
    problem = reading.parse_read(text)
    assert isinstance(problem, str) and problem.startswith("read_message: ")


def test_the_advisor_refuses_what_the_guards_refuse_and_reads_the_rest() -> None:
    for text in (
        DEEP,
        LONG,
        guard_call(ToolCall(id="c", name="advisor", arguments=DEEP)).arguments,
    ):
        assert advisor.refused(text) is not None
        assert advisor.parse_question(text) == ""
    assert advisor.refused('{"question": "Is it sound?"}') is None
    assert advisor.refused("not json") is None  # malformed: advice on the default question
    assert advisor.parse_question('{"question": "Is it sound?"}') == "Is it sound?"


def test_the_module_imports_only_the_standard_library_contracts_and_errors() -> None:
    import ast
    from pathlib import Path

    tree = ast.parse(Path(arguments.__file__).read_text())
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported <= {
        "__future__",
        "json",
        "re",
        "typing",
        "errands.contracts.messages",
        "errands.errors",
    }


def test_the_live_text_of_a_final_reply_stops_at_the_size_guard() -> None:
    # Past the guard the call is refused, so nothing more of it is decoded or kept: 5 MB
    # streamed in small pieces costs what MAX_BYTES does, not 5 MB squared.
    from activities._calls import JsonStringField

    field = JsonStringField("text")
    shown = [field.feed(LONG[i : i + 40]) for i in range(0, len(LONG), 40)]
    text = "".join(shown)
    assert text == "x" * len(text)
    assert MAX_BYTES - 40 <= len(text) <= MAX_BYTES + 40  # the guard, give or take a piece
