"""Context that fits (SPEC §7): a request's input budget, token estimates that work offline, and
where a compaction cuts the session.

Estimates are bytes over a bytes-per-token ratio: no tokenizer (``tiktoken`` downloads its
encodings at first use). The ratio starts conservative and is calibrated per model from the
input tokens providers report for earlier requests. Pure data and functions, apart from the
estimator's small lock-guarded table.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Sequence

from errands.agent.model_catalog import ModelInfo
from errands.contracts.messages import Message, ModelRequest, StoredMessage
from errands.contracts.rows import StepMeta

MARGIN = 0.05
"""Share of the window left unused: estimates are estimates."""
COMPACT_AT = 0.80
"""A request whose estimate passes this share of its input budget compacts the session first."""
AFTER_COMPACTION = 0.35
"""A compaction aims the request at this share of its budget, leaving room to grow before the
next one: the instructions and tools, the new summary, and the newest messages word for word."""
SUMMARY_OUTPUT = 4_000
"""Most output tokens a summary call may write (capped by the model's own maximum)."""
MAX_COMPACTIONS = 3
"""Compactions one model call may make before it fails as ``context``: more would mean the
window cannot hold what must stay word for word."""

START_BYTES_PER_TOKEN = 3.0
"""Before any provider has reported: English prose runs near 4 bytes a token in the common
tokenizers, JSON and code nearer 3, so 3 overestimates the tokens of most text."""
_SAFETY = 0.9
"""A calibrated ratio is shrunk by this factor, so estimates stay on the high side."""
_RATIO_RANGE = (1.0, 8.0)
_SMOOTHING = 0.3
_MIN_CALIBRATION_BYTES = 400
"""Smaller requests are mostly fixed overhead, and say little about the ratio."""


def kept_tokens(budget: int, fixed_tokens: int) -> int:
    """How many tokens of the newest messages a compaction keeps word for word, when the rest
    of the request (instructions, tools, the slot's own messages) takes ``fixed_tokens`` and
    the new summary may take up to an eighth of the budget (``SUMMARY_OUTPUT`` at most)."""
    summary = min(SUMMARY_OUTPUT, budget // 8)
    return max(0, math.floor(AFTER_COMPACTION * budget) - fixed_tokens - summary)


def input_budget(info: ModelInfo, max_output_tokens: int) -> int:
    """Tokens a request's input may take: the window less the reserved output and the margin."""
    reserved = min(max_output_tokens, info.max_output)
    return max(0, math.floor(info.context_window * (1 - MARGIN)) - reserved)


def result_bytes(info: ModelInfo, max_output_tokens: int, percent: int) -> int:
    """The most UTF-8 bytes one tool result may take in a request to ``info``'s model:
    ``percent`` of its input budget, estimated at ``START_BYTES_PER_TOKEN`` (never less than
    2,000 bytes). The uncalibrated ratio keeps the figure the same for every request built from
    one round (its step, its advisor, a later side question), so they render one text."""
    budget = input_budget(info, max_output_tokens)
    return max(2_000, math.floor(budget * percent / 100 * START_BYTES_PER_TOKEN))


def request_bytes(request: ModelRequest) -> int:
    """The size of what a request asks the model to read: system text, tool schemas, messages."""
    size = len(request.system.encode())
    for tool in request.tools:
        size += len(tool.name) + len(tool.description.encode())
        size += len(json.dumps(tool.parameters, separators=(",", ":")).encode())
    return size + messages_bytes(request.messages)


def messages_bytes(messages: Sequence[Message]) -> int:
    return sum(message_bytes(m.text, [c.arguments for c in m.tool_calls]) for m in messages)


def message_bytes(text: str, arguments: Sequence[str] = ()) -> int:
    """One message's share of a request: its text, its tool calls' arguments, and the few
    tokens every message costs in its wire framing."""
    return len(text.encode()) + sum(len(a.encode()) + 32 for a in arguments) + 16


def row_bytes(row: StoredMessage) -> int:
    """What a stored row weighs once rendered (an upper bound: previews only shrink it)."""
    arguments = [c.arguments for c in StepMeta.of(row).tool_calls] if row.kind == "step" else []
    return message_bytes(row.text, arguments) + 64


class TokenEstimator:
    """Bytes per token for each model, calibrated from what providers report. Shared by a
    worker's activities; the lock keeps the table whole across their threads."""

    def __init__(self, start: float = START_BYTES_PER_TOKEN) -> None:
        self._start = start
        self._ratios: dict[str, float] = {}
        self._lock = threading.Lock()

    def ratio(self, spec: str) -> float:
        with self._lock:
            return self._ratios.get(spec, self._start)

    def tokens(self, spec: str, size_bytes: int) -> int:
        return math.ceil(size_bytes / self.ratio(spec))

    def observe(self, spec: str, size_bytes: int, input_tokens: int) -> None:
        """A provider counted ``input_tokens`` for a request of ``size_bytes``."""
        if input_tokens <= 0 or size_bytes < _MIN_CALIBRATION_BYTES:
            return
        low, high = _RATIO_RANGE
        seen = min(high, max(low, _SAFETY * size_bytes / input_tokens))
        with self._lock:
            old = self._ratios.get(spec)
            self._ratios[spec] = seen if old is None else old + _SMOOTHING * (seen - old)

    def shrink(
        self, spec: str, size_bytes: int, limit_tokens: int, counted: int | None = None
    ) -> None:
        """A request of ``size_bytes`` was refused as longer than ``limit_tokens`` (``counted``
        tokens, when the provider said): from now on estimate at least that many for it."""
        ratio = size_bytes / max(counted or 0, int(limit_tokens * 1.1))
        low, _ = _RATIO_RANGE
        with self._lock:
            self._ratios[spec] = max(low, min(self._ratios.get(spec, self._start), ratio))


_COUNTED = re.compile(
    r"(?:resulted in|you requested|too long:?|prompt has|contains)"
    r"\s*(\d[\d,]*)\s*(?:input )?tokens",
    re.IGNORECASE,
)


def counted_tokens(refusal: str) -> int | None:
    """The tokens a provider says a refused request held ("your messages resulted in 17020
    tokens", "prompt is too long: 210000 tokens > 200000 maximum"), when it says."""
    found = _COUNTED.search(refusal)
    return int(found.group(1).replace(",", "")) if found else None


_STATED = re.compile(
    r"maximum context length is\s*(\d[\d,]*)|>\s*(\d[\d,]*)\s*maximum"
    r"|context (?:size|window|limit)(?: is| of)?\s*\(?(\d[\d,]*)",
    re.IGNORECASE,
)


def stated_window(refusal: str) -> int | None:
    """The window a provider's refusal says the model has ("maximum context length is 8192
    tokens", "… > 200000 maximum"), when it says."""
    found = _STATED.search(refusal)
    if not found:
        return None
    return int(next(g for g in found.groups() if g).replace(",", ""))


def is_cut_point(row: StoredMessage) -> bool:
    """A compaction may end just before this row: a user's message starts a task, a round's
    acknowledgement its delegate exchange (its branches' rows follow it), and a branch's step
    its tool calls (their results follow it), so a cut never parts a call from its results."""
    return row.kind in ("user", "ack", "step")


def compaction_cut(rows: Sequence[StoredMessage], keep_bytes: int) -> int:
    """How many of ``rows`` (oldest first) a compaction folds into the summary: as few as leave
    at most ``keep_bytes`` of the newest rows word for word, ending at a cut point; when even
    the newest cut point leaves more, that one. 0: there is no cut point to fold up to."""
    tail = 0
    chosen = 0
    for index in range(len(rows) - 1, 0, -1):
        tail += row_bytes(rows[index])
        if tail > keep_bytes:
            break
        if is_cut_point(rows[index]):
            chosen = index
    if chosen:
        return chosen
    return next((i for i in range(len(rows) - 1, 0, -1) if is_cut_point(rows[i])), 0)


def pieces(rows: Sequence[StoredMessage], piece_bytes: int) -> list[list[StoredMessage]]:
    """``rows`` in consecutive pieces of about ``piece_bytes`` each, each ending just before a
    cut point where it can (so a piece's summary never parts a call from its results), and
    anywhere once a piece has grown to twice the size. A row bigger than that is a piece of
    its own, cut down when it is written out for the summary."""
    out: list[list[StoredMessage]] = []
    current: list[StoredMessage] = []
    size = 0
    for row in rows:
        weight = row_bytes(row)
        full = size + weight > piece_bytes
        if current and full and (is_cut_point(row) or size + weight > 2 * piece_bytes):
            out.append(current)
            current, size = [], 0
        current.append(row)
        size += weight
    if current:
        out.append(current)
    return out
