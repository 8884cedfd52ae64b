"""What a script is made of: the steps that answer a request (``Reply`` with its ``Call``s,
``Fail``, ``Reset``, or a callable that picks one), the responder that answers what the script
does not, the ``RecordedRequest`` each answer is kept with, and the server's constants."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from errands.contracts.messages import Usage

Api = Literal["openai", "anthropic"]


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
    """Seconds before the response (streamed: its first event) starts."""
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


@dataclass
class Reset:
    """Drop the TCP connection with a reset instead of answering."""

    delay: float = 0.0


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
