"""The bundled almanac MCP server (``errands.adapters.demo_tools``) over Streamable HTTP, for B1.

``python -m bench._mcp_http PORT`` serves it at ``http://127.0.0.1:PORT/mcp``: the same tool B1
calls over stdio, in a process that stays up, so a call costs a request rather than a start.
"""

from __future__ import annotations

import sys

import uvicorn

from errands.adapters.demo_tools import build_server


def main(argv: list[str]) -> None:
    port = int(argv[0])
    app = build_server().streamable_http_app(host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
