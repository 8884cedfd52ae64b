"""A real MCP server for the tests: notes in a directory, written with the official ``mcp`` SDK.

Run it as ``python -m tests.mcp_notes_server --dir PATH`` (stdio) or add ``--http PORT`` to serve
Streamable HTTP at ``http://127.0.0.1:PORT/mcp``; with ``--http``, ``--token T`` refuses every
request that lacks ``Authorization: Bearer T`` with a 401.

Tools:

- ``write(name, text, delay=0, hold=False)`` waits ``delay`` seconds (and, with ``hold``, until
  the test creates ``PATH/<name>.release``; a held call stopped by its client is appended to
  ``PATH/stopped.jsonl``), then stores ``PATH/<name>.txt`` and
  appends ``{"name", "idempotency_key"}`` to ``PATH/writes.jsonl``; the key is the
  ``errands/idempotency_key`` entry of the request's ``_meta`` (null when absent), so a test can
  see exactly what the client sent. A call whose key was written before writes nothing again
  and answers as the first did: the side effect happens once however often errands retries.
  Every call, repeated or not, is appended to ``PATH/calls.jsonl``.
- ``read(name)`` answers the note's text (a test's way to a big result).
- ``search(query)`` names the notes whose text contains the query, one per line.
- ``fail()`` always answers with a tool error result (``isError``).
- ``sleep(seconds)`` sleeps, for timeout tests.

Two behaviours go beyond the SDK's defaults, so the tests can exercise the client's paths: a call
to a tool the server does not have is answered with a JSON-RPC error (-32602, "Unknown tool"), as
the MCP specification prescribes, rather than an error result; and ``tools/list`` is paginated,
``PAGE_SIZE`` tools a page, so a client that ignores ``nextCursor`` sees only the first page.
"""

from __future__ import annotations

import argparse
import hmac
import json
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, TextContent

IDEMPOTENCY_META_KEY = "errands/idempotency_key"
"""The ``_meta`` key errands puts the idempotency key under (``errands.adapters.mcp.config``)."""

TOOLS = ("write", "read", "search", "fail", "sleep")
PAGE_SIZE = 2
"""Tools per ``tools/list`` page; the cursor is the offset of the next page."""


class UnknownToolsAreProtocolErrors:
    """Middleware: ``tools/call`` for a tool the server lacks fails with JSON-RPC -32602."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method == "tools/call":
            name = (ctx.params or {}).get("name")
            if name not in TOOLS:
                raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {name}")
        return await call_next(ctx)


class PaginatedToolList:
    """Middleware: ``tools/list`` answers ``PAGE_SIZE`` tools at a time, with ``nextCursor``.

    It rewrites the wire form, the dict the SDK hands back up the middleware chain.
    """

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method != "tools/list" or not isinstance(result, dict):
            return result
        cursor = (ctx.params or {}).get("cursor") or "0"
        if not cursor.isdigit():
            raise MCPError(code=INVALID_PARAMS, message=f"Invalid cursor: {cursor}")
        start = int(cursor)
        end = start + PAGE_SIZE
        page = {**result, "tools": result["tools"][start:end]}
        if end < len(result["tools"]):
            page["nextCursor"] = str(end)
        return page


def append(log: Path, record: dict[str, Any]) -> None:
    with log.open("a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


def logged(log: Path) -> list[dict[str, Any]]:
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return [json.loads(line) for line in lines]


def build_server(notes: Path) -> MCPServer:
    """The notes server over the directory ``notes``."""
    server = MCPServer(
        "notes",
        log_level="WARNING",
        middleware=[UnknownToolsAreProtocolErrors(), PaginatedToolList()],
    )

    @server.tool(description="Write a note called `name` with the given text.")
    async def write(
        name: str, text: str, ctx: Context, delay: float = 0, hold: bool = False
    ) -> str:
        if not name or "/" in name or "\\" in name or name.startswith("."):
            raise ValueError(f"a note name is a plain file name, not {name!r}")
        meta = ctx.request_context.meta or {}
        record = {"name": name, "idempotency_key": meta.get(IDEMPOTENCY_META_KEY)}
        append(notes / "calls.jsonl", record)
        await anyio.sleep(delay)
        try:
            while hold and not (notes / f"{name}.release").exists():
                await anyio.sleep(0.02)
        except anyio.get_cancelled_exc_class():
            append(notes / "stopped.jsonl", record)
            raise
        if record["idempotency_key"] is None or record not in logged(notes / "writes.jsonl"):
            (notes / f"{name}.txt").write_text(text, encoding="utf-8")
            append(notes / "writes.jsonl", record)
        return f"wrote note {name}"

    @server.tool(description="The text of the note called `name`.")
    def read(name: str) -> str:
        path = notes / f"{name}.txt"
        if "/" in name or not path.is_file():
            raise ValueError(f"there is no note called {name!r}")
        return path.read_text(encoding="utf-8")

    @server.tool(description="Names of the notes whose text contains `query`, one per line.")
    def search(query: str) -> str:
        names = [
            path.stem
            for path in sorted(notes.glob("*.txt"))
            if query in path.read_text(encoding="utf-8")
        ]
        return "\n".join(names) if names else "no notes match"

    @server.tool(description="Always fails, with a tool error result.")
    def fail() -> CallToolResult:
        return CallToolResult(
            content=[TextContent(type="text", text="the fail tool always fails")], is_error=True
        )

    @server.tool(description="Sleep for `seconds` seconds.")
    async def sleep(seconds: float) -> str:
        await anyio.sleep(seconds)
        return f"slept {seconds} s"

    return server


def require_bearer(app: Any, token: str) -> Any:
    """``app`` behind a check of ``Authorization: Bearer <token>``: anything else gets a 401."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"text/plain"),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": b"missing or wrong token\n"})
                return
        await app(scope, receive, send)

    return guarded


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, type=Path, help="the directory of the notes")
    parser.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP")
    parser.add_argument("--token", help="with --http: the bearer token every request needs")
    args = parser.parse_args(argv)
    if args.token is not None and args.http is None:
        parser.error("--token needs --http")
    args.dir.mkdir(parents=True, exist_ok=True)
    server = build_server(args.dir)
    if args.http is None:
        server.run()
        return
    app: Any = server.streamable_http_app(host="127.0.0.1")
    if args.token is not None:
        app = require_bearer(app, args.token)
    uvicorn.run(app, host="127.0.0.1", port=args.http, log_level="warning")


if __name__ == "__main__":
    main()
