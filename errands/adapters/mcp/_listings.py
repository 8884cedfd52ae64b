"""Each MCP server's tool list as a worker last listed it: kept for the server's
``list_ttl_seconds`` (0: never kept) and forgotten at its ``notifications/tools/list_changed``,
which also makes a listing that was under way when it came unfit to keep."""

from __future__ import annotations

from errands.adapters.mcp.config import McpTool


class Listings:
    """Times are the event loop's (``loop.time()``); use it from the loop only."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[float, list[McpTool]]] = {}  # until when, what
        self._epoch: dict[str, int] = {}  # one more at each tools/list_changed

    def get(self, server: str, now: float) -> list[McpTool] | None:
        """The server's tools while they are held (a list of the caller's own), else None."""
        held = self._held.get(server)
        return list(held[1]) if held is not None and held[0] > now else None

    def epoch(self, server: str) -> int:
        """Where the server's changes stand as a listing starts: ``keep`` takes it back."""
        return self._epoch.get(server, 0)

    def keep(
        self, server: str, tools: list[McpTool], *, ttl: float, since: float, epoch: int
    ) -> None:
        """Hold a listing started at ``since`` for ``ttl`` seconds, unless the server said its
        tools changed after it started."""
        if ttl > 0 and self._epoch.get(server, 0) == epoch:
            self._held[server] = (since + ttl, list(tools))

    def changed(self, server: str) -> None:
        """The server said its tools changed: what is held, or being listed, is out of date."""
        self._held.pop(server, None)
        self._epoch[server] = self._epoch.get(server, 0) + 1
