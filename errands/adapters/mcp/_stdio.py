"""The stdio transport of the MCP client, bounded: it reads a server's answers in linear time and
keeps at most ``max_line`` bytes of any one of them.

The SDK's own stdio client joins every chunk it reads to the line so far (``buffer + chunk``),
which is quadratic in the length of a line: a server that answers 50 MB on one line kept a call
busy for 80 s and its worker at 650 MB. Here a line is gathered in one buffer and stops growing
at ``max_line`` bytes; the rest of it is read and dropped. Such a line is not parsed: its head
and the bytes it held are kept in an ``Oversized`` the caller gave, and the session gets, for the
request it answered, a JSON-RPC error, so the pending call ends at once (the caller reads the
head, ``errands.adapters.mcp.client``). A line whose request id cannot be found in its head ends
the connection instead.

The bound and the record of an oversized answer are a ``Reading`` the caller owns and may change
between requests (a connection kept open serves one request at a time, each with its own bound
and its own record); the reader takes ``max_line`` afresh at each line. It gives the loop a turn
after every chunk it reads, so a server that floods its stdout cannot starve the worker.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel
from anyio.abc import Process
from mcp import types
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

OVERSIZED = -32099
"""The JSON-RPC error code of the error that stands in for an answer too long to read."""
_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,200}")')
_GRACE = 2.0
"""Seconds a server has to exit once its stdin is closed, and again once it is terminated."""


@dataclass
class Oversized:
    """The head of an answer longer than the transport reads, and how many bytes it held."""

    head: bytes = b""
    size: int = 0


@dataclass(kw_only=True)
class Reading:
    """What one stdio transport is told, and tells, while it reads a server's answers."""

    max_line: int | None = None
    """The most bytes of one answer kept (None: no bound); read again at each new line."""
    oversized: Oversized = field(default_factory=Oversized)
    """Where the head of an answer longer than ``max_line`` is put: replace it per request."""
    process: Process | None = None
    """The server's process, once started."""
    on_end: Callable[[], None] | None = None
    """Called once the server's stdout has ended (its process exited or closed it), or the
    transport stopped reading it."""


@asynccontextmanager
async def bounded_stdio(
    server: StdioServerParameters, reading: Reading
) -> AsyncIterator[tuple[object, object]]:
    """The read and write streams of a session with the program ``server`` names; a line over
    ``reading.max_line`` bytes is told through ``reading.oversized``."""
    process = await anyio.open_process(
        [server.command, *server.args],
        env=get_default_environment() | (server.env or {}),
        cwd=server.cwd,
        stderr=sys.stderr,
        start_new_session=True,
    )
    reading.process = process
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)

    async def deliver(line: bytes | bytearray, dropped: int) -> None:
        if not dropped:
            try:
                message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except ValueError as error:
                await to_session.send(error)
                return
            await to_session.send(SessionMessage(message))
            return
        reading.oversized.head, reading.oversized.size = bytes(line), len(line) + dropped
        found = _ID.search(line, 0, 4096)
        if found is None:
            await to_session.aclose()  # no request to answer: the connection ends
            return
        refusal = types.JSONRPCError(
            jsonrpc="2.0",
            id=json.loads(found.group(1)),
            error=types.ErrorData(code=OVERSIZED, message="answer too long to read"),
        )
        await to_session.send(SessionMessage(refusal))

    async def read_stdout() -> None:
        assert process.stdout is not None
        line, dropped = bytearray(), 0
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            async with to_session:
                async for chunk in process.stdout:
                    await anyio.lowlevel.checkpoint()  # a full pipe answers without waiting
                    start = 0
                    while start <= len(chunk):
                        end = chunk.find(b"\n", start)
                        piece = chunk[start : len(chunk) if end < 0 else end]
                        max_line = reading.max_line
                        room = len(piece) if max_line is None else max_line - len(line)
                        line += piece[: max(0, room)]
                        dropped += max(0, len(piece) - max(0, room))
                        if end < 0:
                            break
                        if line.strip():
                            await deliver(line, dropped)
                        line, dropped = bytearray(), 0
                        start = end + 1
        if reading.on_end is not None:
            reading.on_end()
        with suppress(Exception):  # whatever follows is nobody's: keep the pipe flowing
            async for _ in process.stdout:
                await anyio.lowlevel.checkpoint()

    async def write_stdin() -> None:
        assert process.stdin is not None
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async with from_session:
                async for message in from_session:
                    text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((text + "\n").encode())

    async with anyio.create_task_group() as group:
        group.start_soon(read_stdout)
        group.start_soon(write_stdin)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await write_stream.aclose()
                await read_stream.aclose()
                await _stop(process)
            group.cancel_scope.cancel()


async def _stop(process: Process) -> None:
    """Close the server's stdin, give it ``_GRACE`` to exit, then end its process group."""
    if process.stdin is not None:
        with suppress(Exception):
            await process.stdin.aclose()
    with anyio.move_on_after(_GRACE):
        await process.wait()
        return
    await terminate_posix_process_tree(process, _GRACE)
    with anyio.move_on_after(_GRACE):
        await process.wait()
