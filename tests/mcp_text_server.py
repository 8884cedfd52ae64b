"""An MCP server (stdio, the ``mcp`` SDK) whose one tool, ``nul_text``, answers with a NUL in its
text and appends a line to the file named on its command line for every call, so a test can
count how often it ran. (A lone surrogate cannot leave this SDK: it refuses to encode one; the
text-rule tests send that case through a Python tool.)

Run as ``python -m tests.mcp_text_server CALLS_FILE``.
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

NUL_TEXT = "before\x00after"


def main(calls: str) -> None:
    server = MCPServer("text", log_level="WARNING")

    @server.tool(description="Return a short text with a NUL character in it.")
    def nul_text() -> str:
        with open(calls, "a", encoding="utf-8") as log:
            log.write("called\n")
        return NUL_TEXT

    server.run()


if __name__ == "__main__":
    main(sys.argv[1])
