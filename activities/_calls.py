"""The events of one attempt of a model step (SPEC §8): ``model_call_started``, the live text
of the call as ``reply_delta`` events, and ``model_call_finished``.

Live text is what a watcher reads as being written: the text of a branch's answer, and the
``text`` argument of the main agent's ``final_reply`` call, decoded from its JSON as the
arguments stream in. The pieces are collected as they arrive and written every
``FLUSH_SECONDS``, each batch once under a key of its step, attempt and number. A retried attempt
first writes a ``superseded`` marker: frontends drop what the earlier attempts of the step wrote.

The writes stay off the call's way: ``model_call_started`` is written with the step's other
store work before the request (``write_opening``, in the same ``store_work``) or
while the request is in flight, and the last text with ``model_call_finished`` in one
transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from temporalio import activity

from activities._events import event
from errands.adapters.store import SessionStore, store_work
from errands.agent.arguments import MAX_BYTES
from errands.contracts.events import EventType, NewEvent
from errands.contracts.messages import Delta, Usage

logger = logging.getLogger("errands.activities")

FLUSH_SECONDS = 0.1
"""How often the pieces collected are written as one ``reply_delta``."""

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class JsonStringField:
    """Decodes one string field of a JSON object while the object's text streams in (the
    ``text`` of ``{"text": "Lisbon…``): each ``feed`` returns the field's text that became
    readable with that piece. An escape cut between two pieces waits for the next one."""

    def __init__(self, name: str) -> None:
        self._opening = re.compile(r'"' + re.escape(name) + r'"\s*:\s*"')
        self._text = ""
        self._at: int | None = None  # where the next undecoded character of the value is
        self._ended = False

    def feed(self, piece: str) -> str:
        if self._ended or len(self._text) > MAX_BYTES:
            return ""  # past the size guard the call is refused: nothing more to show, or keep
        self._text += piece
        if self._at is None:
            opened = self._opening.search(self._text)
            if opened is None:
                return ""
            self._at = opened.end()
        decoded: list[str] = []
        text, at = self._text, self._at
        while at < len(text):
            char = text[at]
            if char == '"':
                self._ended = True
                break
            if char != "\\":
                decoded.append(char)
                at += 1
                continue
            escaped = self._escape(text, at)
            if escaped is None:
                break  # the rest of the escape is in a later piece
            char, at = escaped
            decoded.append(char)
        self._at = at
        return "".join(decoded)

    @staticmethod
    def _escape(text: str, at: int) -> tuple[str, int] | None:
        """The character the escape at ``at`` stands for and where the text goes on, or None
        while it is incomplete."""
        if at + 1 >= len(text):
            return None
        kind = text[at + 1]
        if kind != "u":
            return _ESCAPES.get(kind, kind), at + 2
        if at + 6 > len(text):
            return None
        code = _hex(text[at + 2 : at + 6])
        if code is None:
            return text[at : at + 6], at + 6  # malformed: shown as written
        if 0xD800 <= code < 0xDC00:  # a surrogate pair's first half: the second follows
            if at + 12 > len(text):
                return None
            low = _hex(text[at + 8 : at + 12]) if text[at + 6 : at + 8] == "\\u" else None
            if low is not None and 0xDC00 <= low < 0xE000:
                return chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)), at + 12
        return chr(code), at + 6


def _hex(digits: str) -> int | None:
    try:
        return int(digits, 16)
    except ValueError:
        return None


class ModelCall:
    """The events of one attempt of one model step. Use as ``async with``, pass ``take`` to the
    provider as its ``on_delta``, and once the call answered write what ``finished`` returns
    (the step's last events) with the step's row, or with ``write_blocking``. ``calls`` maps the
    tool calls whose arguments hold text being written to the field that holds it (the main
    agent: ``final_reply``'s ``text``); ``answer_text``: whether the content text is (a
    branch's answer)."""

    def __init__(
        self,
        store: SessionStore,
        task_id: str,
        where: str,
        step: int,
        model: str,
        *,
        calls: Mapping[str, str] = {},
        answer_text: bool = False,
    ) -> None:
        self._store, self._task_id, self._model = store, task_id, model
        self._where, self._step = where, step
        self._attempt = activity.info().attempt
        self._cause = f"{where}:step:{step}"
        self._calls, self._answer_text = calls, answer_text
        self._closed = False
        self._fields: dict[int, JsonStringField] = {}
        self._pending: list[str] = []
        self._batches = 0
        self._started: asyncio.Task[None] | None = None
        """Writing the opening events while the request runs; None once ``write_opening`` did."""
        self._opened = False
        self._flusher: asyncio.Task[None] | None = None
        self._writing = False
        self._stopping = False

    def take(self, delta: Delta) -> None:
        """One piece of the streamed answer (never blocks: the writing is the flusher's)."""
        if delta.call is None:
            if self._answer_text and delta.piece:
                self._pending.append(delta.piece)
        elif (name := self._calls.get(delta.call)) is not None:
            field = self._fields.setdefault(delta.index, JsonStringField(name))
            if text := field.feed(delta.piece):
                self._pending.append(text)
        if self._pending and self._flusher is None and not self._stopping:
            self._flusher = asyncio.create_task(self._flush_every(FLUSH_SECONDS))

    def write_opening(self) -> None:
        """Write the call's opening events now, in the step's other store work before the
        request (blocking); ``async with`` then writes none."""
        self.write_blocking(self._opening())
        self._opened = True

    async def __aenter__(self) -> ModelCall:
        if not self._opened:  # while the request runs
            self._started = asyncio.create_task(
                store_work(self._store, self.write_blocking, self._opening())
            )
        return self

    def _opening(self) -> list[NewEvent]:
        opening = [self._event("started", "model_call_started")]
        if self._attempt > 1:
            opening.append(self._delta("superseded", "", superseded=True))
        return opening

    async def finished(self, usage: Usage) -> list[NewEvent]:
        """The call answered: its last text and ``model_call_finished``, to write with the
        row the step stores (``SessionStore.append_once``), or with ``write_blocking``."""
        await self._stop(cancelled=False)
        self._closed = True
        usage_field = {"usage": usage.model_dump()}
        return [*self._rest(), self._event("finished", "model_call_finished", **usage_field)]

    def write_blocking(self, events: list[NewEvent]) -> None:
        """Write ``events`` of this call (those ``finished`` returned) in one transaction, from
        the step's store work. A failure is logged: the log must never fail the model call."""
        if not self._task_id or not events:
            return
        try:
            self._store.append_events(events)
        except Exception as error:  # noqa: BLE001
            logger.warning(
                "task %s: events of %s were not logged: %s", self._task_id, self._cause, error
            )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._closed:
            return
        cancelled = isinstance(exc, asyncio.CancelledError)
        await self._stop(cancelled=cancelled)
        if not cancelled:  # a failed attempt's text stays until superseded
            await store_work(self._store, self.write_blocking, self._rest())

    async def _stop(self, *, cancelled: bool) -> None:
        """Stop the live text; unless cancelled, once the started event is written."""
        self._stopping = True
        if self._flusher is not None:
            if cancelled or not self._writing:
                self._flusher.cancel()  # asleep: nothing lost, the rest is written after
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        if not cancelled and self._started is not None:
            await self._started  # cancelled: the started event's write (on a thread, when
            # the store sent it there) finishes on its own

    def _rest(self) -> list[NewEvent]:
        """The text not yet written, as one last delta."""
        return [self._delta_of_pending()] if self._pending else []

    async def _flush_every(self, seconds: float) -> None:
        if self._started is not None:
            # The text never comes before the call's start. Shielded: cancelling the flusher
            # must not cancel the task it waits on.
            await asyncio.shield(self._started)
        while not self._stopping:
            await asyncio.sleep(seconds)
            if self._pending:
                self._writing = True
                try:
                    await store_work(self._store, self.write_blocking, [self._delta_of_pending()])
                finally:
                    self._writing = False

    def _delta_of_pending(self) -> NewEvent:
        text, self._pending = "".join(self._pending), []
        self._batches += 1
        return self._delta(f"delta:{self._batches}", text, superseded=False)

    def _delta(self, what: str, text: str, *, superseded: bool) -> NewEvent:
        return self._new(what, "reply_delta", text=text, superseded=superseded)

    def _event(self, what: str, type_: EventType, **fields: Any) -> NewEvent:
        return self._new(what, type_, model=self._model, **fields)

    def _new(self, what: str, type_: EventType, **fields: Any) -> NewEvent:
        return event(
            self._task_id,
            f"{self._cause}:attempt:{self._attempt}:{what}",
            type_,
            self._cause,
            where=self._where,
            step=self._step,
            attempt=self._attempt,
            **fields,
        )
