"""A stateful MCP server for the pool tests, written with the official ``mcp`` SDK.

Run it as ``python -m tests.mcp_counter_server`` (stdio; add ``--http PORT`` to serve Streamable
HTTP at ``http://127.0.0.1:PORT/mcp``). Its state is a counter and its process id, so a test can
tell whether two calls reached the same process. Tools:

- ``count()``: adds one to the process's counter and answers ``{"pid": …, "count": …}`` (JSON);
- ``crash()``: the process exits at once (``os._exit(3)``) in the middle of the call;
- ``hang()``: never answers;
- ``flood()``: writes lines that are not MCP to stdout (the protocol's stream) without end,
  never answering;
- ``change_tools()``: adds a tool ``extra`` and sends ``notifications/tools/list_changed``.

``--events PATH`` appends one JSON line per event to PATH: ``{"event": "started", "pid"}`` at
start; ``{"event": "closed", "pid"}`` when stdin reaches its end (stdio: the client closed the
session); ``{"event": "list", "pid"}`` for every ``tools/list``; ``{"event": "call", "pid",
"count", "key", "session"}`` for every ``count``: ``key`` is the ``errands/idempotency_key`` of
the request's ``_meta`` (null when absent), ``session`` the ``mcp-session-id`` header over HTTP
(null over stdio), ``port`` the client's end of the TCP connection the request came on (null over
stdio).

``--linger SECONDS`` (HTTP): each POST's event stream stays open that long after its answer,
where the SDK's server ends it at once.

``--mode never-initialize``: the process reads stdin and answers nothing, not even
``initialize``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

IDEMPOTENCY_META_KEY = "errands/idempotency_key"
"""The ``_meta`` key errands puts the idempotency key under (``errands.adapters.mcp.config``)."""


class Events:
    """The ``--events`` file (or nowhere): one JSON line per event, with this process's id."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def add(self, event: str, **fields: Any) -> None:
        if self.path is None:
            return
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"event": event, "pid": os.getpid(), **fields}) + "\n")


def events_in(path: Path) -> list[dict[str, Any]]:
    """The events written to ``path`` so far (a test reads them)."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.strip()]


class CountListings:
    """Middleware: every ``tools/list`` is an event."""

    def __init__(self, events: Events) -> None:
        self.events = events

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method == "tools/list":
            self.events.add("list")
        return await call_next(ctx)


def build_server(events: Events, wire: int) -> MCPServer:
    """The counter server; ``flood`` writes to the file descriptor ``wire``, the protocol's own
    stdout (the SDK diverts fd 1 to stderr while it serves stdio)."""
    server = MCPServer("counter", log_level="WARNING", middleware=[CountListings(events)])
    counter = 0

    @server.tool(description="Add one to this process's counter; answers its pid and the count.")
    def count(ctx: Context) -> str:
        nonlocal counter
        counter += 1
        meta = ctx.request_context.meta or {}
        request = ctx.request_context.request
        headers = getattr(request, "headers", None)
        session = headers.get("mcp-session-id") if headers is not None else None
        client = getattr(request, "client", None)
        key = meta.get(IDEMPOTENCY_META_KEY)
        events.add("call", count=counter, key=key, session=session, port=client and client.port)
        return json.dumps({"pid": os.getpid(), "count": counter})

    @server.tool(description="Exit the process in the middle of the call.")
    def crash() -> str:
        os._exit(3)

    @server.tool(description="Never answer.")
    async def hang() -> str:
        await anyio.Event().wait()
        return "never"

    @server.tool(description="Write text that is not MCP to stdout without end.")
    async def flood() -> str:
        line = b"this is not MCP, " * 60 + b"\n"
        while True:
            os.write(wire, line * 16)
            await anyio.sleep(0)

    @server.tool(description="Add a tool `extra` and say that the tools changed.")
    async def change_tools(ctx: Context) -> str:
        def extra() -> str:
            return "extra"

        server.add_tool(extra, name="extra", description="A tool added by change_tools.")
        await ctx.session.send_tool_list_changed()
        return "added extra"

    return server


def lingering(app: ASGIApp, seconds: float) -> ASGIApp:
    """``app`` with each event stream it answers held open ``seconds`` after its last event."""

    async def held(scope: Scope, receive: Receive, send: Send) -> None:
        streaming = False

        async def send_late(message: Message) -> None:
            nonlocal streaming
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", []))
                streaming = headers.get(b"content-type", b"").startswith(b"text/event-stream")
            elif streaming and message["type"] == "http.response.body":
                if not message.get("more_body", False):
                    await anyio.sleep(seconds)
            await send(message)

        await app(scope, receive, send_late)

    return held


def never_initialize() -> None:
    """Read stdin to its end and answer nothing."""
    while sys.stdin.buffer.read(65536):
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=Path, help="append lifecycle events to this file")
    parser.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP")
    parser.add_argument("--mode", choices=["normal", "never-initialize"], default="normal")
    parser.add_argument("--linger", type=float, default=0.0, metavar="SECONDS")
    args = parser.parse_args(argv)
    events = Events(args.events)
    events.add("started")
    if args.mode == "never-initialize":
        never_initialize()
        events.add("closed")
        return
    server = build_server(events, wire=os.dup(sys.stdout.fileno()))
    if args.http is None:
        server.run()
        events.add("closed")
        return
    app = server.streamable_http_app(host="127.0.0.1")
    served = lingering(app, args.linger) if args.linger else app
    uvicorn.run(served, host="127.0.0.1", port=args.http, log_level="warning")
    events.add("closed")


if __name__ == "__main__":
    main()
