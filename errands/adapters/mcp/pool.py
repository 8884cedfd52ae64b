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
``notifications/tools/list_changed``, on any of its connections, ends the cache at once
(``errands.adapters.mcp._listings``).

Failures are worded as in ``errands.adapters.mcp.client``:

- ``ConnectionError`` / ``TimeoutError``: the server could not be reached, started, or initialized,
  or did not answer within the timeout, **before** the request was sent (nothing ran): the caller
  may try again;
- a ``ToolOutcome(is_error=True)``: the tool's own failure, a JSON-RPC error answering the call,
  or the connection lost **after** the request was sent (the process exited mid-call, the stream
  ended): the tool may have run, so it is not retried; its text says what happened and, for a
  session, that the server's state is lost.

A call that does not answer within its timeout raises ``TimeoutError`` and its connection is
dropped, its process killed; how each connection reads, bounds and reports a failure is
``errands.adapters.mcp._connection``. This module imports the ``mcp`` SDK (a second): only a
worker that calls a server imports it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from mcp.client.session import ClientSession

from errands.adapters.mcp import client
from errands.adapters.mcp._connection import STDIO_LINE, Connection, Request
from errands.adapters.mcp._http import Exchange
from errands.adapters.mcp._listings import Listings
from errands.adapters.mcp.client import broken_outcome, server_label
from errands.adapters.mcp.config import SETTING, McpServerConfig, McpTool, ToolOutcome
from errands.errors import McpBroken, McpUnsent

T = TypeVar("T")
Lost = Literal["exited", "idle", "evicted"]
"""Why a session of this worker ended without ``close_scope``: its process exited (or its
transport broke), it was idle past ``idle_seconds``, or the process bound needed its place."""

MAX_PROCESSES_SETTING = "ERRANDS_MCP_MAX_PROCESSES"


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


@dataclass(eq=False)
class _Session:
    """A key's session: its connection (None between two), and its calls, one at a time."""

    connection: Connection | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
    """Calls running or waiting for the lock: a session with users is never evicted."""


class McpPool:
    """Every MCP connection of one worker; use it from the worker's event loop only."""

    def __init__(self, servers: Mapping[str, McpServerConfig], *, max_processes: int = 32) -> None:
        self._servers, self._max = dict(servers), max_processes
        self._open: set[Connection] = set()
        """Every connection opening or open (a retired one leaves at once)."""
        self._idle: dict[str, list[Connection]] = {}
        """Idle shared connections per server, the most recently used last."""
        self._sessions: dict[SessionKey, _Session] = {}
        self._lost: dict[SessionKey, Lost] = {}
        self._listings = Listings()
        self._holding: set[Connection] = set()
        """Every connection whose task has not ended yet, open or closing: ``aclose`` waits."""
        self._changed, self._wake = asyncio.Event(), asyncio.Event()  # waiters, the reaper
        self._reaper: asyncio.Task[None] | None = None

    # -- the public calls ------------------------------------------------------------------------

    async def list_tools(self, server: str, *, timeout: float) -> list[McpTool]:
        """The server's tools that its ``tools`` setting allows, from the cache or listed now on a
        shared connection. ``ConnectionError`` / ``TimeoutError`` as above."""
        config = self._config(server)
        now = asyncio.get_running_loop().time()
        held = self._listings.get(server, now)
        if held is not None:
            return held
        epoch = self._listings.epoch(server)
        try:
            listed = await self._shared(self._request(server, client.every_page, timeout, None))
        except McpBroken as broken:  # a listing changes nothing: asking again is safe
            raise broken.cause from None
        tools = client.allowed(config, listed)
        self._listings.keep(server, tools, ttl=config.list_ttl_seconds, since=now, epoch=epoch)
        return tools

    def cached_tools(self, server: str) -> list[McpTool] | None:
        """The server's tools as ``list_tools`` would give them from its cache; None if none."""
        return self._listings.get(server, asyncio.get_running_loop().time())

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
        config = self._config(server)
        refused = client.refusal(config, tool)
        if refused is not None:
            return refused
        action = client.caller(tool, arguments, idempotency_key, max_bytes)
        request = self._request(server, action, timeout, client.line_for(max_bytes))
        try:
            return await self._shared(request)
        except McpBroken:
            return broken_outcome(server_label(config, server), in_session=False)

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
        config = self._config(key.server)
        refused = client.refusal(config, tool)
        if refused is not None:
            return refused, None
        action = client.caller(tool, arguments, idempotency_key, max_bytes)
        request = self._request(key.server, action, timeout, client.line_for(max_bytes))
        entry = self._sessions.setdefault(key, _Session())
        entry.users += 1
        try:
            try:
                async with asyncio.timeout_at(request.deadline):
                    await entry.lock.acquire()  # its calls run one after another
            except TimeoutError:
                label = server_label(config, key.server)
                raise TimeoutError(f"{label}: its previous call ran past {timeout:g} s") from None
            try:
                return await self._in_session(key, entry, request)
            finally:
                entry.lock.release()
        finally:
            entry.users -= 1
            self._notify()

    def holds(self, key: SessionKey) -> bool:
        """Whether this worker has ``key``'s session open now."""
        entry = self._sessions.get(key)
        return entry is not None and entry.connection is not None and entry.connection.alive

    async def close_scope(self, scope: str) -> int:
        """Close every session of ``scope`` (each server sees its session end: stdin closed and the
        process gone, or the HTTP session deleted); how many were open. Forgets the scope, so a
        later call opens a new session without reporting it lost."""
        closing = []
        for key in [key for key in self._sessions if key.scope == scope]:
            connection = self._sessions.pop(key).connection
            if connection is not None:
                self._forget(connection)
                closing.append(connection)
        for key in [key for key in self._lost if key.scope == scope]:
            del self._lost[key]
        count = sum(connection.alive for connection in closing)
        await asyncio.shield(asyncio.gather(*(c.close() for c in closing)))
        return count

    def stats(self) -> PoolStats:
        live = [c for c in self._open if c.alive or c.busy]  # busy: opening
        sessions = sum(1 for key in self._sessions if self.holds(key))
        return PoolStats(sum(1 for c in live if c.stdio), len(live), sessions)

    async def aclose(self) -> None:
        """Close every connection and wait for every process to exit (the worker stops)."""
        if self._reaper is not None:
            self._reaper.cancel()
            with suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        self._open.clear()
        self._idle.clear()
        self._sessions.clear()
        self._lost.clear()
        await asyncio.gather(*(connection.close() for connection in list(self._holding)))

    # -- shared connections and sessions ---------------------------------------------------------

    def _request(
        self,
        server: str,
        action: Callable[[ClientSession, Exchange], Awaitable[T]],
        timeout: float,
        line: int | None,
    ) -> Request[T]:
        self._start_reaper()
        deadline = asyncio.get_running_loop().time() + timeout
        return Request(server, self._config(server), action, deadline, timeout, line)

    async def _shared(self, request: Request[T]) -> T:
        """The request on an idle shared connection, or a new one; sent once more on a fresh
        connection when the first failed before the request reached the server."""
        for attempt in range(2):
            connection = await self._checkout(request)
            try:
                result = await connection.run(request)
            except McpUnsent as unsent:
                if attempt:
                    raise unsent.cause from None
                continue
            connection.release()
            self._idle.setdefault(request.server, []).append(connection)
            self._notify()
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    async def _checkout(self, request: Request[Any]) -> Connection:
        """An idle shared connection of the server (HTTP: opened with the request's bound), now
        busy, or a new one once there is room for it."""
        while True:
            idle = self._idle.get(request.server, [])
            for connection in reversed(idle):
                if connection.fits(request.line):
                    idle.remove(connection)
                    connection.busy = True
                    return connection
            if request.config.command is None or self._room() or self._evict_one():
                return await self._open_connection(request, None)
            await self._wait_change(request)

    async def _in_session(
        self, key: SessionKey, entry: _Session, request: Request[ToolOutcome], again: bool = False
    ) -> tuple[ToolOutcome, Lost | None]:
        """The call in ``entry``'s connection, opened first when there is none (the caller holds
        the session's lock); ``again``: the first try found the session forgotten."""
        held = entry.connection
        now = asyncio.get_running_loop().time()
        if held and held.alive and now - held.last_used > request.config.idle_seconds:
            self._expire(held)  # the reaper had not come round to it yet
        if entry.connection is not None and not entry.connection.alive:
            self._lost.setdefault(key, "exited")
            entry.connection = None
        lost: Lost | None = None
        if entry.connection is None:
            lost = self._lost.pop(key, None)
            try:
                entry.connection = await self._open_connection(request, key)
            except BaseException:
                if lost is not None:
                    self._lost[key] = lost  # nothing ran: the next call tells it
                raise
        connection = entry.connection
        connection.busy = True
        try:
            outcome = await connection.run(request)
        except McpUnsent as unsent:  # the server forgot the session: the request did not run
            entry.connection = None
            if again:
                raise unsent.cause from None
            self._lost[key] = lost or "exited"
            return await self._in_session(key, entry, request, again=True)
        except BaseException as error:
            entry.connection = None
            self._lost[key] = "exited"
            if not isinstance(error, McpBroken):
                raise
            return broken_outcome(server_label(request.config, key.server), in_session=True), lost
        connection.release()
        self._wake.set()
        return outcome, lost

    # -- opening, running, retiring --------------------------------------------------------------

    async def _open_connection(self, request: Request[Any], key: SessionKey | None) -> Connection:
        """A new connection, busy; for a stdio server once a process may start, waiting for one
        (by the request's deadline) while every one is busy."""
        server, config = request.server, request.config
        while config.command is not None and not self._room() and not self._evict_one():
            await self._wait_change(request)
        limit = request.line if config.command is None else (request.line or STDIO_LINE)
        connection = Connection(
            config,
            Exchange(label=server_label(config, server), max_line=limit),
            server=server,
            key=key,
            on_list_changed=lambda: self._listings.changed(server),
            on_end=self._ended,
        )
        self._open.add(connection)
        self._holding.add(connection)
        await connection.start(request)  # a connection that fails ends itself: _ended
        return connection

    def _retire(self, connection: Connection) -> None:
        """Take ``connection`` out of the pool now; its task closes it."""
        self._forget(connection)
        connection.finish()

    def _ended(self, connection: Connection) -> None:
        """It failed, was killed, or its task ended (then it is no longer held)."""
        if connection.done:
            self._holding.discard(connection)
        self._forget(connection)

    def _forget(self, connection: Connection) -> None:
        if connection not in self._open:
            return
        self._open.discard(connection)
        idle = self._idle.get(connection.server, [])
        if connection in idle:
            idle.remove(connection)
        self._notify()

    def _room(self) -> bool:
        return sum(1 for c in self._open if c.stdio) < self._max

    def _evict_one(self) -> bool:
        """Close an idle stdio connection to make room: an idle shared one first, else the least
        recently used idle session (told as ``"evicted"`` at its next call). Whether one was."""
        shared = [c for idle in self._idle.values() for c in idle if c.stdio]
        if shared:
            self._retire(min(shared, key=lambda c: c.last_used))
            return True
        idle_sessions = [
            (entry.connection.last_used, key)
            for key, entry in self._sessions.items()
            if entry.users == 0 and entry.connection in self._open and entry.connection.stdio
        ]
        if not idle_sessions:
            return False
        _, key = min(idle_sessions, key=lambda found: found[0])
        entry = self._sessions.pop(key)
        assert entry.connection is not None
        self._retire(entry.connection)
        self._lost[key] = "evicted"
        return True

    def _notify(self) -> None:
        """Wake the calls waiting for a process slot: something was given back or closed."""
        self._changed.set()
        self._changed = asyncio.Event()
        self._wake.set()

    async def _wait_change(self, request: Request[Any]) -> None:
        changed = self._changed
        try:
            async with asyncio.timeout_at(request.deadline):
                await changed.wait()
        except TimeoutError:
            raise TimeoutError(
                f"all {self._max} MCP server processes this worker may run were busy for "
                f"{request.timeout:g} s; raise {MAX_PROCESSES_SETTING} or run fewer calls at once"
            ) from None

    def _start_reaper(self) -> None:  # idle connections and listings from here on
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap())

    async def _reap(self) -> None:
        """Close connections idle past their server's ``idle_seconds``, for as long as the pool
        lives (``aclose`` cancels it)."""
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            wake_at = now + 60.0
            for connection in list(self._open):
                if connection.busy or not connection.alive:
                    continue
                due = connection.last_used + self._servers[connection.server].idle_seconds
                if due <= now:
                    self._expire(connection)
                else:
                    wake_at = min(wake_at, due)
            self._wake.clear()
            with suppress(TimeoutError):
                async with asyncio.timeout_at(wake_at):
                    await self._wake.wait()

    def _expire(self, connection: Connection) -> None:
        """Close an idle connection; a session's is told as ``"idle"`` at its next call."""
        key = connection.key
        if isinstance(key, SessionKey):
            entry = self._sessions.get(key)
            if entry is not None and entry.connection is connection:
                entry.connection = None
                self._lost[key] = "idle"
                if entry.users == 0:
                    del self._sessions[key]
        self._retire(connection)

    def _config(self, server: str) -> McpServerConfig:
        config = self._servers.get(server)
        if config is None:
            raise ValueError(f"no MCP server {server!r} in {SETTING} on this worker")
        return config
