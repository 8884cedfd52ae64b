"""OpenAI Chat Completions (and any server that speaks it) through the official SDK, retries off.

The request mapping is a pure function of the ``ModelRequest`` and the model's catalog entry: the
same request always becomes the same JSON body, byte for byte, because a side question replays a
round's exact prefix to hit the provider's prompt cache.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any
from urllib.parse import urlsplit

import openai
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion

from errands.adapters.providers._errors import refuses_required_tool_choice
from errands.agent.model_catalog import CATALOG, ModelCatalog, ModelInfo
from errands.contracts.messages import (
    Delta,
    DeltaSink,
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
)

logger = logging.getLogger("errands.providers")


def openai_client(*, api_key: str | None, base_url: str | None) -> openai.AsyncOpenAI:
    """A client whose failures all reach the activity: Temporal owns retries, not the SDK.

    ``None`` falls back to ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` as the SDK does.
    """
    return openai.AsyncOpenAI(api_key=api_key, base_url=base_url, max_retries=0)


def is_openai_api(base_url: object) -> bool:
    """Whether ``base_url`` (a URL or its text) is OpenAI's own API, not a compatible server."""
    host = urlsplit(str(base_url)).hostname or ""
    return host == "api.openai.com" or host.endswith(".api.openai.com")


def openai_params(
    model: str, request: ModelRequest, info: ModelInfo | None = None
) -> dict[str, Any]:
    """The keyword arguments for ``chat.completions.create``, in a fixed order.

    ``info`` (default: the built-in catalog's entry, as on OpenAI's own API) decides what the
    model accepts: no temperature for the families that refuse one, and the output limit in
    ``max_completion_tokens``, ``max_tokens`` or both, capped at the model's longest output.
    """
    info = info or CATALOG.lookup(f"openai:{model}")
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
    limit = min(request.max_output_tokens, info.max_output)
    if info.output_limit in ("max_completion_tokens", "both", None):
        params["max_completion_tokens"] = limit
    if info.output_limit in ("max_tokens", "both"):
        params["max_tokens"] = limit
    if request.temperature is not None and info.temperature:
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
    return ModelResponse(
        text=choice.message.content or "",
        tool_calls=calls,
        # As the server said it: "length" tells the round that the output limit cut the call.
        finish_reason=choice.finish_reason or "stop",
        usage=_usage(completion.usage),
        model=completion.model,
    )


def _usage(usage: CompletionUsage | None) -> Usage:
    prompt = usage.prompt_tokens_details if usage else None
    output = usage.completion_tokens_details if usage else None
    return Usage(
        input_tokens=(usage.prompt_tokens if usage else None) or 0,
        output_tokens=(usage.completion_tokens if usage else None) or 0,
        cached_tokens=(prompt.cached_tokens if prompt else None) or 0,
        cache_write_tokens=(prompt.cache_write_tokens if prompt else None) or 0,
        reasoning_tokens=(output.reasoning_tokens if output else None) or 0,
    )


class _Streamed:
    """A streamed completion put together chunk by chunk (the chunks as JSON, not the SDK's
    models: building those costs more than the rest of a short answer), each piece passed on
    as it comes."""

    def __init__(self, on_delta: DeltaSink) -> None:
        self._on_delta = on_delta
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._model = ""

    def take(self, chunk: dict[str, Any]) -> None:
        self._model = chunk.get("model") or self._model
        if chunk.get("usage"):  # the last chunk, with stream_options.include_usage
            self._usage = chunk["usage"]
        for choice in (chunk.get("choices") or [])[:1]:
            delta = choice.get("delta") or {}
            if content := delta.get("content"):
                self._text.append(content)
                self._on_delta(Delta(content))
            for part in delta.get("tool_calls") or []:
                index = part.get("index", 0)
                call = self._calls.setdefault(index, {"id": "", "name": "", "arguments": []})
                function = part.get("function") or {}
                call["id"] = part.get("id") or call["id"]
                call["name"] = function.get("name") or call["name"]
                if arguments := function.get("arguments"):
                    call["arguments"].append(arguments)
                    self._on_delta(Delta(arguments, call["name"], index))
            self._finish_reason = choice.get("finish_reason") or self._finish_reason

    def response(self) -> ModelResponse:
        calls = [
            ToolCall(id=c["id"], name=c["name"], arguments="".join(c["arguments"]))
            for _, c in sorted(self._calls.items())
        ]
        usage = CompletionUsage.model_validate(self._usage) if self._usage else None
        return ModelResponse(
            text="".join(self._text),
            tool_calls=calls,
            finish_reason=self._finish_reason or "stop",
            usage=_usage(usage),
            model=self._model,
        )


class OpenAIChatProvider:
    """Chat Completions: OpenAI itself, or any compatible server behind ``base_url``.

    A model whose server refuses ``tool_choice: "required"`` gets ``auto`` instead, from the
    first refusal for the rest of this provider's life (the worker's): the round's repair of
    narration covers a model that then answers in prose.
    """

    name = "openai"

    def __init__(self, client: openai.AsyncOpenAI, catalog: ModelCatalog | None = None) -> None:
        self._client = client
        self._catalog = catalog or CATALOG
        self._official = is_openai_api(client.base_url)
        self._auto_only: set[str] = set()
        """Models (on this base URL) whose server refused ``tool_choice: "required"``."""

    async def complete(
        self,
        model: str,
        request: ModelRequest,
        *,
        timeout: float,
        on_delta: DeltaSink | None = None,
    ) -> ModelResponse:
        info = self._catalog.lookup(f"openai:{model}", official_api=self._official)
        if model in self._auto_only:
            request = _auto(request)
        deadline = time.monotonic() + timeout
        try:
            return await self._create(model, request, info, timeout, on_delta)
        except openai.APIStatusError as error:
            if request.tool_choice != "required" or not request.tools:
                raise
            if not refuses_required_tool_choice(error):
                raise
            self._remember_auto(model)
            remaining = max(1.0, deadline - time.monotonic())
            return await self._create(model, _auto(request), info, remaining, on_delta)

    async def _create(
        self,
        model: str,
        request: ModelRequest,
        info: ModelInfo,
        timeout: float,
        on_delta: DeltaSink | None,
    ) -> ModelResponse:
        params = openai_params(model, request, info)
        # All but the model is plain JSON already. Handed over as `extra_body` (whose keys take
        # the place of the typed ones, in their place in the body, and follow them otherwise),
        # it skips the SDK's per-field transform of typed parameters: 0.3 ms a message, 56 ms
        # for a round of 200 messages, and 80 µs a call for the settings alone (measured).
        ready = {key: value for key, value in params.items() if key != "model"}
        create = self._client.chat.completions.create
        if on_delta is None:
            completion = await create(model=model, messages=[], extra_body=ready, timeout=timeout)
            return openai_response(completion)
        streamed = _Streamed(on_delta)
        streaming = self._client.chat.completions.with_streaming_response.create
        ready["stream_options"] = {"include_usage": True}
        # The SDK's timeout bounds each read; the whole answer gets the call's timeout too.
        # Leaving the block, however, closes the connection.
        async with (
            asyncio.timeout(timeout),
            streaming(
                model=model, messages=[], extra_body=ready, stream=True, timeout=timeout
            ) as response,
        ):
            async for line in response.iter_lines():
                chunk = _chunk(line)
                if chunk is None:
                    continue  # around the chunks, and the [DONE] line: read on to the end,
                    # so the connection goes back to the pool
                if "error" in chunk:  # the server broke off: as the SDK's own stream raises it
                    error = chunk["error"] or {}
                    message = error.get("message") if isinstance(error, dict) else str(error)
                    raise openai.APIError(
                        message or "the stream ended with an error",
                        response.http_request,
                        body=error,
                    )
                streamed.take(chunk)
        return streamed.response()

    def _remember_auto(self, model: str) -> None:
        if model in self._auto_only:
            return
        self._auto_only.add(model)
        url = self._client.base_url
        # Scheme, host and port only: a URL's user info or query could carry a secret.
        origin = f"{url.scheme}://{url.host}" + (f":{url.port}" if url.port else "")
        logger.warning(
            "the server at %s refuses tool_choice 'required' for model %r; sending 'auto' for "
            "it from now on (a model that then answers in prose is repaired)",
            origin,
            model,
        )


def _chunk(line: str) -> dict[str, Any] | None:
    """The JSON of one server-sent line (``data: {...}``); None for the lines around the
    chunks (blank, comments, ``event:``, the closing ``data: [DONE]``)."""
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    if data == "[DONE]":
        return None
    try:
        parsed = json.loads(data)
    except ValueError:
        return None  # not a chunk (a keep-alive of some servers)
    return parsed if isinstance(parsed, dict) else None


def _auto(request: ModelRequest) -> ModelRequest:
    if request.tool_choice != "required":
        return request
    return request.model_copy(update={"tool_choice": "auto"})
