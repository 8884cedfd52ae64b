"""Inputs and outputs of the activities: ids, positions and small decisions, never a transcript."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from errands.contracts.approvals import ApprovalNeed
from errands.contracts.limits import (
    HEARTBEAT_TIMEOUT_SECONDS,
    SIDE_TIMEOUT_SECONDS,
    TOOL_MAX_ATTEMPTS,
    TOOL_TIMEOUT_SECONDS,
)
from errands.contracts.messages import (
    AdvisorResult,
    ModelUsage,
    ToolCall,
    Usage,
)
from errands.contracts.principals import Principal
from errands.contracts.rounds import RoundStepInput, RoundView
from errands.contracts.subtasks import SubtaskDraft


class AppendMessageInput(BaseModel):
    """A message the user sent into the running task, appended to the session once."""

    task_id: str
    session_id: str
    message_id: str
    text: str
    mode: str
    by: Principal | None = None
    """Who sent it (``message_received`` names them)."""


class SessionRef(BaseModel):
    session_id: str


class ReadMessageInput(BaseModel):
    """A round's ``read_message`` call: the page it asks for is stored under ``result_id`` and
    reaches the next step by reference (``Message.stored``), never through history."""

    session_id: str
    task_id: str
    arguments: str
    result_id: str


class RememberInput(BaseModel):
    session_id: str
    decision_id: str
    record: dict[str, Any]


class RememberApprovalInput(BaseModel):
    """The user approved every call of ``tool`` in the session (``approve_always``)."""

    session_id: str
    tool: str


class JoinInput(BaseModel):
    task_id: str
    session_id: str
    reason: str = ""
    """Why no model could answer; kept with the reply so a recovered task still says so."""


class RecordBranchInput(BaseModel):
    task_id: str
    session_id: str
    round: int
    ordinal: int
    thread_id: str
    draft: SubtaskDraft
    status: str
    error: str | None = None
    """For a failed branch: the reason the main model reads."""


class OpenBranchInput(BaseModel):
    thread_id: str
    task_id: str
    session_id: str
    catalog_upto_seq: int
    prompt: str
    references: list[int] = Field(default_factory=list)
    view: RoundView | None = None
    """The delegating step's view (None: the latest summary up to ``catalog_upto_seq``)."""


class BranchStepInput(BaseModel):
    thread_id: str
    step: int
    task_id: str = ""
    """The branch's task, whose pinned MCP tool list the step offers (none when empty)."""
    session_id: str = ""
    """The task's session, whose approve-always choices the step's calls are checked against."""
    model: str
    subtask_type: str
    last_step: bool
    max_output_tokens: int = 4096
    open: OpenBranchInput | None = None
    """Open the branch's thread first (its first step)."""
    record: RecordBranchInput | None = None
    """Write the branch's row when this step ends the branch (no tool calls)."""


class BranchStepOutput(BaseModel):
    tool_calls: int
    text_chars: int
    usage: Usage
    model: str
    attempt: int = 1
    replayed: bool = False
    """True when the step was already stored: no model call was made."""
    compaction: ModelUsage | None = None
    """The summary calls this attempt made to fit the thread (the ledger's ``compaction``)."""
    approvals: list[ApprovalNeed] = Field(default_factory=list)
    """The step's tool calls that wait for the user before they run."""
    servers: dict[int, str] = Field(default_factory=dict)
    """The MCP server of each of the step's calls to an MCP tool, by the call's index: the
    workflow sends a call to the worker holding its server's session, once it knows it."""


class McpHolder(BaseModel):
    """A worker's queue that holds a stateful MCP session (``"session": "task"`` or
    ``"branch"``): the calls of its scope with its server go there."""

    server: str
    scope: str
    """The session's owner: a task id, a branch's thread id, or ``ids.mcp_main_scope``."""
    queue: str


class SessionRouting(BaseModel):
    """How a tool call reached the worker it runs on (stateful MCP sessions only)."""

    holder: str | None = None
    """The queue the workflow sent it to, as the holder of the call's session (None: the shared
    queue)."""
    replacing: str | None = None
    """A holder queue whose worker did not pick the call up in time: presumed gone, its session
    with it; the worker running this call opens a new one and tells the model."""


class CloseSessionsInput(BaseModel):
    """The scopes whose stateful MCP sessions a worker closes: their task or branch ended."""

    scopes: list[str]


class RunToolInput(BaseModel):
    thread_id: str
    step: int
    call_index: int
    subtask_type: str
    task_id: str = ""
    timeout_seconds: float = TOOL_TIMEOUT_SECONDS
    """How long the tool itself may run; the activity's start-to-close is a little longer."""
    max_attempts: int = TOOL_MAX_ATTEMPTS
    """The activity's attempts: the last one turns an unreachable server into an error result."""
    verdict: str | None = None
    """Set when the call must not run (denied, not approved in time, cancelled): this text is
    stored as its error result instead."""
    approved: bool = False
    """The user approved this call (it waited for approval)."""
    by: list[Principal] = Field(default_factory=list)
    """Who approved it (both, for policy ``two``) or who denied it: ``tool_approved`` and
    ``tool_denied`` name them."""
    routing: SessionRouting = Field(default_factory=SessionRouting)


class RunRoundToolInput(BaseModel):
    """One call of the main agent to a Python or MCP tool; its result is stored under
    ``result_id``."""

    task_id: str
    result_id: str
    call: ToolCall
    timeout_seconds: float = TOOL_TIMEOUT_SECONDS
    max_attempts: int = TOOL_MAX_ATTEMPTS
    verdict: str | None = None
    """As ``RunToolInput.verdict``."""
    approved: bool = False
    """As ``RunToolInput.approved``."""
    by: list[Principal] = Field(default_factory=list)
    """As ``RunToolInput.by``."""
    routing: SessionRouting = Field(default_factory=SessionRouting)


class RunToolOutput(BaseModel):
    ok: bool
    chars: int
    holder: McpHolder | None = None
    """The session the call ran in, when its server's session is ``task`` or ``branch``."""


class AdvisorInput(BaseModel):
    round: RoundStepInput
    """The round step that called ``advisor``: its request is the advisor's context."""
    question: str
    model: str
    uses: int
    """Successful consultations so far in this task."""
    limit: int


class AdvisorOutput(BaseModel):
    result: AdvisorResult
    usage: Usage
    model: str
    attempt: int = 1


class SideQuestionInput(BaseModel):
    task_id: str
    question: str
    model: str
    """The side-question model; the preferred path needs it to be the round's model."""
    round: RoundStepInput | None = None
    """The task's latest round request, or None when no round has run yet."""
    session_id: str
    timeout_seconds: float = SIDE_TIMEOUT_SECONDS
    """The time each path gets (the preferred call, then the fallback, each its own activity)."""
    heartbeat_timeout_seconds: float = HEARTBEAT_TIMEOUT_SECONDS
    model_task_queue: str | None = None
    """As ``RoundSettings.model_task_queue``; None: the workflow's own queue."""
    path: Literal["both", "preferred", "fallback"] = "both"
    """Which path this activity runs: ``both`` in one activity (runs from before the paths had
    an activity each), or only one of them."""


class SideAnswer(BaseModel):
    answer: str
    """Empty only from a ``path="preferred"`` activity that got no answer: the fallback follows."""
    path: Literal["preferred", "fallback"]
    model: str
    usage: dict[str, ModelUsage] = Field(default_factory=dict)


# -- what the store calls return ---------------------------------------------------------------


class StoreOutput(BaseModel):
    """What a store call returns. Until 0.2.0 these calls returned a bare value (a text, a
    number, a flag, the decisions), which recorded histories still hold: such a value is read
    into the field ``BARE`` names, so every history replays."""

    BARE: ClassVar[str]

    @model_validator(mode="before")
    @classmethod
    def _from_bare_value(cls, value: Any) -> Any:
        if isinstance(value, dict) and cls.BARE in value:
            return value
        return {cls.BARE: value}


class AckOutput(StoreOutput):
    """``append_ack``: the acknowledgement as stored (a retried round finds its first one)."""

    BARE: ClassVar[str] = "text"
    text: str


class MessageOutput(StoreOutput):
    """``append_message``: the position of the message in the session."""

    BARE: ClassVar[str] = "seq"
    seq: int


class ReplyOutput(StoreOutput):
    """``append_reply``: the reply as stored."""

    BARE: ClassVar[str] = "text"
    text: str


class ReadMessageOutput(StoreOutput):
    """``read_message``: whether the result stored for the call is an error."""

    BARE: ClassVar[str] = "is_error"
    is_error: bool


class DecisionsOutput(StoreOutput):
    """``recall_decisions``: the session's remembered answers by decision id."""

    BARE: ClassVar[str] = "decisions"
    decisions: dict[str, dict[str, Any]]


class JoinOutput(StoreOutput):
    """``deterministic_join``: the reply joined from the completed branches, or None when none
    completed."""

    BARE: ClassVar[str] = "text"
    text: str | None
