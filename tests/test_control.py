"""Control-tool parsing and validation: the errors the model reads and repairs."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from errands.agent.control import (
    NOT_BLANK,
    delegate_spec,
    final_reply_spec,
    parse_delegate,
    parse_final_reply,
    pick_control_call,
)
from errands.agent.subtask_types import GENERAL
from errands.contracts.messages import ToolCall
from errands.errors import ModelMistake
from tests.plugins import RESEARCH

pytestmark = pytest.mark.fast

TYPES = [GENERAL.info(), RESEARCH.info()]


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=f"c_{name}", name=name, arguments=json.dumps(arguments))


def delegate(*subtasks: dict, reply: str = "Working on it.", catalog_size: int = 3):
    return parse_delegate(
        [call("delegate", reply=reply, subtasks=list(subtasks))],
        catalog_size=catalog_size,
        types=TYPES,
        max_subtasks=8,
    )


def test_the_most_committal_control_tool_wins() -> None:
    calls = [call("final_reply", text="x"), call("delegate", reply="y", subtasks=[])]
    assert pick_control_call(calls, {"final_reply", "delegate"}) == ("delegate", [calls[1]])


def test_a_tool_that_was_not_offered_is_not_a_control_call() -> None:
    assert pick_control_call([call("delegate")], {"final_reply"}) is None


def test_a_repeated_final_reply_keeps_the_last_call() -> None:
    decision = parse_final_reply(
        [call("final_reply", text="first"), call("final_reply", text=" last ")]
    )
    assert decision.text == "last"


def test_a_blank_final_reply_is_rejected() -> None:
    with pytest.raises(ModelMistake, match="non-blank"):
        parse_final_reply([call("final_reply", text="   ")])


def test_malformed_arguments_are_rejected_with_the_json_error() -> None:
    with pytest.raises(ModelMistake, match="not valid JSON"):
        parse_final_reply(
            [ToolCall(id="x", name="final_reply", arguments='{"text": "unterminated')]
        )


def test_a_repeated_delegate_asks_for_one_call_with_every_subtask() -> None:
    one = call("delegate", reply="r", subtasks=[{"type": "general", "prompt": "p"}])
    with pytest.raises(ModelMistake, match="Delegate once, with every subtask this round needs"):
        parse_delegate([one, one], catalog_size=1, types=TYPES, max_subtasks=8)


def test_references_are_sorted() -> None:
    decision = delegate({"type": "general", "prompt": "p", "references": [3, 1]})
    assert decision.subtasks[0].references == [1, 3]


@pytest.mark.parametrize(
    ("subtask", "message"),
    [
        ({"type": "poetry", "prompt": "p"}, "subtask 1: unknown type 'poetry'"),
        ({"type": "general", "prompt": " "}, "subtask 1: `prompt` must be non-blank"),
        (
            {"type": "general", "prompt": "p", "references": [1, 1]},
            "subtask 1: reference 1 is used twice",
        ),
        ({"type": "general", "prompt": "p", "references": [4]}, "catalog has 3 entries"),
        ({"type": "general", "prompt": "p", "references": [0]}, "outside the catalog"),
        ({"type": "general", "prompt": "p", "params": {"a": 1}}, "takes no params"),
        (
            {"type": "research", "prompt": "p", "params": {"depth": 9}},
            "params.depth must be at most 3",
        ),
    ],
)
def test_each_subtask_error_names_its_subtask(subtask: dict, message: str) -> None:
    with pytest.raises(ModelMistake, match=message.replace("(", r"\(")):
        delegate(subtask)


def test_the_second_subtask_is_named_in_its_error() -> None:
    with pytest.raises(ModelMistake, match="^subtask 2: "):
        delegate({"type": "general", "prompt": "ok"}, {"type": "nope", "prompt": "p"})


def test_unknown_params_keys_are_dropped() -> None:
    decision = delegate(
        {"type": "research", "prompt": "p", "params": {"depth": 2, "colour": "red"}}
    )
    assert decision.subtasks[0].params == {"depth": 2}


def test_too_many_subtasks_are_rejected() -> None:
    subtasks = [{"type": "general", "prompt": f"p{i}"} for i in range(9)]
    with pytest.raises(ModelMistake, match="at most 8"):
        delegate(*subtasks)


def test_a_blank_acknowledgement_is_rejected() -> None:
    with pytest.raises(ModelMistake, match="`reply` must be a non-blank"):
        delegate({"type": "general", "prompt": "p"}, reply="  ")


def test_blank_rejection_is_visible_in_the_schemas() -> None:
    assert final_reply_spec().parameters["properties"]["text"]["pattern"] == NOT_BLANK
    spec = delegate_spec(TYPES, 8).parameters
    assert spec["properties"]["reply"]["pattern"] == NOT_BLANK
    item = spec["properties"]["subtasks"]["items"]
    assert item["properties"]["prompt"]["pattern"] == NOT_BLANK
    assert item["properties"]["type"]["enum"] == ["general", "research"]
    assert spec["properties"]["subtasks"]["maxItems"] == 8


def test_the_blank_pattern_is_one_llama_cpp_accepts() -> None:
    # json-schema-to-grammar refuses an unanchored pattern, its grammars know no \s, \S, \d or
    # \w, and neither it nor xgrammar takes a non-capturing group.
    assert NOT_BLANK.startswith("^") and NOT_BLANK.endswith("$")
    assert not re.search(r"\\[sSdDwWbB]|\(\?", NOT_BLANK.replace("\\\\", ""))


BLANK = st.text(alphabet=" \t\n\r\f", max_size=6)


def as_json(text: str, ascii_only: bool = True) -> str:
    """What a constrained decoder writes for ``text``: the JSON between the quotes."""
    return json.dumps(text, ensure_ascii=ascii_only)[1:-1]


@given(st.text(max_size=12), st.booleans())
def test_the_blank_pattern_matches_the_json_of_exactly_the_texts_with_something_visible(
    text: str, ascii_only: bool
) -> None:
    visible = bool(text.strip(" \t\n\r\f"))
    assert bool(re.fullmatch(NOT_BLANK, as_json(text, ascii_only))) == visible


@given(st.tuples(BLANK, st.text(min_size=1).map(lambda t: "x" + t), BLANK), st.booleans())
def test_the_blank_pattern_takes_any_text_with_a_visible_character(
    parts: tuple[str, str, str], ascii_only: bool
) -> None:
    assert re.fullmatch(NOT_BLANK, as_json("".join(parts), ascii_only))


JSON_PIECES = st.sampled_from(
    [
        "a",
        " ",
        '"',
        "\\",
        "\\n",
        "\\u",
        "\\b",
        "/",
        "0",
        "12",
        "00e9",
        "D9ba",
        "d83d",
        "dc00",
        "\\ude00",
        "\\uDFFF",
        "\u00e9",
        "\x01",
    ]
)


@given(st.lists(JSON_PIECES, max_size=8).map("".join))
def test_what_the_blank_pattern_admits_a_strict_json_parser_takes(text: str) -> None:
    # A decoder writes only what the pattern admits; llama-server parses it with a strict parser
    # and aborts when that parser refuses it (a lone surrogate escape did, in the middle of a
    # stream). Python's own decoder lets lone surrogates through: encoding to UTF-8 does not.
    if re.fullmatch(NOT_BLANK, text):
        json.loads(f'"{text}"').encode("utf-8")


@pytest.mark.parametrize(
    "escapes", [r"\uD9bababy", r"\udc00", r"x\ud83d", r"x\u12", "x\\u", r"x\u00g0", r"\ud83d\u0041"]
)
def test_the_blank_pattern_refuses_a_unicode_escape_json_does_not_take(escapes: str) -> None:
    assert not re.fullmatch(NOT_BLANK, escapes)


def test_the_blank_pattern_takes_a_surrogate_pair() -> None:
    assert re.fullmatch(NOT_BLANK, as_json("\U0001f600"))


@given(BLANK)
def test_the_blank_pattern_refuses_blank_text_decoded_or_as_json(text: str) -> None:
    assert not re.search(NOT_BLANK, text)
    assert not re.fullmatch(NOT_BLANK, as_json(text))


@given(st.text(alphabet=st.characters(min_codepoint=0x20, exclude_characters='"\\'), max_size=12))
def test_python_agrees_on_plain_text_where_decoded_and_json_are_one(text: str) -> None:
    assert as_json(text, ascii_only=False) == text
    assert bool(re.search(NOT_BLANK, text)) == bool(text.strip(" "))


def test_params_are_offered_only_when_some_type_takes_them() -> None:
    def subtask_fields(types: list) -> set[str]:
        items = delegate_spec(types, 8).parameters["properties"]["subtasks"]["items"]
        return set(items["properties"])

    assert subtask_fields([GENERAL.info()]) == {"type", "prompt", "references"}
    assert subtask_fields(TYPES) == {"type", "prompt", "references", "params"}
    items = delegate_spec(TYPES, 8).parameters["properties"]["subtasks"]["items"]
    assert "research" in items["properties"]["params"]["description"]
