"""Control-tool parsing and validation: the errors the model reads and repairs."""

from __future__ import annotations

import json

import pytest

from errands.contracts import ToolCall
from errands.control import (
    delegate_spec,
    final_reply_spec,
    parse_delegate,
    parse_final_reply,
    pick_control_call,
)
from errands.errors import ModelMistake
from errands.subtask_types import GENERAL
from tests.plugins import RESEARCH

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
    with pytest.raises(
        ModelMistake, match="Delegate once, with every subtask this round needs"
    ):
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
    assert final_reply_spec().parameters["properties"]["text"]["pattern"] == r"\S"
    spec = delegate_spec(TYPES, 8).parameters
    assert spec["properties"]["reply"]["pattern"] == r"\S"
    item = spec["properties"]["subtasks"]["items"]
    assert item["properties"]["prompt"]["pattern"] == r"\S"
    assert item["properties"]["type"]["enum"] == ["general", "research"]
    assert spec["properties"]["subtasks"]["maxItems"] == 8
