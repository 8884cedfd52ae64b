"""The data that crosses boundaries: model messages, requests and responses, usage, stored rows.

Everything here is a pydantic model so the Temporal pydantic data converter can carry it, and
everything here is small: the conversation itself lives in the session store and travels by
reference (DESIGN invariant 2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(BaseModel):
    """One tool call as a model made it. ``arguments`` is the raw JSON text, unparsed."""

    id: str
    name: str
    arguments: str = "{}"


class Message(BaseModel):
    """One provider-neutral chat message."""

    role: Role
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    """For ``role == "tool"``: the call this message answers."""
    tool_name: str | None = None
    is_error: bool = False
    stored: str | None = None
    """The id of a stored row holding this message's text, which the activity that builds the
    request reads (a ``read_message`` result travels by reference, not through history)."""


class ToolSpec(BaseModel):
    """A tool offered to the model: its name, description and JSON schema."""

    name: str
    description: str
    parameters: dict[str, Any]


ToolChoice = Literal["required", "auto", "none"]


class ModelRequest(BaseModel):
    """A provider-neutral request; providers map it to their wire format."""

    system: str
    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)
    tool_choice: ToolChoice = "auto"
    max_output_tokens: int = 4096
    temperature: float | None = None
    """Dropped by the mapping for model families that refuse it
    (``errands.agent.model_catalog``)."""
    cache_upto: int | None = None
    """How many leading ``messages`` are the stable prefix: the rendered session, before the
    slot's own repair messages. Anthropic gets a cache breakpoint on the last of them; None:
    only the tools and system prefix is marked. A request rebuilt from the same prefix (the
    next attempt, a side question) must say the same, so it reads what this one wrote."""


class Usage(BaseModel):
    """One call's tokens as the provider reported them.

    ``input_tokens`` counts every prompt token, cache reads and writes included (the OpenAI
    way), and ``output_tokens`` every generated one, reasoning included: the parts are
    breakdowns, never added on top."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    """Input tokens read from the provider's prompt cache (both wires)."""
    cache_write_tokens: int = 0
    """Input tokens written to the prompt cache (Anthropic's ``cache_creation_input_tokens``)."""
    reasoning_tokens: int = 0
    """Output tokens spent reasoning (OpenAI's ``reasoning_tokens``, Anthropic's
    ``thinking_tokens``)."""


class ModelResponse(BaseModel):
    """What one model call produced."""

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: str = "stop"
    usage: Usage = Field(default_factory=Usage)
    model: str = ""


@dataclass(frozen=True)
class Delta:
    """A piece of a streamed answer, as the provider sent it: text, or (``call`` set) a piece
    of the arguments of the answer's tool call number ``index``, named ``call``."""

    piece: str
    call: str | None = None
    index: int = 0


DeltaSink = Callable[[Delta], None]
"""Takes each piece of a streamed answer as it arrives; must not block."""


class ModelUsage(BaseModel):
    """Tokens and calls spent on one model, failed attempts included."""

    calls: int = 0
    failed_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @classmethod
    def of(cls, usage: Usage | None, *, calls: int = 1, failed_calls: int = 0) -> ModelUsage:
        """``usage`` counted as ``calls`` calls: how every charge turns a response into a row."""
        u = usage or Usage()
        return cls(
            calls=calls,
            failed_calls=failed_calls,
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cached_tokens=u.cached_tokens,
            cache_write_tokens=u.cache_write_tokens,
            reasoning_tokens=u.reasoning_tokens,
        )

    def add(self, other: ModelUsage) -> None:
        self.calls += other.calls
        self.failed_calls += other.failed_calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cached_tokens += other.cached_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.reasoning_tokens += other.reasoning_tokens


UsagePart = Literal["rounds", "branches", "side_questions", "advisor", "compaction"]


class UsageLedger(BaseModel):
    """A task's spending, per part of the task and per model.

    ``parts[part][model]``: the same calls are never counted twice, so totals are plain sums.
    """

    parts: dict[str, dict[str, ModelUsage]] = Field(default_factory=dict)

    def charge(
        self,
        part: UsagePart,
        model: str,
        usage: Usage | None = None,
        *,
        calls: int = 1,
        failed_calls: int = 0,
    ) -> None:
        entry = self.parts.setdefault(part, {}).setdefault(model, ModelUsage())
        entry.add(ModelUsage.of(usage, calls=calls, failed_calls=failed_calls))

    def merge(self, part: UsagePart, per_model: dict[str, ModelUsage]) -> None:
        for model, usage in per_model.items():
            self.parts.setdefault(part, {}).setdefault(model, ModelUsage()).add(usage)

    def by_model(self) -> dict[str, ModelUsage]:
        out: dict[str, ModelUsage] = {}
        for per_model in self.parts.values():
            for model, usage in per_model.items():
                out.setdefault(model, ModelUsage()).add(usage)
        return out

    def total(self) -> ModelUsage:
        out = ModelUsage()
        for usage in self.by_model().values():
            out.add(usage)
        return out


MessageKind = Literal[
    "user",
    "ack",
    "reply",
    "branch",
    "summary",
    "note",
    "step",
    "tool_result",
    "tools",
    "mcp_holder",
    "notify_target",
]
"""What a stored row is. ``ack``: a delegating round's acknowledgement; ``branch``: one
subtask's outcome; ``step``/``tool_result``: rows of a branch's own thread; ``summary``: a
compaction summary; ``tools``: the MCP tool list a task pinned (in a session of its own);
``mcp_holder``: the worker queue holding a stateful MCP session (``activities._mcp_sessions``);
``notify_target``: a URL given with a task or schedule and its secret, in a session of its own
(``errands.contracts.notifications.stored_target_id``)."""


class NewMessage(BaseModel):
    """A row to append under a deterministic id (see ``errands.contracts.ids``)."""

    id: str
    session_id: str
    role: Role
    kind: MessageKind
    text: str = ""
    task_id: str | None = None
    round: int | None = None
    meta: dict[str, Any] = Field(default_factory=dict)


class StoredMessage(NewMessage):
    """A row as stored: ``seq`` orders a session and never changes once assigned."""

    seq: int
    created_at: str

    @property
    def shown_kind(self) -> str:
        """The kind frontends show: a compaction summary is a ``compaction``."""
        return "compaction" if self.kind == "summary" else self.kind

    @property
    def covers(self) -> list[int] | None:
        """For a compaction summary: the first and last seq it folds in."""
        return self.meta.get("covers") if self.kind == "summary" else None


class ModelPrice(BaseModel):
    """US dollars per million tokens."""

    input: float = 0.0
    output: float = 0.0
    cached: float = 0.0
    """Input tokens read from the prompt cache."""
    cache_write: float | None = None
    """Input tokens written to the prompt cache; None: 1.25 × input for ``anthropic:`` models
    (Anthropic's 5-minute cache), the input rate elsewhere (OpenAI charges nothing extra)."""


class AdvisorResult(BaseModel):
    """What the agent's ``advisor`` call returns, as the JSON text of its tool result."""

    type: Literal["advice", "limit_reached", "error"]
    advice: str | None = None
    error: str | None = None
    advisor_model: str
    remaining_uses: int

    def to_tool_text(self) -> str:
        return self.model_dump_json(exclude_none=True)
