"""A real MCP server for the approval tests: a pretend shell, written with the official ``mcp``
SDK. Run it as ``python -m tests.mcp_shell_server --dir PATH`` (stdio).

Its one tool, ``run(cmd)``, runs nothing: it appends ``{"cmd": cmd}`` to ``PATH/ran.jsonl``, so
a test sees exactly the arguments a call that was approved delivered to the tool.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mcp.server.mcpserver import MCPServer


def build_server(log_dir: Path) -> MCPServer:
    server = MCPServer("shell", log_level="WARNING")

    @server.tool(description="Run a shell command (pretend: the command is only recorded).")
    def run(cmd: str) -> str:
        with (log_dir / "ran.jsonl").open("a", encoding="utf-8") as log:
            log.write(json.dumps({"cmd": cmd}) + "\n")
        return f"ran {len(cmd)} characters"

    return server


def ran(log_dir: Path) -> list[dict[str, str]]:
    """What the tool received, call by call."""
    path = log_dir / "ran.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [json.loads(line) for line in lines]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, type=Path, help="where ran.jsonl is written")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    build_server(args.dir).run()


if __name__ == "__main__":
    main()
