"""The one rule for what a text field may hold: what both session stores can keep, so SQLite and
PostgreSQL hold the same text.

A Python ``str`` may hold two things PostgreSQL refuses (every other code point, controls and
noncharacters included, both stores keep):

- NUL (U+0000): ``text`` refuses it ("cannot contain NUL (0x00) bytes"), ``jsonb`` too
  ("\\u0000 cannot be converted to text");
- surrogates (U+D800–U+DFFF): a ``str`` holds one only when it came through a JSON escape with
  no partner (``"\\ud800"``) or from bytes decoded with ``surrogateescape`` (a non-UTF-8
  command-line argument). They have no UTF-8 form at all, so neither store, nor a Temporal
  payload, can carry them.

Text a person sends is refused (``check``: the message names the field and the position); text a
model or a tool sends cannot be, so it is replaced (``clean``) with U+FFFD, the character that
says "something was here that could not be kept". SQLite would take a NUL, but the same rule
applies there, so a task reads the same on either store.
"""

from __future__ import annotations

import json
import re
from typing import Any

from errands.contracts.messages import ModelResponse, ToolCall

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
"""The characters no text field may hold."""
REPLACEMENT = "\ufffd"
"""What an unstorable character a model or tool sent becomes."""
_ESCAPED = re.compile(r"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")
"""A JSON escape that may decode to an unstorable character (a paired surrogate decodes to
one code point and is kept)."""


def unstorable(text: str) -> int:
    """How many characters of ``text`` no store can hold."""
    return len(UNSTORABLE.findall(text))


def problem(text: str, field: str) -> str | None:
    """What is wrong with ``text`` as the value of ``field`` (an instruction), or None."""
    found = UNSTORABLE.search(text)
    if found is None:
        return None
    char = found.group()
    what = "a NUL character" if char == "\x00" else "an unpaired surrogate"
    count = unstorable(text)
    more = f" ({count} such characters in all)" if count > 1 else ""
    return (
        f"{field} holds {what} (U+{ord(char):04X}) at character {found.start() + 1}, which "
        f"errands cannot store{more}; remove it and send the text again"
    )


def check(text: str, field: str) -> str:
    """``text`` if every character can be stored; ``ValueError`` saying where one cannot."""
    message = problem(text, field)
    if message is not None:
        raise ValueError(message)
    return text


def clean(text: str) -> str:
    """``text`` with each unstorable character replaced by U+FFFD."""
    return UNSTORABLE.sub(REPLACEMENT, text) if UNSTORABLE.search(text) else text


def clean_json(value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, strings, scalars) with every string, keys included,
    cleaned; the same object when nothing needed cleaning."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        items = [(clean_json(k), clean_json(v)) for k, v in value.items()]
        if all(a is k and b is v for (a, b), (k, v) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        cleaned = [clean_json(v) for v in value]
        if all(a is b for a, b in zip(cleaned, value, strict=True)):
            return value
        return type(value)(cleaned)
    return value


def clean_arguments(text: str) -> str:
    """A tool call's raw JSON arguments with no string that decodes to an unstorable character:
    ``text`` itself unless one does (then re-serialised with them replaced). Arguments that do
    not parse are left for the argument parser to name; call it after the size and depth guards
    (``errands.agent.arguments.guard_response``)."""
    text = clean(text)
    if _ESCAPED.search(text) is None:
        return text
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text
    cleaned = clean_json(value)
    return text if cleaned is value else json.dumps(cleaned, ensure_ascii=False)


def clean_response(response: ModelResponse) -> ModelResponse:
    """What a model sent, with every unstorable character of its text and tool calls replaced:
    the same object when it needs nothing."""
    update: dict[str, Any] = {}
    text = clean(response.text)
    if text is not response.text:
        update["text"] = text
    calls = [_clean_call(call) for call in response.tool_calls]
    if any(new is not old for new, old in zip(calls, response.tool_calls, strict=True)):
        update["tool_calls"] = calls
    return response.model_copy(update=update) if update else response


def _clean_call(call: ToolCall) -> ToolCall:
    fields = {
        "id": clean(call.id),
        "name": clean(call.name),
        "arguments": clean_arguments(call.arguments),
    }
    if all(value is getattr(call, name) for name, value in fields.items()):
        return call
    return call.model_copy(update=fields)


def replaced_note(count: int) -> str:
    """What a model reads after a tool result in which ``count`` characters were replaced."""
    return (
        f"\n\n[errands: {count} character(s) of this result (NUL or unpaired surrogates) "
        f"cannot be stored and were replaced with {REPLACEMENT}]"
    )
