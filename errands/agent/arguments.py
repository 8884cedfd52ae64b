"""Tool-call arguments, read once and the same way for every tool and control call.

What a model sends as a call's arguments is text it wrote, and nothing it writes may fail a task:
whatever cannot be read becomes a ``ModelMistake`` written for the model, which the caller hands
back as an error tool result (a control call goes down the repair ladder; a work tool's result is
the error). Two guards run before ``json.loads`` sees the text, because the decoder recurses once
per nesting level and a deep enough text raises ``RecursionError`` (in a workflow that fails the
task; in an activity it is retried) and a long enough one costs time and payload room:

- size: at most ``MAX_BYTES`` of UTF-8 (legitimate arguments are a few KB: 4,096 output tokens,
  the default limit of a step, make about 16 KB; the room left keeps a payload that carries a
  call twice, as a step's output with an approval does, far below Temporal's 2 MB);
- depth: at most ``MAX_DEPTH`` levels of ``[``/``{``, counted outside strings in one linear scan.

The model router (``errands.adapters.routing``) puts ``guard_response`` between every provider
and everything else: arguments that fail a guard are replaced by a small marker object
(``{"errands:refused": "<what was wrong>"}``) before a step activity stores or returns them, so
neither Temporal payloads, stored steps nor the requests that show the call to the model again
carry them. The parser reads the marker as the mistake it stands for.

Deterministic and import-light (the standard library and the contracts): workflows import it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from errands.contracts.messages import ModelResponse, ToolCall
from errands.errors import ModelMistake

MAX_BYTES = 256 * 1024
"""The most UTF-8 bytes of arguments read; longer ones are refused before any parse."""
MAX_DEPTH = 64
"""The deepest nesting of arrays and objects read; deeper ones are refused before any parse."""
REFUSED = "errands:refused"
"""The one key of the marker that stands in for arguments a guard refused; its value says why."""

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
"""A JSON string (one left open runs to the end), unrolled so the match stays linear."""
_BRACKET = re.compile(r"[\[\]{}]")


def parse_arguments(
    text: str | None,
    *,
    tool: str,
    send: str = "one JSON object of arguments",
) -> dict[str, Any]:
    """A call's arguments as the JSON object they must be, or a ``ModelMistake`` for ``tool``
    that says what is wrong and to call again with ``send``. Blank arguments are the empty
    object."""
    arguments = read_arguments(text)
    if isinstance(arguments, str):
        raise ModelMistake(f"{tool}: {arguments}. Call {tool} again with {send}.")
    return arguments


def read_arguments(text: str | None) -> dict[str, Any] | str:
    """A call's arguments as a JSON object, or what is wrong with them, in words for the model
    (``parse_arguments`` raises them as its mistake)."""
    problem = refusal(text or "")
    if problem is not None:
        return problem
    try:
        value = json.loads(text or "{}")
    except RecursionError:
        return "the arguments are nested too deeply to read"
    except json.JSONDecodeError as error:
        return f"the arguments are not valid JSON ({json_error(error)})"
    except ValueError as error:  # e.g. an integer of more digits than Python converts
        return f"the arguments cannot be read ({error})"
    if not isinstance(value, dict):
        return f"the arguments must be a JSON object, not {_kind(value)}"
    return value


def nested(value: Any) -> Any:
    """``value``, or the JSON it holds when it is a string that holds a list or an object:
    models sometimes send a nested argument (``questions``, ``subtasks``) as a JSON string.
    The string is read under the same guards as ``read_arguments``; one that cannot be read
    stays the string, for the caller's own check to name."""
    if not isinstance(value, str) or not value.lstrip().startswith(("[", "{")):
        return value
    if refusal(value) is not None:
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def refusal(text: str) -> str | None:
    """What the guards refuse in ``text`` (too long, too deep, or the marker of a refusal made
    where the call came in), or None when it may be parsed. Linear in the length of ``text``;
    the size is checked first."""
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        return f"the arguments are {size:,} bytes long; at most {MAX_BYTES:,} bytes are read"
    if depth(text, stop_after=MAX_DEPTH) > MAX_DEPTH:
        return (
            f"the arguments are nested more than {MAX_DEPTH} levels deep; at most {MAX_DEPTH} "
            "levels of arrays and objects are read"
        )
    if REFUSED in text:
        return _marked(text)
    return None


def depth(text: str, *, stop_after: int | None = None) -> int:
    """How deeply arrays and objects nest in ``text``, counting brackets outside strings (as a
    JSON decoder would meet them, up to its first error); stops counting once past
    ``stop_after``."""
    outside = _STRING.sub("", text) if '"' in text else text
    level = deepest = 0
    for bracket in _BRACKET.finditer(outside):
        if bracket.group() in "[{":
            level += 1
            if level > deepest:
                deepest = level
                if stop_after is not None and deepest > stop_after:
                    break
        else:
            level -= 1
    return deepest


def guard_call(call: ToolCall) -> ToolCall:
    """``call`` itself, or, when a guard refuses its arguments, the call with the marker that
    says why in their place (small, shallow and an object, so every provider takes it back)."""
    problem = refusal(call.arguments)
    if problem is None:
        return call
    return call.model_copy(update={"arguments": json.dumps({REFUSED: problem})})


def guard_response(response: ModelResponse) -> ModelResponse:
    """``response`` with every tool call guarded (``guard_call``): what a step activity stores
    and returns in place of what the provider sent."""
    guarded = [guard_call(call) for call in response.tool_calls]
    if all(new is old for new, old in zip(guarded, response.tool_calls, strict=True)):
        return response
    return response.model_copy(update={"tool_calls": guarded})


def json_error(error: json.JSONDecodeError) -> str:
    """What is wrong with the JSON and where, in plain words ("Unterminated string starting at
    position 9": the decoder's message already ends with "at")."""
    return f"{error.msg.removesuffix(' at')} at position {error.pos}"


def _marked(text: str) -> str | None:
    """The refusal a marker (``guard_call``) stands for, or None for real arguments."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get(REFUSED), str):
        return str(value[REFUSED])
    return None


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "REFUSED",
    "depth",
    "guard_call",
    "guard_response",
    "json_error",
    "nested",
    "parse_arguments",
    "read_arguments",
    "refusal",
]
