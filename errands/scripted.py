"""A scripted model server: real HTTP on loopback, speaking OpenAI Chat Completions and Anthropic
Messages, plain or streamed, so tests and the offline ``demo`` model drive the real SDK clients.

Each request is answered by the next step scripted for its model, else by the responder, else it
is recorded as unexpected and refused with HTTP 400 (non-retryable for our classifier, so a
missing script fails the test instead of looping through retries).

Two behaviours of real servers can be switched on: a model whose server refuses
``tool_choice: "required"`` (``refuse_required_tool_choice``), and a prompt cache
(``prompt_cache``) that reports, deterministically, the prefixes it has seen before as cache reads
(and, on Anthropic, the prefixes up to a ``cache_control`` breakpoint it had not seen as writes).

A request with ``"stream": true`` answered by a ``Reply`` gets the server-sent events each API
sends, which the SDKs accumulate into the same result as the plain response: text and tool
arguments go out in pieces of ``chunk_chars``, ``chunk_delay`` apart, and ``fail_after`` pieces
can end the stream with the API's mid-stream error. ``Fail`` and ``Reset`` answer before any
stream starts, as for a plain request.

The server runs its own event loop in a daemon thread, so it works the same from sync test code
and from inside another asyncio loop; delays are ``asyncio.sleep`` and never block other requests.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from errands.contracts import Usage

Api = Literal["openai", "anthropic"]


@dataclass
class Call:
    """A tool call to answer with. A ``str`` ``arguments`` is sent verbatim (malformed JSON too)."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)


@dataclass
class Reply:
    text: str = ""
    calls: list[Call] = field(default_factory=list)
    usage: Usage | None = None
    """``None``: derived from the request, so replies stay deterministic without bookkeeping."""
    finish_reason: str | None = None
    """``None``: ``tool_calls``/``tool_use`` when there are calls, else ``stop``/``end_turn``."""
    delay: float = 0.0
    """Seconds before the response (streamed: its first event) starts."""
    chunk_chars: int = 40
    """Streamed: text and each tool call's arguments go out in pieces of this many characters."""
    chunk_delay: float = 0.0
    """Streamed: seconds between one piece of text or arguments and the next."""
    fail_after: int | None = None
    """Streamed: once this many pieces are out (all of them, if there are fewer), the API's
    mid-stream error event ends the stream in place of the rest; no usage is reported."""
    fail_message: str = "scripted failure in mid-stream"

    def __post_init__(self) -> None:
        if self.chunk_chars < 1:
            raise ValueError(f"Reply.chunk_chars must be at least 1, got {self.chunk_chars}")


@dataclass
class Fail:
    """Answer with an HTTP error status and a provider-shaped JSON error body."""

    status: int
    message: str = "scripted failure"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Reset:
    """Drop the TCP connection with a reset instead of answering."""

    delay: float = 0.0


@dataclass
class RecordedRequest:
    api: Api
    model: str
    body: dict[str, Any]
    raw: bytes
    headers: dict[str, str]
    received_at: float
    answered: Step | None = None
    """The step actually played (a callable step is replaced by what it returned)."""
    reported_usage: Usage | None = None
    """The usage put in the response, in our neutral terms; ``None`` for failures and resets."""


REQUIRED_REFUSAL = 'tool_choice "required" is not supported; use "auto" or "none"'
"""What a server that takes only ``auto``/``none`` answers (vLLM and others say much the same)."""
CACHE_LOOKBACK = 20
"""Anthropic looks for an earlier cache entry at most this many blocks before a breakpoint."""

Step = Reply | Fail | Reset | Callable[[RecordedRequest], "Reply | Fail | Reset"]
Responder = Callable[[RecordedRequest], "Step | None"]
"""Answers what the script does not; returning ``None`` declines (the call is unexpected)."""

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


class ScriptedModelServer:
    def __init__(self, responder: Responder | None = None, *, prompt_cache: bool = False) -> None:
        self.responder = responder
        self.prompt_cache = prompt_cache
        """Give replies without a scripted usage cache counts. OpenAI: the longest prompt prefix
        an earlier answered request had is read. Anthropic: the longest prefix an earlier one
        wrote at a breakpoint is read, and the rest up to this request's last breakpoint written."""
        self.requests: list[RecordedRequest] = []
        self.unexpected: list[RecordedRequest] = []
        self._scripts: dict[str, deque[Step]] = {}
        self._refusals: dict[str, Fail] = {}
        self._windows: dict[str, int] = {}
        self.too_long: list[RecordedRequest] = []
        """Requests refused as longer than their model's window (``limit_context``)."""
        self._seen_prefixes: set[str] = set()
        # The handlers run on the server thread while tests script and inspect from theirs.
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._port = 0

    # -- scripting and inspection -------------------------------------------------------------

    def script(self, model: str, *steps: Step) -> None:
        with self._lock:
            self._scripts.setdefault(model, deque()).extend(steps)

    def refuse_required_tool_choice(
        self, model: str, status: int = 400, message: str = REQUIRED_REFUSAL
    ) -> None:
        """From now on, answer every request for ``model`` that asks for ``tool_choice:
        "required"`` (Anthropic: ``any``) with ``status``, as servers that take only
        ``auto``/``none`` do; such a refusal plays no scripted step."""
        with self._lock:
            self._refusals[model] = Fail(status, message)

    def limit_context(self, model: str, window: int) -> None:
        """From now on, refuse every request for ``model`` whose input (counted as ``usage``
        counts it, four bytes a token) and requested output together pass ``window`` tokens,
        with the body the provider sends (OpenAI ``context_length_exceeded``, Anthropic "prompt
        is too long"); such a refusal plays no scripted step and is kept in ``too_long``."""
        with self._lock:
            self._windows[model] = window

    def _too_long(self, recorded: RecordedRequest) -> web.Response | None:
        window = self._windows.get(recorded.model)
        if window is None:
            return None
        body = recorded.body
        output = body.get("max_completion_tokens") or body.get("max_tokens") or 0
        tokens = len(recorded.raw) // 4
        if tokens + output <= window:
            return None
        self.too_long.append(recorded)
        if recorded.api == "openai":
            message = (
                f"This model's maximum context length is {window} tokens. However, you requested "
                f"{tokens + output} tokens ({tokens} in the messages, {output} in the "
                "completion). Please reduce the length of the messages or completion."
            )
            return _error_response("openai", 400, message, code="context_length_exceeded")
        return _error_response(
            "anthropic", 400, f"prompt is too long: {tokens + output} tokens > {window} maximum"
        )

    def requests_for(self, model: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.model == model]

    def pending(self) -> dict[str, int]:
        with self._lock:
            return {model: len(steps) for model, steps in self._scripts.items() if steps}

    def assert_done(self) -> None:
        with self._lock:
            position = {id(r): i for i, r in enumerate(self.requests)}
            problems = [
                f"unexpected {r.api} call for model {r.model!r} (request #{position.get(id(r))})"
                for r in self.unexpected
            ]
        problems += [
            f"{count} scripted step(s) never requested for model {model!r}"
            for model, count in self.pending().items()
        ]
        if problems:
            raise AssertionError("scripted model server: " + "; ".join(problems))

    def reset(self) -> None:
        with self._lock:
            self._scripts.clear()
            self.requests.clear()
            self.unexpected.clear()
            self._refusals.clear()
            self._windows.clear()
            self.too_long.clear()
            self._seen_prefixes.clear()

    @property
    def openai_base_url(self) -> str:
        return f"http://127.0.0.1:{self._require_port()}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"http://127.0.0.1:{self._require_port()}"

    def _require_port(self) -> int:
        if not self._port:
            raise RuntimeError("scripted model server is not running: call start() first")
        return self._port

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> ScriptedModelServer:
        if self._thread is not None:
            return self
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._open(sock))
            except Exception as exc:  # noqa: BLE001 - handed to start(), not lost in the thread
                failure.append(exc)
                sock.close()
                loop.close()
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=serve, name="scripted-model-server", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = self._loop = None
            self._port = 0
            raise RuntimeError("scripted model server failed to start") from failure[0]
        return self

    def stop(self) -> None:
        loop, thread, runner = self._loop, self._thread, self._runner
        if loop is None or thread is None:
            return
        if runner is not None:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._loop = self._thread = self._runner = None
        self._port = 0

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def _open(self, sock: socket.socket) -> None:
        app = web.Application(
            client_max_size=256 * 1024 * 1024
        )  # real providers take large contexts
        app.router.add_post("/v1/chat/completions", self._handle_openai)
        app.router.add_post("/v1/messages", self._handle_anthropic)
        # Cancellation on client disconnect lets a timed-out delayed reply end at once instead of
        # holding shutdown until its sleep is over.
        runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            handler_cancellation=True,
            shutdown_timeout=1.0,
        )
        await runner.setup()
        await web.SockSite(runner, sock).start()
        self._runner = runner

    # -- request handling ----------------------------------------------------------------------

    async def _handle_openai(self, request: web.Request) -> web.StreamResponse:
        return await self._handle("openai", request)

    async def _handle_anthropic(self, request: web.Request) -> web.StreamResponse:
        return await self._handle("anthropic", request)

    async def _handle(self, api: Api, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        recorded = RecordedRequest(
            api=api,
            model=str(body.get("model", "")) if isinstance(body, dict) else "",
            body=body if isinstance(body, dict) else {},
            raw=raw,
            headers=dict(request.headers),
            received_at=time.time(),
        )
        with self._lock:
            index = len(self.requests)
            self.requests.append(recorded)
            refusal = self._refusals.get(recorded.model) if _asks_required(api, body) else None
            too_long = self._too_long(recorded) if isinstance(body, dict) else None
            queue = self._scripts.get(recorded.model) if isinstance(body, dict) else None
            playing = refusal is None and too_long is None
            step: Step | None = queue.popleft() if queue and playing else None
        if too_long is not None:
            return too_long
        if refusal is not None:
            recorded.answered = refusal
            return _error_response(api, refusal.status, refusal.message)
        if not isinstance(body, dict):
            return self._refuse(recorded, "scripted model server: body is not a JSON object")
        try:
            if step is None and self.responder is not None:
                step = self.responder(recorded)
            while callable(step):
                step = step(recorded)
        except Exception as exc:  # noqa: BLE001 - a broken script fails the test, not an outage
            return self._refuse(recorded, f"scripted model server: a step raised {exc!r}")
        if step is None:
            return self._refuse(
                recorded,
                f"scripted model server: unexpected call for model {recorded.model} "
                "(no scripted step left)",
            )
        if not isinstance(step, Reply | Fail | Reset):
            return self._refuse(recorded, f"scripted model server: a step returned {step!r}")
        recorded.answered = step
        if step.delay:
            await asyncio.sleep(step.delay)
        if isinstance(step, Fail):
            return _error_response(api, step.status, step.message, step.headers)
        if isinstance(step, Reset):
            return _reset_connection(request)
        usage = self._usage(recorded, step)
        if body.get("stream"):
            return await _stream(request, recorded, index, step, usage)
        recorded.reported_usage = usage
        render = _openai_completion if api == "openai" else _anthropic_message
        return web.json_response(render(recorded, index, step, usage))

    def _usage(self, recorded: RecordedRequest, reply: Reply) -> Usage:
        usage = reply.usage or _default_usage(recorded.raw, reply)
        if not self.prompt_cache:
            return usage
        blocks, marked = _prompt_blocks(recorded.api, recorded.body)
        digests, ends = _prefixes(recorded.api, blocks)
        with self._lock:
            seen = self._seen_prefixes
            if recorded.api == "openai":
                read = max((ends[i] for i, d in enumerate(digests) if d in seen), default=0)
                upto = read
                seen.update(digests)
            else:
                read = max((_cache_hit(b, digests, ends, seen) for b in marked), default=0)
                upto = max(read, ends[max(marked)]) if marked else read
                seen.update(digests[b] for b in marked)
        if reply.usage is not None:
            return usage
        # Four bytes a token, as _default_usage counts.
        cached = min(read // 4, usage.input_tokens)
        write = min(upto // 4 - read // 4, usage.input_tokens - cached)
        return usage.model_copy(update={"cached_tokens": cached, "cache_write_tokens": write})

    def _refuse(self, recorded: RecordedRequest, message: str) -> web.Response:
        # 400, never 5xx: our classifier must not retry a scripting mistake.
        with self._lock:
            self.unexpected.append(recorded)
        return _error_response(recorded.api, 400, message)


def _asks_required(api: Api, body: Any) -> bool:
    if not isinstance(body, dict):
        return False
    wanted = "required" if api == "openai" else {"type": "any"}
    return bool(body.get("tools")) and body.get("tool_choice") == wanted


def _prompt_blocks(api: Api, body: dict[str, Any]) -> tuple[list[bytes], list[int]]:
    """The prompt in the order providers cache it, one block at a time without its
    ``cache_control`` marker (a marker says where to cache, not what), and the marked ones."""
    blocks: list[bytes] = []
    marked: list[int] = []

    def add(value: Any) -> None:
        if isinstance(value, dict) and "cache_control" in value:
            marked.append(len(blocks))
            value = {k: v for k, v in value.items() if k != "cache_control"}
        blocks.append(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())

    if api == "openai":
        if body.get("tools"):
            add({"tools": body["tools"]})
        for message in body.get("messages") or []:
            add(message)
        return blocks, marked
    for tool in body.get("tools") or []:
        add(tool)
    for block in _content(body.get("system")):
        add(block)
    for turn in body.get("messages") or []:
        for block in _content(turn.get("content") if isinstance(turn, dict) else None):
            add({"role": turn.get("role"), **block})
    return blocks, marked


def _content(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    return [b for b in value if isinstance(b, dict)] if isinstance(value, list) else []


def _prefixes(api: Api, blocks: list[bytes]) -> tuple[list[str], list[int]]:
    """A digest and the length in bytes of each prefix that ends after a block."""
    running = hashlib.sha256(api.encode())
    digests: list[str] = []
    ends: list[int] = []
    for block in blocks:
        running.update(block + b"\n")
        digests.append(running.copy().hexdigest())
        ends.append((ends[-1] if ends else 0) + len(block) + 1)
    return digests, ends


def _cache_hit(breakpoint: int, digests: list[str], ends: list[int], seen: set[str]) -> int:
    """Bytes read from the cache for a breakpoint: the longest earlier entry within the
    look-back window, as Anthropic finds it."""
    for i in range(breakpoint, max(-1, breakpoint - CACHE_LOOKBACK), -1):
        if digests[i] in seen:
            return ends[i]
    return 0


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


def _anthropic_input(arguments: dict[str, Any] | str) -> Any:
    if not isinstance(arguments, str):
        return arguments
    try:
        parsed = json.loads(arguments)
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
