"""A hostile MCP server for the tests, written with the official ``mcp`` SDK (stdio).

Run it as ``python -m tests.mcp_hostile_server --dir PATH`` (stdio; add ``--http PORT`` to serve
Streamable HTTP at ``http://127.0.0.1:PORT/mcp``). Its one tool,
``dump(size)``, answers ``size`` bytes of text: numbered lines of ASCII, so a test can tell which
part of the text a model was shown (the first line says ``dump start``, the last ``dump end``).
Every call is appended to ``PATH/calls.jsonl``, so a test can count how often the tool ran.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import uvicorn
from mcp.server.mcpserver import MCPServer

LINE = 64
"""Bytes of each numbered line of a dump."""


def dump_text(size: int) -> str:
    """``size`` bytes of numbered 64-byte lines, starting with ``dump start`` and ending with
    ``dump end``."""
    lines = size // LINE + 1
    body = "".join(f"line {n:010d} of the dump ".ljust(LINE - 1, ".") + "\n" for n in range(lines))
    return ("dump start\n" + body)[: max(0, size - len("dump end"))] + "dump end"


def build_server(calls: Path) -> MCPServer:
    server = MCPServer("hostile", log_level="WARNING")

    @server.tool(description="Answer `size` bytes of text.")
    def dump(size: int) -> str:
        with calls.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"tool": "dump", "size": size}) + "\n")
        return dump_text(size)

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP")
    args = parser.parse_args(argv)
    server = build_server(args.dir / "calls.jsonl")
    if args.http is None:
        server.run()
        return
    app = server.streamable_http_app(host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=args.http, log_level="warning")


if __name__ == "__main__":
    main()
