"""Live text (SPEC §8): the pieces of a streamed model call, batched into ``reply_delta`` events.

What a watcher reads as being written: the text of a branch's answer, and the ``text`` argument
of the main agent's ``final_reply`` call, decoded from its JSON as the arguments stream in. The
pieces are collected as they arrive and written every ``FLUSH_SECONDS``, each batch once under
a key of its step, attempt and number. A retried attempt first writes a ``superseded`` marker:
frontends drop what the earlier attempts of the step wrote and show the new attempt's text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Mapping
from types import TracebackType

from activities._events import record
from errands.contracts import Delta
from errands.store import SessionStore

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
        self._text += piece
        if self._ended:
            return ""
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


class LiveText:
    """The ``reply_delta`` events of one attempt of one step. Use as ``async with``; pass
    ``take`` as the provider's ``on_delta``. ``calls`` maps the tool calls whose arguments are
    text being written to the field that holds it (the main agent: ``final_reply``'s
    ``text``); ``answer_text``: whether the content text is (a branch's answer)."""

    def __init__(
        self,
        store: SessionStore,
        task_id: str,
        where: str,
        step: int,
        attempt: int,
        *,
        calls: Mapping[str, str] = {},
        answer_text: bool = False,
    ) -> None:
        self._store, self._task_id = store, task_id
        self._where, self._step, self._attempt = where, step, attempt
        self._cause = f"{where}:step:{step}"
        self._calls, self._answer_text = calls, answer_text
        self._fields: dict[int, JsonStringField] = {}
        self._pending: list[str] = []
        self._batches = 0
        self._flusher: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    def take(self, delta: Delta) -> None:
        if delta.call is None:
            if self._answer_text:
                self._pending.append(delta.piece)
            return
        name = self._calls.get(delta.call)
        if name is not None:
            field = self._fields.setdefault(delta.index, JsonStringField(name))
            if text := field.feed(delta.piece):
                self._pending.append(text)

    async def __aenter__(self) -> LiveText:
        if self._attempt > 1:
            await self._write("superseded", "", superseded=True)
        self._flusher = asyncio.create_task(self._flush_every(FLUSH_SECONDS))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._flusher is not None
        self._stopping.set()
        if isinstance(exc, asyncio.CancelledError):
            self._flusher.cancel()
        # Otherwise the flusher writes what is left (a failed attempt's text stays until the
        # next attempt supersedes it), one batch after another, so their order is kept.
        with contextlib.suppress(asyncio.CancelledError):
            await self._flusher

    async def _flush_every(self, seconds: float) -> None:
        try:
            while not self._stopping.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), seconds)
                await self._flush()
        except Exception as error:  # noqa: BLE001 - live text must never fail the model call
            task, cause = self._task_id, self._cause
            logger.warning("task %s: live text of %s is no longer logged: %s", task, cause, error)

    async def _flush(self) -> None:
        if not self._pending:
            return
        text, self._pending = "".join(self._pending), []
        self._batches += 1
        await self._write(f"delta:{self._batches}", text, superseded=False)

    async def _write(self, what: str, text: str, *, superseded: bool) -> None:
        await asyncio.to_thread(
            record,
            self._store,
            self._task_id,
            f"{self._cause}:attempt:{self._attempt}:{what}",
            "reply_delta",
            self._cause,
            where=self._where,
            step=self._step,
            attempt=self._attempt,
            text=text,
            superseded=superseded,
        )
