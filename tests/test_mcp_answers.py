"""A POST's answer over Streamable HTTP (errands.adapters.mcp._http.Answer): closed by the SDK
before its end, it is read on to the end first, within bounds, so its connection is kept; a
server that holds its streams open turns that off for its session. Against byte streams as httpx
hands them over (the pool's tests run the real servers)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx2
import pytest

from errands.adapters.mcp._http import DRAIN_BYTES, Answer, Exchange

pytestmark = pytest.mark.fast


class Body(httpx2.AsyncByteStream):
    """A body as a socket gives it: ``chunks``, then its end (``ends``) or nothing more for as
    long as one waits (a server holding the stream open); read again past its end, it waits too,
    as a socket does."""

    def __init__(self, *chunks: bytes, ends: bool = True) -> None:
        self.unread = list(chunks)
        self.ends = ends
        self.ended = False
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.unread:
            yield self.unread.pop(0)
        if self.ended or not self.ends:
            await asyncio.Event().wait()
        self.ended = True

    async def aclose(self) -> None:
        self.closed = True


async def read_first(answer: Answer) -> bytes:
    """What the SDK does: read up to the answer it waits for, then stop reading."""
    async for chunk in answer:
        return chunk
    raise AssertionError("an empty answer")


async def test_an_answer_the_sdk_stopped_reading_is_read_to_its_end_before_it_closes() -> None:
    exchange = Exchange(label="t")
    body = Body(b"event: message\ndata: {...}\n\n", b"0\r\n\r\n")
    answer = Answer(body, 0, exchange)

    assert await read_first(answer) == b"event: message\ndata: {...}\n\n"
    await answer.aclose()

    assert body.unread == [] and body.ended and body.closed
    assert exchange.drains


async def test_an_answer_read_to_its_end_is_closed_without_reading_again() -> None:
    exchange = Exchange(label="t")
    body = Body(b'{"jsonrpc": "2.0", "id": 1, "result": {}}')
    answer = Answer(body, 0, exchange)

    assert [chunk async for chunk in answer] == [b'{"jsonrpc": "2.0", "id": 1, "result": {}}']
    await answer.aclose()

    # Read again, the body would have waited out the bound and turned draining off.
    assert body.closed and exchange.drains


async def test_a_stream_held_open_past_its_answer_turns_reading_on_off_for_the_session() -> None:
    exchange = Exchange(label="t")
    held = Body(b"the answer", ends=False)
    first = Answer(held, 0, exchange)
    await read_first(first)
    await first.aclose()
    assert held.closed and not exchange.drains

    later = Body(b"the next answer", b"what follows it")
    second = Answer(later, 0, exchange)
    await read_first(second)
    await second.aclose()
    assert later.closed and later.unread == [b"what follows it"], "not waited for"


async def test_the_rest_of_an_answer_is_read_only_up_to_the_bound() -> None:
    exchange = Exchange(label="t")
    piece = b"x" * (DRAIN_BYTES // 2 + 1)
    body = Body(b"the answer", piece, piece, piece)
    answer = Answer(body, 0, exchange)

    await read_first(answer)
    await answer.aclose()

    assert body.closed and body.unread == [piece], "two pieces pass the bound: the third stays"
    assert exchange.drains, "an answer too long to read says nothing of the server's streams"


async def test_the_head_of_an_answer_is_kept_as_it_is_read() -> None:
    exchange = Exchange(label="t", max_line=4)
    answer = Answer(Body(b"abcdef", b"gh"), 4, exchange)

    assert [chunk async for chunk in answer] == [b"abcdef", b"gh"]

    assert (exchange.posted.head, exchange.posted.size) == (b"abcd", 8)
