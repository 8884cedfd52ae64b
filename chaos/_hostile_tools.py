"""The hostile-input scenario's MCP server (stdio, the ``mcp`` SDK): tools whose results are
what a careless or malicious tool sends back.

- ``blob(size)``: ``size`` characters of text (a 50 MB result, say);
- ``dirty()``: text with a NUL and terminal escape sequences in it (a lone surrogate cannot
  leave this SDK: it refuses to encode one; the model's replies carry that case);
- ``run(cmd)``: the tool a person must approve; it appends what it received to
  ``$HOSTILE_LOG`` (one JSON line per call), so the scenario can check that the tool got exactly
  the arguments the person approved, and ran once.

Run as ``python -m chaos._hostile_tools``.
"""

from __future__ import annotations

import json
import os

from mcp.server.mcpserver import MCPServer

DIRTY = "before\x00after \x1b[2J\x1b]52;c;ZXZpbA==\x07 end"


def blob(size: int) -> str:
    """``size`` characters of text, in lines, so a preview has a head and a tail to show."""
    line = "0123456789 the quick brown fox jumps over the lazy dog 0123456789\n"
    whole, rest = divmod(size, len(line))
    return line * whole + "x" * rest


def dirty() -> str:
    """Text no store can hold as it is, and no terminal should obey."""
    return DIRTY


def run(cmd: str) -> str:
    """Run a shell command (it only records what it was given)."""
    with open(os.environ["HOSTILE_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"cmd": cmd}) + "\n")
    return f"ran {len(cmd)} characters"


def build_server() -> MCPServer:
    server = MCPServer("hostile", log_level="WARNING")
    server.tool(description="Return size characters of text.")(blob)
    server.tool(description="Return a short text with control characters in it.")(dirty)
    server.tool(description="Run a shell command.")(run)
    return server


if __name__ == "__main__":
    build_server().run()
