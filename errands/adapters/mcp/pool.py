"""A worker's MCP connections: kept open and reused across calls and tasks.

``McpPool`` holds, per configured server, connections that stay up between calls: a stdio
server's process keeps running, a Streamable HTTP server's session stays open. Two kinds:

- **shared** connections (a server whose ``session`` is ``"shared"``, and every listing): any
  call of any task takes an idle one, or opens one, and gives it back when the call ends, so one
  connection serves one call at a time;
- **sessions** (``"task"`` or ``"branch"``): one connection per ``SessionKey``, the scope that owns
  it (a task id or a branch's thread id) and the server; its calls run one after another, and it
  lives until ``close_scope`` closes it (its task or branch ended), it sits idle past the server's
  ``idle_seconds``, the bound on processes needs its place, or its process exits.

Bounds: at most ``max_processes`` stdio processes (shared and sessions together); an idle shared
connection goes first, then the least recently used idle session; a call that finds every process
busy waits for one, within its timeout. Idle connections are closed after ``idle_seconds``. A
connection whose process exited, or whose transport broke, is dropped and replaced on next use.

Listings (``list_tools``) are cached per server for ``list_ttl_seconds``; the server's
``notifications/tools/list_changed``, on any of its connections, ends the cache at once.

Failures are worded as in ``errands.adapters.mcp.client``:

- ``ConnectionError`` / ``TimeoutError``: the server could not be reached, started, or initialized,
  or did not answer within the timeout, **before** the request was sent (nothing ran): the caller
  may try again;
- a ``ToolOutcome(is_error=True)``: the tool's own failure, a JSON-RPC error answering the call,
  or the connection lost **after** the request was sent (the process exited mid-call, the stream
  ended): the tool may have run, so it is not retried; its text says what happened and, for a
  session, that the server's state is lost.

This module imports the ``mcp`` SDK (a second): only a worker that calls a server imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from errands.adapters.mcp.config import McpServerConfig, McpTool, ToolOutcome

Lost = Literal["exited", "idle", "evicted"]
"""Why a session of this worker ended without ``close_scope``: its process exited (or its
transport broke), it was idle past ``idle_seconds``, or the process bound needed its place."""


@dataclass(frozen=True)
class SessionKey:
    """Whose session: ``scope`` (a task id for ``"task"``, a thread id for ``"branch"``) and the
    server's name."""

    scope: str
    server: str


@dataclass(frozen=True)
class PoolStats:
    """What a pool holds now: for tests, benchmarks and the worker's log."""

    processes: int
    """Running stdio server processes (shared and sessions)."""
    connections: int
    """Open connections of every transport (shared and sessions)."""
    sessions: int
    """Open ``task``/``branch`` sessions."""


class McpPool:
    """Every MCP connection of one worker; use it from the worker's event loop only."""

    def __init__(self, servers: Mapping[str, McpServerConfig], *, max_processes: int = 32) -> None:
        raise NotImplementedError

    async def list_tools(self, server: str, *, timeout: float) -> list[McpTool]:
        """The server's tools that its ``tools`` setting allows, from the cache or listed now on a
        shared connection. ``ConnectionError`` / ``TimeoutError`` as above."""
        raise NotImplementedError

    async def call(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        *,
        idempotency_key: str,
        timeout: float,
        max_bytes: int | None = None,
    ) -> ToolOutcome:
        """One call on a shared connection (``client.call_tool``'s contract: the idempotency key in
        ``_meta``, ``max_bytes``, a tool the ``tools`` setting does not allow refused unsent)."""
        raise NotImplementedError

    async def session_call(
        self,
        key: SessionKey,
        tool: str,
        arguments: dict[str, Any],
        *,
        idempotency_key: str,
        timeout: float,
        max_bytes: int | None = None,
    ) -> tuple[ToolOutcome, Lost | None]:
        """One call in ``key``'s session, opened first when this worker holds none. Returns the
        outcome and, when this call had to open a new session because an earlier one of the same
        key on this worker ended without ``close_scope``, why (``Lost``); ``None`` when the call
        ran in the session that was there, or in the first one this worker opened for the key.
        ``ConnectionError`` / ``TimeoutError`` only when the session could not be opened."""
        raise NotImplementedError

    def holds(self, key: SessionKey) -> bool:
        """Whether this worker has ``key``'s session open now."""
        raise NotImplementedError

    async def close_scope(self, scope: str) -> int:
        """Close every session of ``scope`` (each server sees its session end: stdin closed and the
        process gone, or the HTTP session deleted); how many were open. Forgets the scope, so a
        later call opens a new session without reporting it lost."""
        raise NotImplementedError

    def stats(self) -> PoolStats:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Close every connection and wait for every process to exit (the worker stops)."""
        raise NotImplementedError
