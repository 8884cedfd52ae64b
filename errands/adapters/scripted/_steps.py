"""What a script is made of: the steps that answer a request (``Reply`` with its ``Call``s,
``Fail``, ``Reset``, or a callable that picks one), the ``Gate`` a step can wait at, the
responder that answers what the script does not, the ``RecordedRequest`` each answer is kept
with, and the server's constants."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from errands.contracts.messages import Usage

Api = Literal["openai", "anthropic"]


class Gate:
    """Where a step waits until the test lets it go, so a test decides an ordering by state
    instead of by a ``delay``: script ``Reply(..., hold=gate)``, ``await gate.reached()`` (the
    call is in the server, unanswered), do what must happen meanwhile, then ``gate.release()``.
    One gate can hold several calls (``reached(3)``); once released, it holds none. A held call
    whose client gives up (a cancelled task, a timeout) ends at once, as a delayed one does.

    Safe across threads: the server answers on its own thread and loop, the test waits on its."""

    def __init__(self, name: str = "gate") -> None:
        self.name = name
        self.held: list[RecordedRequest] = []
        """The calls that reached the gate, in order (released ones too)."""
        self.ended: list[tuple[float, bool]] = []
        """For each held call that has ended: when (``time.time()``), and whether it ended
        because its client went away (``True``) rather than by being released."""
        self.left: list[RecordedRequest] = []
        """The held calls that have ended, in the order of ``ended``."""
        self._released = threading.Event()
        self._lock = threading.Lock()

    @property
    def released(self) -> bool:
        return self._released.is_set()

    async def reached(self, count: int = 1, *, timeout: float = 60) -> RecordedRequest:
        """Wait until ``count`` calls are held here (the last one is returned); fails naming
        the gate when they do not come within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if len(self.held) >= count:
                    return self.held[count - 1]
                seen = len(self.held)
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.name}: {count} call(s) never reached it within {timeout:g} s "
                    f"({seen} did)"
                )
            await asyncio.sleep(0.01)

    def release(self) -> None:
        """Let every held call go on, and every later one pass without stopping."""
        self._released.set()

    async def wait(self, recorded: RecordedRequest) -> None:
        """Run by the server: hold ``recorded`` until released (or its client goes away)."""
        with self._lock:
            self.held.append(recorded)
        gone = True
        try:
            while not self._released.is_set():
                await asyncio.sleep(0.01)
            gone = False
        finally:
            with self._lock:
                self.ended.append((time.time(), gone))
                self.left.append(recorded)

    def in_server(self, model: str | None = None) -> int:
        """How many calls (of ``model``) are held here or past the gate but not yet ended."""
        with self._lock:
            held = sum(1 for r in self.held if model in (None, r.model))
            left = sum(1 for r in self.left if model in (None, r.model))
        return held - left


@dataclass
class Call:
    """A tool call to answer with. A ``str`` ``arguments`` is sent verbatim (malformed JSON too)."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)


@dataclass
class Reply:
    text: str = ""
    calls: list[Call] = field(default_factory=list)
    usage: Usage | None = None
    """``None``: derived from the request, so replies stay deterministic without bookkeeping."""
    finish_reason: str | None = None
    """``None``: ``tool_calls``/``tool_use`` when there are calls, else ``stop``/``end_turn``."""
    delay: float = 0.0
    """Seconds before the response (streamed: its first event) starts. For a behaviour that
    takes time (a timeout, a retry-after); to decide an ordering, use ``hold``."""
    hold: Gate | None = None
    """Answer only once this gate is released (after ``delay``)."""
    chunk_chars: int = 40
    """Streamed: text and each tool call's arguments go out in pieces of this many characters."""
    chunk_delay: float = 0.0
    """Streamed: seconds between one piece of text or arguments and the next."""
    fail_after: int | None = None
    """Streamed: once this many pieces are out (all of them, if there are fewer), the API's
    mid-stream error event ends the stream in place of the rest; no usage is reported."""
    fail_message: str = "scripted failure in mid-stream"

    def __post_init__(self) -> None:
        if self.chunk_chars < 1:
            raise ValueError(f"Reply.chunk_chars must be at least 1, got {self.chunk_chars}")


@dataclass
class Fail:
    """Answer with an HTTP error status and a provider-shaped JSON error body."""

    status: int
    message: str = "scripted failure"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    hold: Gate | None = None


@dataclass
class Reset:
    """Drop the TCP connection with a reset instead of answering."""

    delay: float = 0.0
    hold: Gate | None = None


@dataclass
class RecordedRequest:
    api: Api
    model: str
    body: dict[str, Any]
    raw: bytes
    headers: dict[str, str]
    received_at: float
    answered: Step | None = None
    """The step actually played (a callable step is replaced by what it returned)."""
    reported_usage: Usage | None = None
    """The usage put in the response, in our neutral terms; ``None`` for failures and resets."""


REQUIRED_REFUSAL = 'tool_choice "required" is not supported; use "auto" or "none"'
"""What a server that takes only ``auto``/``none`` answers (vLLM and others say much the same)."""
CACHE_LOOKBACK = 20
"""Anthropic looks for an earlier cache entry at most this many blocks before a breakpoint."""

Step = Reply | Fail | Reset | Callable[[RecordedRequest], "Reply | Fail | Reset"]
Responder = Callable[[RecordedRequest], "Step | None"]
"""Answers what the script does not; returning ``None`` declines (the call is unexpected)."""
