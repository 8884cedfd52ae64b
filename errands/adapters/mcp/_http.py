"""What one MCP session keeps of its exchanges (``Exchange``), and how it reads a POST's answer
over Streamable HTTP (``Answer``).

The SDK closes an answer's event stream as soon as it has read the JSON-RPC answer it waited for,
and a stream closed before its end costs its TCP connection: httpx drops it, and the next request
connects again (measured with the bundled almanac server: every call made a new connection, and
a call took 2.8 ms where one on a kept connection takes 2.0). A server ends the stream right after
the answer, so ``Answer`` reads on to the end before the stream is closed, briefly, and the
connection goes back to the client's pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import cast

import httpx2

from errands.adapters.mcp._stdio import Oversized, Reading

DRAIN_SECONDS = 0.05
"""How long the rest of an answer the SDK stopped reading is read on before it is closed."""
DRAIN_BYTES = 64 * 1024
"""The most bytes of that rest read: an answer with more is closed, and its connection dropped."""


@dataclass(kw_only=True)
class Exchange(Reading):
    """One session's bookkeeping: the server's label for messages, and the last HTTP refusal.

    The SDK turns a POST answered with an HTTP error status into a generic JSON-RPC error
    ("Server returned an error response"); the status, recorded here by an httpx event hook, is
    what tells the operator to check a token or a URL.
    """

    label: str
    http_status: int | None = None
    """The status of the last POST, when it was an error (400 or above)."""
    failure: ConnectionError | None = None
    """A failure raised inside the session, already worded. ``max_line`` (``Reading``) is the
    most bytes of one answer the transport reads: a stdio line, or an HTTP event (the SDK's
    ``max_sse_event_size``); over stdio ``oversized`` holds the head of a longer one."""
    posted: Oversized = field(default_factory=Oversized)
    """Over HTTP: the head of the last POST's answer (whatever its length), and the bytes of
    it read so far."""
    drains: bool = True
    """Over HTTP: whether the rest of an answer the SDK stopped reading is read before it is
    closed; off once the server held a stream open past ``DRAIN_SECONDS`` (its streams do not
    end with the answer: waiting for them gains nothing)."""

    async def record(self, response: httpx2.Response) -> None:
        if response.request.method == "POST":
            status = response.status_code
            self.http_status = status if status >= 400 else None
            if isinstance(response.stream, httpx2.AsyncByteStream):
                self.posted = Oversized()  # the last POST's answer: the call's
                keep = self.max_line if self.max_line is not None else 0
                response.stream = Answer(response.stream, keep, self)


class Answer(httpx2.AsyncByteStream):
    """A POST's answer as the SDK reads it: its first ``keep`` bytes kept in the exchange's
    ``posted`` (and every byte read counted), the head of an answer the SDK stops reading at
    its event limit, shown as stdio shows one; and, when the SDK closes it before its end, read
    on to the end first (at most ``DRAIN_SECONDS`` and ``DRAIN_BYTES``), so that its connection
    serves the next request."""

    def __init__(self, stream: httpx2.AsyncByteStream, keep: int, exchange: Exchange) -> None:
        self._stream, self._keep, self._exchange = stream, keep, exchange
        self._oversized = exchange.posted
        self._head = bytearray()
        self._ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            if len(self._head) < self._keep:
                self._head += chunk[: self._keep - len(self._head)]
                self._oversized.head = bytes(self._head)
            self._oversized.size += len(chunk)
            yield chunk
        self._ended = True

    async def aclose(self) -> None:
        try:
            if not self._ended and self._exchange.drains:
                await self._read_to_end()
        finally:
            await self._stream.aclose()

    async def _read_to_end(self) -> None:
        """Read the rest of the answer within the bounds. A stream still open after
        ``DRAIN_SECONDS`` turns the exchange's ``drains`` off."""
        rest = 0
        try:
            # httpx's streams iterate with async generators: closed here, not left to the GC.
            rest_of = cast(AsyncGenerator[bytes, None], self._stream.__aiter__())
            async with asyncio.timeout(DRAIN_SECONDS), aclosing(rest_of) as chunks:
                async for chunk in chunks:
                    rest += len(chunk)
                    if rest > DRAIN_BYTES:
                        return  # too much to read: the connection is dropped with the stream
        except TimeoutError:
            self._exchange.drains = False
        except httpx2.HTTPError:
            pass  # the connection broke: it is dropped, as a stream closed early would be
