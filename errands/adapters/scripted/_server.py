"""``ScriptedModelServer``: the HTTP server on loopback, its thread and event loop, the scripts
it plays and the requests it records, and the prompt cache that turns prefixes it has seen into
cache reads and writes in the usage it reports."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
import time
from collections import deque
from typing import Any

from aiohttp import web

from errands.adapters.scripted._steps import (
    CACHE_LOOKBACK,
    REQUIRED_REFUSAL,
    Api,
    Fail,
    RecordedRequest,
    Reply,
    Reset,
    Responder,
    Step,
)
from errands.adapters.scripted._wire import (
    _anthropic_message,
    _default_usage,
    _error_response,
    _openai_completion,
    _reset_connection,
    _stream,
    wire_json,
)
from errands.contracts.messages import Usage


class ScriptedModelServer:
    def __init__(
        self,
        responder: Responder | None = None,
        *,
        prompt_cache: bool = False,
        keep_requests: int | None = None,
    ) -> None:
        self.responder = responder
        self.keep_requests = keep_requests
        """How many of the latest requests ``requests``, ``unexpected`` and ``too_long`` keep;
        ``None`` keeps all, as tests inspect them. A long-lived server (the ``demo`` model in a
        worker) keeps a few, or its memory grows with every request it answers."""
        self.received = 0
        """Requests received since the start (or the last ``reset``), kept or not."""
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
        self._forget(self.too_long)
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
            self.received = 0

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
            index = self.received
            self.received += 1
            self.requests.append(recorded)
            self._forget(self.requests)
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
        if step.hold is not None:
            await step.hold.wait(recorded)
        if isinstance(step, Fail):
            return _error_response(api, step.status, step.message, step.headers)
        if isinstance(step, Reset):
            return _reset_connection(request)
        usage = self._usage(recorded, step)
        if body.get("stream"):
            return await _stream(request, recorded, index, step, usage)
        recorded.reported_usage = usage
        render = _openai_completion if api == "openai" else _anthropic_message
        return web.json_response(render(recorded, index, step, usage), dumps=wire_json)

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
            self._forget(self.unexpected)
        return _error_response(recorded.api, 400, message)

    def _forget(self, kept: list[RecordedRequest]) -> None:
        """Drop all but the latest ``keep_requests`` (called with the lock held)."""
        if self.keep_requests is not None and len(kept) > self.keep_requests:
            del kept[: len(kept) - self.keep_requests]


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
