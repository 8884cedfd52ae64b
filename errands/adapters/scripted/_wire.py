"""What goes on the wire for each API (OpenAI Chat Completions, Anthropic Messages): the plain
response bodies, the server-sent events of a streamed reply and ``_stream`` that sends them, the
error bodies, the connection reset, and the usage a reply reports when its script gives none."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from typing import Any, Literal

from aiohttp import web

from errands.adapters.scripted._steps import Api, RecordedRequest, Reply
from errands.contracts.messages import Usage

# Error ``type`` strings each API uses for a status; anything unlisted falls back by class.
_OPENAI_ERROR_TYPES = {403: "permission_error", 429: "rate_limit_exceeded"}
_ANTHROPIC_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def _default_usage(raw: bytes, reply: Reply) -> Usage:
    return Usage(
        input_tokens=len(raw) // 4,
        output_tokens=max(1, len(reply.text) // 4) + 10 * len(reply.calls),
    )


def _openai_completion(
    recorded: RecordedRequest, index: int, reply: Reply, usage: Usage
) -> dict[str, Any]:
    tool_calls = [
        {
            "id": f"call_{index}_{k}",
            "type": "function",
            "function": {"name": call.name, "arguments": _arguments_text(call.arguments)},
        }
        for k, call in enumerate(reply.calls)
    ]
    # Like the real API: no text beside tool calls is null, not "".
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.text or (None if tool_calls else ""),
    }
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": f"chatcmpl-scripted-{index}",
        "object": "chat.completion",
        "created": int(recorded.received_at),
        "model": recorded.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _openai_finish(reply),
                "logprobs": None,
            }
        ],
        "usage": _openai_usage(usage),
    }


def _openai_finish(reply: Reply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.calls else "stop")


def _openai_usage(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {
            "cached_tokens": usage.cached_tokens,
            **(
                {"cache_write_tokens": usage.cache_write_tokens} if usage.cache_write_tokens else {}
            ),
        },
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def _arguments_text(arguments: dict[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _anthropic_message(
    recorded: RecordedRequest, index: int, reply: Reply, usage: Usage
) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.text or not reply.calls:
        content.append({"type": "text", "text": reply.text})
    for k, call in enumerate(reply.calls):
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_{index}_{k}",
                "name": call.name,
                "input": _anthropic_input(call.arguments),
            }
        )
    return {
        "id": f"msg_scripted_{index}",
        "type": "message",
        "role": "assistant",
        "model": recorded.model,
        "content": content,
        "stop_reason": _anthropic_stop(reply),
        "stop_sequence": None,
        "usage": _anthropic_usage(usage),
    }


def _anthropic_stop(reply: Reply) -> str:
    return reply.finish_reason or ("tool_use" if reply.calls else "end_turn")


def _anthropic_usage(usage: Usage) -> dict[str, Any]:
    # Anthropic counts cache reads and writes apart from input; our Usage counts them inside
    # input (the OpenAI way), so the same Reply reads back as the same Usage on either API.
    return {
        "input_tokens": max(0, usage.input_tokens - usage.cached_tokens - usage.cache_write_tokens),
        "output_tokens": usage.output_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        **(
            {"output_tokens_details": {"thinking_tokens": usage.reasoning_tokens}}
            if usage.reasoning_tokens
            else {}
        ),
    }


class RawJson(str):
    """JSON text that goes on the wire as it is: a tool input nested too deeply for this
    server's own parser, which a real API could still send."""


def wire_json(body: Any) -> str:
    """``body`` as JSON, each ``RawJson`` in it written as its text."""
    raws: list[str] = []

    def mark(value: Any) -> Any:
        if isinstance(value, RawJson):
            raws.append(value)
            return f"\x00raw {len(raws) - 1}\x00"
        if isinstance(value, dict):
            return {key: mark(item) for key, item in value.items()}
        if isinstance(value, list):
            return [mark(item) for item in value]
        return value

    text = json.dumps(mark(body))
    for number, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x00raw {number}\x00"), raw)
    return text


def _anthropic_input(arguments: dict[str, Any] | str) -> Any:
    if not isinstance(arguments, str):
        return arguments
    try:
        parsed = json.loads(arguments)
    except RecursionError:
        return RawJson(arguments)
    except ValueError:
        return arguments
    # Anything but an object goes out as the raw string: the malformed-arguments case on this API.
    return parsed if isinstance(parsed, dict) else arguments


_Frame = tuple[bytes, Literal["piece", "usage"] | None]
"""One server-sent event, marked when it carries a piece of text or arguments, or the usage."""


async def _stream(
    request: web.Request, recorded: RecordedRequest, index: int, reply: Reply, usage: Usage
) -> web.StreamResponse:
    if recorded.api == "openai":
        frames = _openai_chunks(recorded, index, reply, usage)
        error = {"message": reply.fail_message, "type": "server_error", "code": None}
        failure = _sse({"error": error})
    else:
        frames = _anthropic_events(index, recorded.model, reply, usage)
        error = {"type": "api_error", "message": reply.fail_message}
        failure = _sse({"type": "error", "error": error}, "error")
    cut = _cut(frames, reply.fail_after)
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    sent = 0
    try:
        await response.prepare(request)
        if not reply.chunk_delay and cut == len(frames):
            # Made as fast as they go out, the frames leave together, as a real server's would:
            # one write, not a TCP segment each.
            await response.write(b"".join(frame for frame, _ in frames))
            if any(kind == "usage" for _, kind in frames):
                recorded.reported_usage = usage
        else:
            for frame, kind in frames[:cut]:
                if kind == "piece" and sent and reply.chunk_delay:
                    await asyncio.sleep(reply.chunk_delay)
                await response.write(frame)
                if kind == "piece":
                    sent += 1
                if kind == "usage":
                    recorded.reported_usage = usage
            if cut < len(frames):
                if sent and reply.chunk_delay:
                    await asyncio.sleep(reply.chunk_delay)
                await response.write(failure)
        await response.write_eof()
    except ConnectionError:
        # The client stopped reading, as real clients do. (A disconnect noticed first cancels
        # the handler instead, which aiohttp ends as quietly.)
        pass
    return response


def _cut(frames: list[_Frame], fail_after: int | None) -> int:
    """How many frames go out before the mid-stream error: those up to the ``fail_after``-th
    piece, or up to the last piece if there are fewer; all of them without ``fail_after``."""
    if fail_after is None:
        return len(frames)
    pieces = [i for i, (_, kind) in enumerate(frames) if kind == "piece"]
    if not pieces:
        return 1
    if fail_after == 0:
        return pieces[0]
    return pieces[min(fail_after, len(pieces)) - 1] + 1


def _openai_chunks(
    recorded: RecordedRequest, index: int, reply: Reply, usage: Usage
) -> list[_Frame]:
    options = recorded.body.get("stream_options")
    with_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    head = {
        "id": f"chatcmpl-scripted-{index}",
        "object": "chat.completion.chunk",
        "created": int(recorded.received_at),
        "model": recorded.model,
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        # Asked for usage, every chunk but the last carries a null one, as the real API sends.
        return _sse({**head, "choices": [choice], **({"usage": None} if with_usage else {})})

    content = None if reply.calls and not reply.text else ""
    frames: list[_Frame] = [(chunk({"role": "assistant", "content": content}), None)]
    frames += [(chunk({"content": p}), "piece") for p in _pieces(reply.text, reply.chunk_chars)]
    for k, call in enumerate(reply.calls):
        function = {"name": call.name, "arguments": ""}
        opening = {"index": k, "id": f"call_{index}_{k}", "type": "function", "function": function}
        frames.append((chunk({"tool_calls": [opening]}), None))
        frames += [
            (chunk({"tool_calls": [{"index": k, "function": {"arguments": p}}]}), "piece")
            for p in _pieces(_arguments_text(call.arguments), reply.chunk_chars)
        ]
    frames.append((chunk({}, _openai_finish(reply)), None))
    if with_usage:
        frames.append((_sse({**head, "choices": [], "usage": _openai_usage(usage)}), "usage"))
    frames.append((b"data: [DONE]\n\n", None))
    return frames


def _anthropic_events(index: int, model: str, reply: Reply, usage: Usage) -> list[_Frame]:
    def event(data: dict[str, Any]) -> bytes:
        return _sse(data, data["type"])

    final = _anthropic_usage(usage)
    # The real API opens with the input counts and a token of output, and sends the totals
    # again in message_delta, which is where the SDK's accumulator takes them from.
    opening = {**final, "output_tokens": 1}
    opening.pop("output_tokens_details", None)
    message: dict[str, Any] = {
        "id": f"msg_scripted_{index}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": opening,
    }
    frames: list[_Frame] = [
        (event({"type": "message_start", "message": message}), None),
        (event({"type": "ping"}), None),
    ]
    # Each block: how it opens, then the delta type and field its pieces go out in.
    blocks: list[tuple[dict[str, Any], str, str, str]] = []
    if reply.text or not reply.calls:
        blocks.append(({"type": "text", "text": ""}, "text_delta", "text", reply.text))
    for k, call in enumerate(reply.calls):
        # A str that is not a JSON object goes out verbatim: the SDK parses it as partial JSON
        # (``"[1, 2"`` accumulates as ``[1, 2]``) or raises ValueError if it cannot.
        tool = {"type": "tool_use", "id": f"toolu_{index}_{k}", "name": call.name, "input": {}}
        blocks.append((tool, "input_json_delta", "partial_json", _arguments_text(call.arguments)))
    for i, (block, kind, key, whole) in enumerate(blocks):
        frames.append(
            (event({"type": "content_block_start", "index": i, "content_block": block}), None)
        )
        for piece in _pieces(whole, reply.chunk_chars):
            piece_delta = {"type": kind, key: piece}
            frames.append(
                (event({"type": "content_block_delta", "index": i, "delta": piece_delta}), "piece")
            )
        frames.append((event({"type": "content_block_stop", "index": i}), None))
    delta = {"stop_reason": _anthropic_stop(reply), "stop_sequence": None}
    frames.append((event({"type": "message_delta", "delta": delta, "usage": final}), "usage"))
    frames.append((event({"type": "message_stop"}), None))
    return frames


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def _error_response(
    api: Api,
    status: int,
    message: str,
    headers: dict[str, str] | None = None,
    *,
    code: str | None = None,
) -> web.Response:
    if api == "openai":
        fallback = "server_error" if status >= 500 else "invalid_request_error"
        kind = _OPENAI_ERROR_TYPES.get(status, fallback)
        body: dict[str, Any] = {"error": {"message": message, "type": kind, "code": code}}
    else:
        fallback = "api_error" if status >= 500 else "invalid_request_error"
        kind = _ANTHROPIC_ERROR_TYPES.get(status, fallback)
        body = {"type": "error", "error": {"type": kind, "message": message}}
    return web.json_response(body, status=status, headers=headers)


def _reset_connection(request: web.Request) -> web.StreamResponse:
    transport = request.transport
    if transport is not None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # A zero linger turns the close into a TCP RST: the client sees a connection reset,
            # not a tidy end of stream.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    # Nothing reaches the client any more; aiohttp just needs a response object to finish with.
    return web.Response(status=204)
