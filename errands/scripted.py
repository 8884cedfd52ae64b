"""A scripted model server: real HTTP on loopback, speaking OpenAI Chat Completions and Anthropic
Messages (no streaming), so tests and the offline ``demo`` model drive the real SDK clients.

Each request is answered by the next step scripted for its model, else by the responder, else it
is recorded as unexpected and refused with HTTP 400 (non-retryable for our classifier, so a
missing script fails the test instead of looping through retries).

The server runs its own event loop in a daemon thread, so it works the same from sync test code
and from inside another asyncio loop; delays are ``asyncio.sleep`` and never block other requests.
"""

from __future__ import annotations

import asyncio
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
    def __init__(self, responder: Responder | None = None) -> None:
        self.responder = responder
        self.requests: list[RecordedRequest] = []
        self.unexpected: list[RecordedRequest] = []
        self._scripts: dict[str, deque[Step]] = {}
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
            queue = self._scripts.get(recorded.model) if isinstance(body, dict) else None
            step: Step | None = queue.popleft() if queue else None
        if not isinstance(body, dict):
            return self._refuse(recorded, "scripted model server: body is not a JSON object")
        if body.get("stream"):
            return self._refuse(recorded, "scripted model server: streaming is not scripted")
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
        usage = step.usage or _default_usage(raw, step)
        recorded.reported_usage = usage
        render = _openai_completion if api == "openai" else _anthropic_message
        return web.json_response(render(recorded, index, step, usage))

    def _refuse(self, recorded: RecordedRequest, message: str) -> web.Response:
        # 400, never 5xx: our classifier must not retry a scripting mistake.
        with self._lock:
            self.unexpected.append(recorded)
        return _error_response(recorded.api, 400, message)


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
            "function": {
                "name": call.name,
                "arguments": call.arguments
                if isinstance(call.arguments, str)
                else json.dumps(call.arguments),
            },
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
                "finish_reason": reply.finish_reason or ("tool_calls" if tool_calls else "stop"),
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        },
    }


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
        "stop_reason": reply.finish_reason or ("tool_use" if reply.calls else "end_turn"),
        "stop_sequence": None,
        # Anthropic counts cache reads apart from input; our Usage counts them inside input (the
        # OpenAI way), so the same Reply reads back as the same Usage through either API.
        "usage": {
            "input_tokens": max(0, usage.input_tokens - usage.cached_tokens),
            "output_tokens": usage.output_tokens,
            "cache_read_input_tokens": usage.cached_tokens,
            "cache_creation_input_tokens": 0,
        },
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


def _error_response(
    api: Api, status: int, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    if api == "openai":
        fallback = "server_error" if status >= 500 else "invalid_request_error"
        kind = _OPENAI_ERROR_TYPES.get(status, fallback)
        body: dict[str, Any] = {"error": {"message": message, "type": kind, "code": None}}
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
