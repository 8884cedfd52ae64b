"""OpenAI Chat Completions (and any server that speaks it) through the official SDK, retries off.

The request mapping is a pure function of the ``ModelRequest``: the same request always becomes
the same JSON body, byte for byte, because a side question replays a round's exact prefix to hit
the provider's prompt cache.
"""

from __future__ import annotations

from typing import Any

import openai
from openai.types.chat import ChatCompletion

from errands.contracts import Message, ModelRequest, ModelResponse, ToolCall, Usage


def openai_client(*, api_key: str | None, base_url: str | None) -> openai.AsyncOpenAI:
    """A client whose failures all reach the activity: Temporal owns retries, not the SDK.

    ``None`` falls back to ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` as the SDK does.
    """
    return openai.AsyncOpenAI(api_key=api_key, base_url=base_url, max_retries=0)


def openai_params(model: str, request: ModelRequest) -> dict[str, Any]:
    """The keyword arguments for ``chat.completions.create``, in a fixed order."""
    messages: list[dict[str, Any]] = []
    # An empty system prompt sends nothing rather than an empty system turn.
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.extend(_message(m) for m in request.messages)
    params: dict[str, Any] = {"model": model, "messages": messages}
    if request.tools:
        params["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in request.tools
        ]
        params["tool_choice"] = request.tool_choice
    params["max_completion_tokens"] = request.max_output_tokens
    if request.temperature is not None:
        params["temperature"] = request.temperature
    return params


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        if not message.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        content = f"ERROR: {message.text}" if message.is_error else message.text
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": content}
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.text or None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ],
        }
    return {"role": message.role, "content": message.text}


def openai_response(completion: ChatCompletion) -> ModelResponse:
    choice = completion.choices[0]
    calls = []
    for call in choice.message.tool_calls or []:
        if call.type == "function":
            function = call.function
            calls.append(ToolCall(id=call.id, name=function.name, arguments=function.arguments))
        else:  # a free-form "custom" tool call: its input is the raw text
            calls.append(ToolCall(id=call.id, name=call.custom.name, arguments=call.custom.input))
    usage = completion.usage
    details = usage.prompt_tokens_details if usage else None
    return ModelResponse(
        text=choice.message.content or "",
        tool_calls=calls,
        finish_reason=choice.finish_reason or "stop",
        usage=Usage(
            input_tokens=(usage.prompt_tokens if usage else None) or 0,
            output_tokens=(usage.completion_tokens if usage else None) or 0,
            cached_tokens=(details.cached_tokens if details else None) or 0,
        ),
        model=completion.model,
    )


class OpenAIChatProvider:
    """Chat Completions: OpenAI itself, or any compatible server behind ``base_url``."""

    name = "openai"

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        self._client = client

    async def complete(self, model: str, request: ModelRequest, *, timeout: float) -> ModelResponse:
        completion = await self._client.chat.completions.create(
            **openai_params(model, request), timeout=timeout
        )
        return openai_response(completion)
