"""One MCP connection kept open: an initialized ``ClientSession`` over stdio or Streamable HTTP.

The SDK's transports and its session are async context managers whose anyio task groups must be
entered and left by one task, so a ``Connection`` has a task of its own that opens them, holds
them while the connection is in use, and leaves them when it is closed, when its process exits
(stdout ended) or when its transport fails. Requests are made from the callers' tasks, one at a
time: the pool hands a connection to one call at a time, so each request has the connection's
bookkeeping (the ``Exchange``: HTTP status, the head of an oversized answer) to itself.

``start`` and ``run`` word failures as the one-shot client does (``ConnectionError``,
``TimeoutError``: nothing ran), and say whether a request that failed on an open connection
reached the server: ``McpUnsent`` (it did not: the caller may send it again) or ``McpBroken``
(it may have run). A connection that failed in any way, or did not answer in time, has its process
killed and is not used again. ``opened_session`` (one initialized session over the configured
transport) is shared with the one-shot client.

Reading bounds: over stdio each request sets its own bound on one answer (``max_bytes``, as
``client.call_tool``; a call without one, and a listing, read at most 16 MiB of one line), so
one process serves calls of any ``max_bytes``. Over HTTP the bound is the SDK's event limit,
fixed when the session opens: a shared call takes a connection opened with its own bound (or
opens one); a ``task``/``branch`` session keeps the bound of its first call and a later call
with another ``max_bytes`` is cut to it in the call (the text is capped all the same).

A call that does not answer within its timeout raises ``TimeoutError`` (worded as the client
words it) and its connection is dropped with its process killed: a server that hangs or floods
its stdout is never reused. Over HTTP a session the server forgot (HTTP 404 on its
``mcp-session-id``: the request did not run) is reopened and the request sent once more; for a
``task``/``branch`` session that is reported as lost (``"exited"``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, Generic, TypeVar

import httpx2
from mcp import types
from mcp.client.session import ClientSession, IncomingMessage, MessageHandlerFnT
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from errands.adapters.mcp._http import Exchange
from errands.adapters.mcp._stdio import Oversized, bounded_stdio
from errands.adapters.mcp.config import McpServerConfig
from errands.errors import McpBroken, McpUnsent

T = TypeVar("T")
STDIO_LINE = 16 * 1024 * 1024
"""The most bytes of one stdio answer read when a request sets no bound (a listing)."""


@dataclass(frozen=True)
class Request(Generic[T]):
    """One request of a call or a listing: to which server, what it runs, by when (the loop's
    time), within which timeout (for messages), and the most bytes of one answer read (None: no
    bound of its own)."""

    server: str
    config: McpServerConfig
    action: Callable[[ClientSession, Exchange], Awaitable[T]]
    deadline: float
    timeout: float
    line: int | None


_CLIENT_INFO = types.Implementation(name="errands", version=version("errands"))
_SSE_EVENT_DEFAULT = 1024 * 1024
"""The SDK's own limit on one event, for exchanges that set none (listing tools)."""


@asynccontextmanager
async def opened_session(
    config: McpServerConfig,
    exchange: Exchange,
    timeout: float,
    message_handler: MessageHandlerFnT | None = None,
) -> AsyncIterator[ClientSession]:
    """An initialized session over the transport ``config`` names."""
    async with _streams(config, exchange, timeout) as (read, write):
        async with ClientSession(
            read, write, client_info=_CLIENT_INFO, message_handler=message_handler
        ) as session:
            try:
                await session.initialize()
            except RuntimeError as error:  # e.g. no protocol version in common
                exchange.failure = ConnectionError(f"{exchange.label} cannot be used: {error}")
                raise exchange.failure from error
            yield session


@asynccontextmanager
async def _streams(
    config: McpServerConfig, exchange: Exchange, timeout: float
) -> AsyncIterator[Any]:
    """The read and write streams of a stdio or Streamable HTTP transport."""
    if config.command is not None:
        program, *arguments = config.command
        parameters = StdioServerParameters(
            command=program, args=arguments, env=config.env or None, cwd=config.cwd
        )
        if sys.platform == "win32":  # the bounded transport stops process groups the POSIX way
            async with stdio_client(parameters) as streams:
                yield streams
            return
        async with bounded_stdio(parameters, exchange) as streams:
            yield streams
        return
    assert config.url is not None
    http = httpx2.AsyncClient(
        headers=config.headers,
        timeout=httpx2.Timeout(timeout),
        event_hooks={"response": [exchange.record]},
    )
    events = exchange.max_line if exchange.max_line is not None else _SSE_EVENT_DEFAULT
    async with (
        http,
        streamable_http_client(config.url, http_client=http, max_sse_event_size=events) as streams,
    ):
        yield streams


class Connection:
    """One initialized session with one server, held open by a task of its own until ``close``.

    ``server`` and ``key`` say whose it is (the pool's bookkeeping: ``key`` is the session's
    ``SessionKey``, ``None`` for a shared connection); ``busy`` and ``last_used`` are the pool's.
    """

    def __init__(
        self,
        config: McpServerConfig,
        exchange: Exchange,
        *,
        server: str,
        key: object | None = None,
        on_list_changed: Callable[[], None] | None = None,
        on_end: Callable[[Connection], None] | None = None,
    ) -> None:
        self.config, self.exchange, self.server, self.key = config, exchange, server, key
        self.stdio = config.command is not None
        self.events_limit = exchange.max_line
        """Over HTTP, the most bytes of one answer (the SDK's event limit), fixed when it opens."""
        self.busy = True
        self.last_used = asyncio.get_running_loop().time()
        self.error: BaseException | None = None
        """What ended the connection's task, when it ended with an error."""
        self._on_list_changed, self._on_end = on_list_changed, on_end
        self._session: ClientSession | None = None
        self._closing = asyncio.Event()
        self._ended = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        exchange.on_end = self._closing.set  # the process exited: close what is left

    @property
    def alive(self) -> bool:
        """Whether it is open and usable: initialized, neither closing nor ended."""
        return self._session is not None and not self._closing.is_set()

    def fits(self, line: int | None) -> bool:
        """Whether it is alive and reads answers as a request bounded by ``line`` wants: over
        stdio any (each request sets its own bound), over HTTP one opened with that bound."""
        return self.alive and (self.stdio or self.events_limit == line)

    def release(self) -> None:
        """Its request is done: it is idle from now on."""
        self.busy = False
        self.last_used = asyncio.get_running_loop().time()

    @property
    def pid(self) -> int | None:
        """The server's process id (stdio), once started."""
        process = self.exchange.process
        return None if process is None else process.pid

    async def open(self, timeout: float) -> None:
        """Start the transport and initialize the session within ``timeout`` seconds; raises
        what the SDK raised, or ``TimeoutError`` (``start`` words it and ends the connection)."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ready.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._task = asyncio.create_task(self._hold(ready, timeout))
        self._task.add_done_callback(self._done)  # even for a task cancelled before it ran
        async with asyncio.timeout(timeout):
            await asyncio.shield(ready)

    async def start(self, request: Request[Any]) -> None:
        """``open`` by the request's deadline, a failure worded as the client words it
        (``TimeoutError``, ``ConnectionError``), the process then killed."""
        from errands.adapters.mcp.client import failure, timed_out  # it imports this module

        timeout = request.timeout
        try:
            await self.open(max(request.deadline - asyncio.get_running_loop().time(), 0.001))
        except TimeoutError:
            self.finish(kill=True)
            raise timed_out(self.exchange, timeout) from None
        except Exception as error:
            self.finish(kill=True)
            worded = failure(error, self.exchange, timeout)
            if worded is None:
                raise
            raise worded from error
        except BaseException:
            self.finish(kill=True)
            raise

    async def run(self, request: Request[T]) -> T:
        """``request``, a failure worded: ``TimeoutError`` (no answer by the deadline, or a
        transport's timeout), ``McpUnsent`` or ``McpBroken``. After any failure the connection is
        done with: its process killed, the caller closes it."""
        from errands.adapters.mcp.client import failure, leaves, timed_out

        timeout, line = request.timeout, request.line or STDIO_LINE
        try:
            return await self.request(request.action, deadline=request.deadline, max_line=line)
        except TimeoutError:
            self.finish(kill=True)
            raise timed_out(self.exchange, timeout) from None
        except Exception as error:
            worded = failure(error, self.exchange, timeout)
            self.finish(kill=True)
            if worded is None:
                raise
            if isinstance(worded, TimeoutError):
                raise worded from error
            if not self.stdio:
                # 404 on the session's id: the server forgot it (it was initialized, so the
                # url is right); a refused connection ends the transport's task.
                refused = await self.ended(within=1.0) and self.error is not None
                if self.exchange.http_status == 404 or (
                    refused
                    and self.error is not None
                    and any(isinstance(leaf, httpx2.ConnectError) for leaf in leaves(self.error))
                ):
                    raise McpUnsent(worded) from error
            raise McpBroken(worded) from error
        except BaseException:
            self.finish(kill=True)
            raise

    async def _hold(self, ready: asyncio.Future[None], timeout: float) -> None:
        try:
            async with opened_session(self.config, self.exchange, timeout, self._notified) as s:
                self._session = s
                ready.set_result(None)
                await self._closing.wait()
        except BaseException as error:  # noqa: BLE001 - the task's end is the connection's end
            self.error = error
            if not ready.done():
                failed = error if isinstance(error, Exception) else ConnectionError("closed")
                ready.set_exception(failed)
        finally:
            self._session = None
            self._closing.set()

    @property
    def done(self) -> bool:
        """Whether its task has ended (the process, if any, reaped)."""
        return self._ended.is_set()

    def _done(self, task: asyncio.Task[None]) -> None:
        self._session = None
        self._closing.set()
        self._ended.set()
        if self._on_end is not None:
            self._on_end(self)

    async def _notified(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification) and self._on_list_changed:
            self._on_list_changed()

    async def request(
        self,
        action: Callable[[ClientSession, Exchange], Awaitable[T]],
        *,
        deadline: float,
        max_line: int | None,
    ) -> T:
        """Run ``action`` on the session, from the caller's task, by the loop time ``deadline``
        (``TimeoutError`` after it). ``max_line`` bounds each answer over stdio; over HTTP the
        bound is the one it opened with."""
        session = self._session
        if session is None or self._closing.is_set():
            raise ConnectionError(f"{self.exchange.label} closed the connection")
        exchange = self.exchange
        exchange.oversized, exchange.posted = Oversized(), Oversized()
        exchange.http_status, exchange.failure = None, None
        if self.stdio:
            exchange.max_line = max_line
        async with asyncio.timeout_at(deadline):
            return await action(session, exchange)

    async def ended(self, within: float) -> bool:
        """Wait up to ``within`` seconds for the connection's task to end; whether it has."""
        with suppress(TimeoutError):
            async with asyncio.timeout(within):
                await self._ended.wait()
        return self._ended.is_set()

    def finish(self, *, kill: bool = False) -> None:
        """Have the connection's task close it (stdin closed and the process waited for, the SDK's
        grace then terminated; or the HTTP session deleted), without waiting for it. ``kill``:
        end the process group at once and cancel the task instead (a server that hangs, floods or
        failed is not asked)."""
        self._closing.set()
        if not kill:
            return
        if self._on_end is not None:
            self._on_end(self)  # not usable from now on: its place is free
        process = self.exchange.process
        if process is not None and process.returncode is None:
            with suppress(ProcessLookupError, PermissionError):
                if sys.platform == "win32":
                    process.kill()
                else:
                    os.killpg(process.pid, signal.SIGKILL)
        if self._task is not None:
            self._task.cancel()

    async def close(self, *, within: float = 10.0) -> None:
        """``finish``, then wait for the task to end and the process to be reaped; after
        ``within`` seconds it is killed."""
        self.finish()
        task = self._task
        if task is None:
            return
        if not await self.ended(within):
            self.finish(kill=True)
        with suppress(asyncio.CancelledError):
            await task
