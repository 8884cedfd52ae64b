"""The smallest stateful MCP server over stdio, in the standard library alone: it starts in a few
milliseconds (the SDK's servers take a second to import), so a test or a benchmark can open a
thousand sessions. It speaks newline-delimited JSON-RPC: ``initialize``, ``tools/list``,
``tools/call``, ``ping``; notifications are read and ignored. It exits when stdin ends (the
client closed the session), appending ``{"event": "closed", "pid"}`` to the ``--events`` file when
one is given (and ``started`` at start). Its tools:

- ``count``: adds one to the process's counter and answers ``{"pid": …, "count": …}``;
- ``crash``: the process exits in the middle of the call, answering nothing;
- ``flood``: writes lines that are not JSON-RPC to stdout without end, answering nothing.

``--mute-after PATH``: the first process creates PATH and serves; every later one (PATH exists)
reads its stdin and answers nothing, not even ``initialize``.

Run it as ``python tests/mcp_tiny_server.py [--events PATH] [--mute-after PATH]``.
"""

from __future__ import annotations

import json
import os
import sys

NO_ARGUMENTS = {"type": "object", "properties": {}}
TOOLS = [
    {"name": "count", "description": "Add one to the counter.", "inputSchema": NO_ARGUMENTS},
    {"name": "crash", "description": "Exit mid-call.", "inputSchema": NO_ARGUMENTS},
    {"name": "flood", "description": "Write non-protocol text.", "inputSchema": NO_ARGUMENTS},
]


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
        return {"tools": TOOLS}
    if method == "tools/call":
        params = request.get("params") or {}
        name = params.get("name") if isinstance(params, dict) else None
        if name == "crash":
            os._exit(3)
        if name == "flood":
            while True:
                sys.stdout.write("this is not JSON-RPC, " * 40 + "\n")
        counter[0] += 1
        text = json.dumps({"pid": os.getpid(), "count": counter[0]})
        return {"content": [{"type": "text", "text": text}], "isError": False}
    return {}  # ping, and anything else: an empty result


def option(name: str) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


def main() -> None:
    events = option("--events")
    event(events, "started")
    marker = option("--mute-after")
    if marker is not None and os.path.exists(marker):
        for _ in sys.stdin:
            pass  # never a word: not even to initialize
        return
    if marker is not None:
        open(marker, "w").close()
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
