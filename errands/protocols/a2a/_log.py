"""A task read from its event log for A2A: its snapshot (``snapshot``), what a stream sends
after a point (``tail``) and a bounded wait for it to settle (``settle``). Everything comes from
the log in the session store and from Temporal, never from this process's memory, so any
gateway serves any task and a stream resumed after a given ``seq`` loses nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from a2a.helpers import new_text_part
from a2a.types.a2a_pb2 import Task, TaskStatusUpdateEvent

from errands.client import Client, TaskHandle
from errands.contracts import ids
from errands.contracts.events import StoredEvent
from errands.errors import ErrandsError
from errands.protocols.a2a._mapping import (
    COMPLETED,
    ENDED,
    INPUT_REQUIRED,
    PAUSES,
    STATES,
    WORKING,
    Progress,
    StreamEvent,
    agent_message,
    history,
    question_parts,
)

PAGE = 1000
"""Events read from the store at a time."""


async def progress(handle: TaskHandle, upto: int | None = None) -> Progress:
    """The task as its log shows it up to ``upto`` (default: everything written so far); a
    stream goes on after ``upto`` even where the log does not reach it yet."""
    read = Progress(handle.task_id, handle.session_id or "")
    while upto is None or read.seq < upto:
        batch = await handle.events_after(read.seq, limit=PAGE)
        for event in batch:
            if upto is not None and event.seq > upto:
                break
            read.apply(event)
        if len(batch) < PAGE or (upto is not None and read.seq >= upto):
            break
    if upto is not None:
        read.seq = max(read.seq, upto)
    if not read.context_id:
        read.context_id = (await handle.describe()).session_id or ""
    return read


async def snapshot(
    client: Client,
    handle: TaskHandle,
    *,
    after_delivery: int | None = None,
    upto: int | None = None,
    last: int | None = 0,
) -> tuple[Task, Progress]:
    """The task as it stands (``upto``: as it stood at that seq) and the log position it stands
    at. ``after_delivery``: the seq before a message was delivered to it: a question or approval
    from before then is answered, so the task shows ``working``. ``last``: how many of its
    messages to include as history (None: all)."""
    read = await progress(handle, upto)
    if after_delivery is not None and read.paused_at <= after_delivery:
        read.answered()  # what waited was answered by the delivery: the task works on
    elif read.state == INPUT_REQUIRED:
        await _fill_question(handle, read)
    if upto is None and read.ended is None and not (await handle.describe()).running:
        await _from_status(handle, read)  # ended without a last event in its log
    if read.state == COMPLETED and not read.text:
        read.text = await reply_of(client, handle)
    rows: list[Any] = []
    if last != 0 and read.context_id:
        rows = await client.history(read.context_id)
    return read.task(history=history(rows, handle.task_id, last)), read


async def _fill_question(handle: TaskHandle, read: Progress) -> None:
    """The question set waiting, in full, in the status message (the log names its headers)."""
    pending = await pending_question(handle)
    if pending is not None and read.message is not None:
        parts = question_parts(pending, {})
        read.message = agent_message(read.task_id, read.context_id, f"{read.paused_at}", parts)


async def _from_status(handle: TaskHandle, read: Progress) -> None:
    """The state from the task itself when its log says nothing of it: a task just started
    (working), or one that ended without a last event (terminated by an operator)."""
    try:
        result = await handle.status()
    except ErrandsError:
        return
    state = STATES.get(result.status, WORKING)
    read.context_id = result.session_id or read.context_id
    if state in ENDED and read.ended is None:
        read.ended = state
        said = result.error.message if result.error else result.status
        parts = [] if state == COMPLETED else [new_text_part(said)]
        read.message = agent_message(read.task_id, read.context_id, "end", parts)
        read.text = result.reply or read.text


async def pending_question(handle: TaskHandle) -> dict[str, Any] | None:
    """The question set waiting (``errands status --json``'s ``pending_question``), or None
    when none waits or the task cannot say now."""
    try:
        return await handle.pending_question()
    except ErrandsError:
        return None


async def reply_of(client: Client, handle: TaskHandle) -> str:
    """The task's reply as stored (a model's final reply or the join of its branches)."""
    row = await asyncio.to_thread(client.store().get, ids.reply_message_id(handle.task_id))
    if row is not None:
        return row.text
    try:
        return (await handle.status()).reply or ""
    except ErrandsError:
        return ""


async def detail(client: Client, handle: TaskHandle, event: StoredEvent) -> Any:
    """What an event needs beside the log to become an A2A event (``Progress.apply``)."""
    if event.type == "question_asked":
        pending = await pending_question(handle)
        if pending is not None and pending.get("id") == event.data.get("question_set_id"):
            return pending
        return None
    if event.type == "replied":
        return await reply_of(client, handle)
    return None


async def tail(
    client: Client, handle: TaskHandle, read: Progress
) -> AsyncGenerator[StreamEvent, None]:
    """The A2A events of the log after ``read.seq``, in order, each once, until the task ends or
    waits for its user (input-required ends a stream: the client answers, then follows
    again). A task that ended without a last event in its log ends with its status."""
    events = handle.events(after=read.seq, follow=True)
    async with aclosing(events):
        async for event in events:
            for update in read.apply(event, await detail(client, handle, event)):
                yield update
            if event.type in PAUSES or read.ended is not None:
                return
    if read.ended is None:
        await _from_status(handle, read)
        if read.ended is not None:
            yield _final(read)


def _final(read: Progress) -> StreamEvent:
    return TaskStatusUpdateEvent(
        task_id=read.task_id, context_id=read.context_id, status=read.status()
    )


async def settle(handle: TaskHandle, after: int, seconds: float) -> None:
    """Wait until the task logs its end or a pause after ``after``, for ``seconds`` at most."""
    events = handle.events(after=after, follow=True)
    try:
        async with asyncio.timeout(seconds), aclosing(events):
            async for event in events:
                if event.type in PAUSES:
                    return
    except TimeoutError:
        return


async def last_seq(handle: TaskHandle) -> int:
    """The seq of the last event logged so far (0: none yet)."""
    seq = 0
    while batch := await handle.events_after(seq, limit=PAGE):
        seq = batch[-1].seq
        if len(batch) < PAGE:
            break
    return seq
