"""Anthropic Messages through the official SDK, retries off.

Like the OpenAI mapping, the request mapping is a pure function: one ``ModelRequest``, one byte
sequence, so a replayed prefix hits the prompt cache.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
from anthropic.types import Message as AnthropicMessage

from errands.contracts import Message, ModelRequest, ModelResponse, ToolCall, Usage

_TOOL_CHOICE = {"required": {"type": "any"}, "auto": {"type": "auto"}, "none": {"type": "none"}}


def anthropic_client(*, api_key: str | None, base_url: str | None) -> anthropic.AsyncAnthropic:
    """A client whose failures all reach the activity: Temporal owns retries, not the SDK.

    ``None`` falls back to ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL`` as the SDK does.
    """
    return anthropic.AsyncAnthropic(api_key=api_key, base_url=base_url, max_retries=0)


def anthropic_params(model: str, request: ModelRequest) -> dict[str, Any]:
    """The keyword arguments for ``messages.create``, in a fixed order.

    Anthropic has one system prompt and strict user/assistant alternation, so system-role
    messages join the system prompt (blank-line separated, in order), tool results travel as
    user turns, and consecutive turns of one role merge into one turn of several blocks.
    Empty text blocks are left out (the API refuses them); a turn left with no blocks is dropped.
    """
    system = [request.system] if request.system else []
    turns: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "system":
            if message.text:
                system.append(message.text)
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    params: dict[str, Any] = {"model": model, "max_tokens": request.max_output_tokens}
    if system:
        params["system"] = "\n\n".join(system)
    params["messages"] = turns
    if request.tools:
        params["tools"] = [
            {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
            for tool in request.tools
        ]
        params["tool_choice"] = dict(_TOOL_CHOICE[request.tool_choice])
    # ``temperature`` is not sent: the Messages API as this SDK (anthropic 2.x) knows it has no
    # sampling parameters, and create() refuses the keyword.
    return params


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        if not message.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        return [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.text,
                "is_error": message.is_error,
            }
        ]
    blocks: list[dict[str, Any]] = []
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    for call in message.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call)}
        )
    return blocks


def _tool_input(call: ToolCall) -> dict[str, Any]:
    # Anthropic takes the input as an object. A call whose arguments never parsed (the model
    # sent malformed JSON and was told so in the tool result) is replayed with {} so the history
    # stays valid; the tool result that follows still explains what went wrong.
    try:
        parsed = json.loads(call.arguments)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def anthropic_response(message: AnthropicMessage) -> ModelResponse:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in message.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            # A str input is what a malformed-arguments answer looks like: keep it as is, so
            # the repair ladder sees exactly what the model sent.
            raw = block.input
            arguments = raw if isinstance(raw, str) else json.dumps(raw)
            calls.append(ToolCall(id=block.id, name=block.name, arguments=arguments))
    usage = message.usage
    cache_read = usage.cache_read_input_tokens or 0
    cache_write = usage.cache_creation_input_tokens or 0
    return ModelResponse(
        text="".join(texts),
        tool_calls=calls,
        finish_reason=message.stop_reason or "end_turn",
        # Anthropic reports cache reads and writes apart from input_tokens; our Usage counts
        # every prompt token as input (the OpenAI way) so the ledger adds like with like.
        usage=Usage(
            input_tokens=(usage.input_tokens or 0) + cache_read + cache_write,
            output_tokens=usage.output_tokens or 0,
            cached_tokens=cache_read,
        ),
        model=message.model,
    )


class AnthropicMessagesProvider:
    name = "anthropic"

    def __init__(self, client: anthropic.AsyncAnthropic) -> None:
        self._client = client

    async def complete(self, model: str, request: ModelRequest, *, timeout: float) -> ModelResponse:
        params = anthropic_params(model, request)
        message = await self._client.messages.create(**params, timeout=timeout)
        return anthropic_response(message)
