"""Anthropic Messages through the official SDK, retries off.

Like the OpenAI mapping, the request mapping is a pure function: one ``ModelRequest``, one byte
sequence, so a replayed prefix hits the prompt cache. Anthropic caches only up to explicit
breakpoints, so the mapping puts ``cache_control`` on the system block (or, with no system, the
last tool): the tools and system prefix every round, side question and advisor call shares; and
on the last block of the request's stable prefix (``ModelRequest.cache_upto``), which the next
attempt, the next round and a side question replaying this round all begin with.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import anthropic
from anthropic.types import Message as AnthropicMessage

from errands.agent.arguments import REFUSED, read_arguments
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

_TOOL_CHOICE = {"required": {"type": "any"}, "auto": {"type": "auto"}, "none": {"type": "none"}}
_BREAKPOINT = {"type": "ephemeral"}


logger = logging.getLogger("errands.providers")


def anthropic_client(*, api_key: str | None, base_url: str | None) -> anthropic.AsyncAnthropic:
    """A client whose failures all reach the activity: Temporal owns retries, not the SDK.

    ``None`` falls back to ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL`` as the SDK does.
    """
    return anthropic.AsyncAnthropic(api_key=api_key, base_url=base_url, max_retries=0)


def anthropic_params(
    model: str, request: ModelRequest, info: ModelInfo | None = None
) -> dict[str, Any]:
    """The keyword arguments for ``messages.create``, in a fixed order.

    Anthropic has one system prompt and strict user/assistant alternation, so system-role
    messages join the system prompt (blank-line separated, in order), tool results travel as
    user turns, and consecutive turns of one role merge into one turn of several blocks.
    Empty text blocks are left out (the API refuses them); a turn left with no blocks is dropped.
    With ``cache_upto`` set, system messages after the stable prefix become user text.
    ``info`` (default: the built-in catalog's entry) caps the output and says whether to mark
    cache breakpoints.
    """
    info = info or CATALOG.lookup(f"anthropic:{model}")
    system = [request.system] if request.system else []
    turns: list[dict[str, Any]] = []
    stable_end: dict[str, Any] | None = None  # the stable prefix's last block: its breakpoint
    for index, message in enumerate(request.messages):
        stable = request.cache_upto is not None and index < request.cache_upto
        # Past the stable prefix a system message travels as user text: joined to the system
        # prompt it would change the prefix's start, and nothing cached would be read.
        if message.role == "system" and (stable or request.cache_upto is None):
            if message.text:
                system.append(message.text)
        elif blocks := _blocks(message):
            role = "assistant" if message.role == "assistant" else "user"
            if turns and turns[-1]["role"] == role:
                turns[-1]["content"].extend(blocks)
            else:
                turns.append({"role": role, "content": blocks})
        if stable and turns:
            stable_end = turns[-1]["content"][-1]
    cache = info.prompt_cache
    params: dict[str, Any] = {
        "model": model,
        "max_tokens": min(request.max_output_tokens, info.max_output),
    }
    if system:
        text = "\n\n".join(system)
        params["system"] = (
            [{"type": "text", "text": text, "cache_control": dict(_BREAKPOINT)}] if cache else text
        )
    if cache and stable_end is not None:
        stable_end["cache_control"] = dict(_BREAKPOINT)
    params["messages"] = turns
    if request.tools:
        params["tools"] = [
            {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
            for tool in request.tools
        ]
        if cache and not system:
            params["tools"][-1]["cache_control"] = dict(_BREAKPOINT)
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
    # sent malformed JSON, or JSON too deep or too long to read, and was told so in the tool
    # result) is replayed with {} so the history stays valid; the tool result that follows
    # still explains what went wrong.
    parsed = read_arguments(call.arguments)
    return parsed if isinstance(parsed, dict) else {}


def anthropic_response(
    message: AnthropicMessage, streamed: dict[int, str] | None = None
) -> ModelResponse:
    """``streamed``: each tool_use block's input as the stream sent it, by block index. The
    SDK's partial-JSON reading of a stream turns a cut-off input (``{"text": "half``) into
    ``{}``; the text as sent lets the repair ladder tell the model what was wrong with it."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    for index, block in enumerate(message.content):
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            # A str input is what a malformed-arguments answer looks like: keep it as is, so
            # the repair ladder sees exactly what the model sent.
            raw = block.input
            sent = (streamed or {}).get(index, "")
            try:
                if sent.strip():
                    arguments = sent
                else:
                    arguments = raw if isinstance(raw, str) else json.dumps(raw)
            except RecursionError:  # parsed, yet too deep to write back: the model is told
                arguments = json.dumps({REFUSED: "the arguments are nested too deeply to read"})
            calls.append(ToolCall(id=block.id, name=block.name, arguments=arguments))
    usage = message.usage
    cache_read = usage.cache_read_input_tokens or 0
    cache_write = usage.cache_creation_input_tokens or 0
    details = usage.output_tokens_details
    return ModelResponse(
        text="".join(texts),
        tool_calls=calls,
        # As the server said it: "max_tokens" tells the round that the output limit cut the call.
        finish_reason=message.stop_reason or "end_turn",
        # Anthropic reports cache reads and writes apart from input_tokens; our Usage counts
        # every prompt token as input (the OpenAI way) so the ledger adds like with like.
        usage=Usage(
            input_tokens=(usage.input_tokens or 0) + cache_read + cache_write,
            output_tokens=usage.output_tokens or 0,
            cached_tokens=cache_read,
            cache_write_tokens=cache_write,
            reasoning_tokens=(details.thinking_tokens if details else None) or 0,
        ),
        model=message.model,
    )


class AnthropicMessagesProvider:
    name = "anthropic"

    def __init__(
        self, client: anthropic.AsyncAnthropic, catalog: ModelCatalog | None = None
    ) -> None:
        self._client = client
        self._catalog = catalog or CATALOG

    async def complete(
        self,
        model: str,
        request: ModelRequest,
        *,
        timeout: float,
        on_delta: DeltaSink | None = None,
    ) -> ModelResponse:
        params = anthropic_params(model, request, self._catalog.lookup(f"anthropic:{model}"))
        if on_delta is None:
            try:
                message = await self._client.messages.create(**params, timeout=timeout)
            except RecursionError:
                # A whole message arrives parsed, and the parse of a tool input nested ~1,000
                # levels deep fails, however often it is retried. Streamed, the input comes as
                # JSON text the SDK gives up on cleanly, and the model is told
                # (``unreadable_input``): ask once more that way.
                logger.warning(
                    "an answer of %s nested too deeply to read; asked again, streamed", model
                )
            else:
                return anthropic_response(message)
        names: dict[int, str] = {}  # the tool_use blocks' names, by block index
        sent: dict[int, str] = {}  # their inputs as sent, by block index
        # The SDK's timeout bounds each read; the whole answer gets the call's timeout too.
        async with (
            asyncio.timeout(timeout),
            self._client.messages.stream(**params, timeout=timeout) as stream,
        ):
            try:
                async for event in stream:
                    if (
                        event.type == "content_block_start"
                        and event.content_block.type == "tool_use"
                    ):
                        names[event.index] = event.content_block.name
                    elif event.type == "content_block_delta":
                        delta = event.delta
                        if delta.type == "input_json_delta" and delta.partial_json:
                            sent[event.index] = sent.get(event.index, "") + delta.partial_json
                        if on_delta is None:
                            continue
                        if delta.type == "text_delta" and delta.text:
                            on_delta(Delta(delta.text))
                        elif delta.type == "input_json_delta" and delta.partial_json:
                            name = names.get(event.index, "")
                            on_delta(Delta(delta.partial_json, name, event.index))
            except ValueError as error:
                if UNREADABLE_INPUT not in str(error):
                    raise
                return unreadable_input(stream.current_message_snapshot, error)
            message = await stream.get_final_message()
        return anthropic_response(message, sent)


UNREADABLE_INPUT = "Unable to parse tool parameter JSON"
"""How the SDK's stream gives up on a tool call's input it cannot parse as (partial) JSON: too
deep for its parser, or malformed. Its message quotes the whole input."""


def unreadable_input(snapshot: AnthropicMessage, error: ValueError) -> ModelResponse:
    """The answer as far as the stream got, the call whose input the SDK could not read (the
    last block) carrying the marker of a refusal (``errands.agent.arguments``): the model is
    told and calls again, where the SDK's error would fail the task."""
    cause = str(error.__cause__ or "unreadable")[:200]
    problem = f"the arguments could not be read as JSON ({cause})"
    for block in reversed(snapshot.content):
        if block.type == "tool_use":
            block.input = {REFUSED: problem}
            break
    response = anthropic_response(snapshot)
    return response.model_copy(update={"finish_reason": "tool_use"})
