"""The smallest stateful MCP server over stdio, in the standard library alone: it starts in a few
milliseconds (the SDK's servers take a second to import), so a test or a benchmark can open a
thousand sessions. Its one tool, ``count``, adds one to the process's counter and answers
``{"pid": …, "count": …}``. It speaks newline-delimited JSON-RPC: ``initialize``,
``tools/list``, ``tools/call``, ``ping``; notifications are read and ignored. It exits when stdin
ends (the client closed the session), appending ``{"event": "closed", "pid"}`` to the ``--events``
file when one is given (and ``started`` at start).

Run it as ``python tests/mcp_tiny_server.py [--events PATH]``.
"""

from __future__ import annotations

import json
import os
import sys

TOOL = {
    "name": "count",
    "description": "Add one to this process's counter; answers its pid and the count.",
    "inputSchema": {"type": "object", "properties": {}},
}


def event(path: str | None, name: str) -> None:
    if path is not None:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"event": name, "pid": os.getpid()}) + "\n")


def answer(request: dict[str, object], counter: list[int]) -> dict[str, object] | None:
    """The result of one request (None for a notification, which gets no answer)."""
    method = request.get("method")
    if "id" not in request:
        return None
    if method == "initialize":
        params = request.get("params") or {}
        version = params.get("protocolVersion", "2025-06-18") if isinstance(params, dict) else ""
        return {
            "protocolVersion": version,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "tiny", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": [TOOL]}
    if method == "tools/call":
        counter[0] += 1
        text = json.dumps({"pid": os.getpid(), "count": counter[0]})
        return {"content": [{"type": "text", "text": text}], "isError": False}
    return {}  # ping, and anything else: an empty result


def main() -> None:
    events = sys.argv[sys.argv.index("--events") + 1] if "--events" in sys.argv else None
    event(events, "started")
    counter = [0]
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        result = answer(request, counter)
        if result is not None:
            reply = {"jsonrpc": "2.0", "id": request["id"], "result": result}
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    event(events, "closed")


if __name__ == "__main__":
    main()
