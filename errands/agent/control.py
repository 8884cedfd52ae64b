"""Control tools: the only ways a round ends, parsed and validated by deterministic code.

The model-facing names and arguments are a contract. Every rejection is written for the model
(it is handed back as an error tool result and the model repairs the call), and every delegate
error names the subtask it is about as ``subtask N:``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from errands.agent import schema_check
from errands.agent.arguments import nested, parse_arguments
from errands.contracts.messages import ToolCall, ToolSpec
from errands.contracts.subtasks import (
    DelegateDecision,
    ReplyDecision,
    SubtaskDraft,
    SubtaskTypeInfo,
)
from errands.errors import ModelMistake

FINAL_REPLY = "final_reply"
DELEGATE = "delegate"
ASK_USER = "ask_user"

PRECEDENCE = {FINAL_REPLY: 0, DELEGATE: 1, ASK_USER: 2}
"""When one step calls several control tools, the most committal one wins."""

_HEX = "[0-9a-fA-F]"
_UNICODE_ESCAPE = (
    f"u([0-9a-cA-Ce-fE-F]{_HEX}{{3}}"  # outside the surrogates
    f"|[dD][0-7]{_HEX}{{2}}"
    f"|[dD][89abAB]{_HEX}{{2}}\\\\u[dD][c-fC-F]{_HEX}{{2}})"  # a high surrogate and its low one
)
NOT_BLANK = (
    r"^( |\\[fnrt])*"
    rf'([^ "\\\x00-\x1F]|\\(["\\/b]|{_UNICODE_ESCAPE}))'
    rf'([^"\\\x00-\x1F]|\\(["\\/bfnrt]|{_UNICODE_ESCAPE}))*$'
)
r"""The blank rejection the model sees on every string of a control tool: some character other
than a space or an escaped ``\f``, ``\n``, ``\r``, ``\t``.

Constrained decoders (llama.cpp, xgrammar, outlines) match a pattern against the JSON text between
the quotes, so it is written over that text, in the syntax all of them parse: anchored (llama.cpp
refuses anything else), plain classes (its grammars have no ``\s``/``\S``), no ``(?:``. Its
characters are JSON's: no bare ``"``, backslash or control character, and only escapes a strict
JSON parser takes: ``\u`` with four hex digits, a surrogate only in a high-low pair.

Each of those limits answers a failure seen in llama-server 0.3.16: with a class that took any
character, the string ran to the output limit and the server aborted ("Content path must be a
string"); with raw newlines allowed, calls came back as unparsable text; with ``\u`` followed by
anything, the model wrote ``\uD9ba`` (a lone surrogate), the server's own parser refused its
output in the middle of a stream and the server aborted ("Invalid diff"). Read over a decoded
string it refuses quotes, backslashes and newlines as well: it guides decoders, and the parsers
below decide.
"""


class Rejection(BaseModel):
    """A control call the model made that cannot be used; the model is asked to repair it."""

    call: ToolCall
    error: str


REPLY_FIELD = "text"
"""The argument of ``final_reply`` that holds the reply."""


def final_reply_spec() -> ToolSpec:
    return ToolSpec(
        name=FINAL_REPLY,
        description=(
            "End the task with your answer to the user. Call this when you can answer now, "
            "with everything the user should read."
        ),
        parameters={
            "type": "object",
            "properties": {
                REPLY_FIELD: {
                    "type": "string",
                    "pattern": NOT_BLANK,
                    "description": "The complete answer the user reads. Must not be blank.",
                }
            },
            "required": [REPLY_FIELD],
            "additionalProperties": False,
        },
    )


def delegate_spec(types: list[SubtaskTypeInfo], max_subtasks: int) -> ToolSpec:
    type_lines = "\n".join(f"- {t.key}: {t.description}" for t in types)
    subtask: dict[str, Any] = {
        "type": {"type": "string", "enum": [t.key for t in types]},
        "prompt": {
            "type": "string",
            "pattern": NOT_BLANK,
            "description": "Self-contained instructions for this subtask.",
        },
        "references": {
            "type": "array",
            "items": {"type": "integer", "minimum": 1},
            "description": (
                "Indexes N of the [ref N] messages this subtask needs; their text is passed to "
                "it verbatim."
            ),
        },
    }
    # Offered only when some type takes params: under constrained decoding a model fills every
    # field it is shown, and a type without params refuses them.
    with_params = [t.key for t in types if t.params_schema is not None]
    if with_params:
        subtask["params"] = {
            "type": "object",
            "description": (
                f"Parameters, only for the types that take them: {', '.join(with_params)}."
            ),
        }
    return ToolSpec(
        name=DELEGATE,
        description=(
            "Split the work into subtasks that run in parallel; you decide again once all of "
            "them have finished and their results are in front of you. Delegate once per "
            f"round, with every subtask this round needs (1 to {max_subtasks}). Subtask types:\n"
            f"{type_lines}"
        ),
        parameters={
            "type": "object",
            "properties": {
                "reply": {
                    "type": "string",
                    "pattern": NOT_BLANK,
                    "description": "A short acknowledgement the user sees while the work runs.",
                },
                "subtasks": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": max_subtasks,
                    "items": {
                        "type": "object",
                        "properties": subtask,
                        "required": ["type", "prompt"],
                    },
                },
            },
            "required": ["reply", "subtasks"],
            "additionalProperties": False,
        },
    )


def pick_control_call(
    calls: list[ToolCall], offered: set[str]
) -> tuple[str, list[ToolCall]] | None:
    """The most committal control tool called in one step, and every call made to it."""
    reached = [c for c in calls if c.name in offered and c.name in PRECEDENCE]
    if not reached:
        return None
    name = max({c.name for c in reached}, key=PRECEDENCE.__getitem__)
    return name, [c for c in reached if c.name == name]


def parse_final_reply(calls: list[ToolCall]) -> ReplyDecision:
    """A repeated ``final_reply`` keeps the last call: the model's latest word."""
    args = _arguments(calls[-1])
    text = args.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ModelMistake("final_reply: `text` must be a non-blank string.")
    return ReplyDecision(text=text.strip())


def parse_delegate(
    calls: list[ToolCall],
    *,
    catalog_size: int,
    types: list[SubtaskTypeInfo],
    max_subtasks: int,
) -> DelegateDecision:
    if len(calls) > 1:
        raise ModelMistake(
            f"delegate was called {len(calls)} times in one step. Delegate once, with every "
            "subtask this round needs."
        )
    args = _arguments(calls[0])
    reply = args.get("reply")
    if not isinstance(reply, str) or not reply.strip():
        raise ModelMistake("delegate: `reply` must be a non-blank acknowledgement for the user.")
    raw_subtasks = args.get("subtasks")
    if isinstance(raw_subtasks, str):
        raw_subtasks = nested(raw_subtasks)
    if not isinstance(raw_subtasks, list) or not raw_subtasks:
        raise ModelMistake("delegate: `subtasks` must be a list of 1 or more subtasks.")
    if len(raw_subtasks) > max_subtasks:
        raise ModelMistake(
            f"delegate: {len(raw_subtasks)} subtasks given, at most {max_subtasks} are allowed "
            "in one round."
        )
    by_key = {t.key: t for t in types}
    drafts = [_parse_subtask(n, raw, by_key, catalog_size) for n, raw in enumerate(raw_subtasks, 1)]
    return DelegateDecision(reply=reply.strip(), subtasks=drafts)


def _parse_subtask(
    n: int, raw: Any, by_key: dict[str, SubtaskTypeInfo], catalog_size: int
) -> SubtaskDraft:
    def fail(message: str) -> ModelMistake:
        return ModelMistake(f"subtask {n}: {message}")

    if not isinstance(raw, dict):
        raise fail("must be an object with `type` and `prompt`.")
    key = raw.get("type")
    if not isinstance(key, str) or key not in by_key:
        raise fail(f"unknown type {key!r}; installed types are {sorted(by_key)}.")
    prompt = raw.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise fail("`prompt` must be non-blank instructions.")
    references = raw.get("references") or []
    if not isinstance(references, list) or not all(
        isinstance(r, int) and not isinstance(r, bool) for r in references
    ):
        raise fail("`references` must be a list of catalog indexes (integers).")
    seen: set[int] = set()
    for index in references:
        if index in seen:
            raise fail(f"reference {index} is used twice.")
        seen.add(index)
        if not 1 <= index <= catalog_size:
            raise fail(
                f"reference {index} is outside the catalog (catalog has {catalog_size} entries, "
                f"numbered 1 to {catalog_size})."
            )
    params = raw.get("params") or {}
    schema = by_key[key].params_schema
    if params and schema is None:
        raise fail(f"type {key!r} takes no params; remove `params`.")
    if schema is not None:
        try:
            params = schema_check.check(schema, params)
        except ModelMistake as error:
            raise fail(str(error)) from None
    return SubtaskDraft(
        type=key, prompt=prompt.strip(), references=sorted(references), params=params
    )


def _arguments(call: ToolCall) -> dict[str, Any]:
    return parse_arguments(call.arguments, tool=call.name, send="a JSON object")
