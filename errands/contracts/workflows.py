"""Inputs, outputs, queries and updates of the workflows: the contract frontends rely on.

One typed model per call so fields can be added without breaking running histories. Nothing here
carries the conversation: ids, counters and small decisions only (DESIGN invariant 2).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from errands.contracts.activities import McpHolder
from errands.contracts.approvals import ApprovalRequest
from errands.contracts.asking import QuestionSet
from errands.contracts.limits import (
    HEARTBEAT_TIMEOUT_SECONDS,
    SIDE_TIMEOUT_SECONDS,
    TOOL_MAX_ATTEMPTS,
    TOOL_TIMEOUT_SECONDS,
)
from errands.contracts.messages import Message, ModelPrice, ModelUsage, ToolCall, UsageLedger
from errands.contracts.notifications import NotifyTarget
from errands.contracts.principals import Principal
from errands.contracts.rounds import RoundStepInput, RoundView
from errands.contracts.subtasks import SubtaskTypeInfo
from errands.errors import FailureKind, TaskFailed

WAKE_SIGNAL = "wake_for_upgrade"
"""TaskWorkflow's no-op signal: ``errands upgrade`` sends it so a parked task runs a workflow
task and moves to the current version."""
CANCEL_REQUESTED_SIGNAL = "cancel_requested"
"""Sent by the client just before it cancels a task: who asks (a ``Principal``), so the task's
``canceled`` event names them."""

TaskStatusName = Literal["running", "waiting_for_user", "replied", "failed", "canceled"]


def model_queue(template: str | None, model: str) -> str | None:
    """The task queue a model activity for ``model`` is scheduled on: ``template`` with
    ``{provider}`` replaced by the model's provider (``openai:gpt-4.1`` → ``openai``); None
    (no template): the workflow's own queue. Pure: workflows call it."""
    if not template:
        return None
    return template.replace("{provider}", model.partition(":")[0])


class RoundSettings(BaseModel):
    """The constants of SPEC §1, carried in the task input so a running task never changes them."""

    max_subtasks: int = 8
    """Most subtasks one ``delegate`` call may start."""
    max_repairs: int = 3
    """Repairs of a rejected control call per slot (so 4 attempts)."""
    step_budget: int = 24
    """Model steps of the main agent per task, shared by both slots and every repair."""
    branch_step_limit: int = 12
    """Model steps of one branch."""
    same_failure_rounds: int = 3
    """Rounds in a row whose branches all failed the same way before the round is final."""
    deadline_seconds: float = 6 * 3600
    """Wall-clock time after which the next round is final."""
    max_output_tokens: int = 4096
    model_timeout_seconds: float = 300
    """Start-to-close timeout of one model call."""
    model_max_attempts: int = 6
    """Attempts of one model call on transient errors before the slot gives up."""
    heartbeat_timeout_seconds: float = HEARTBEAT_TIMEOUT_SECONDS
    """Heartbeat timeout of model and tool activities: a dead worker's attempt fails this soon,
    and a cancellation reaches a running call through its heartbeats."""
    tool_timeout_seconds: float = TOOL_TIMEOUT_SECONDS
    """How long one work-tool call may run before it is stopped and reported to the model."""
    tool_max_attempts: int = TOOL_MAX_ATTEMPTS
    """Attempts of one work-tool call whose server cannot be reached or whose worker died."""
    model_task_queue: str | None = None
    """Task queue of the model activities (``{provider}`` → the model's provider); None: the
    workflow's own. Lets a queue's rate limit hold across workers (docs/operations.md)."""
    round_retry_limit: int = 5
    """Times a round failed as transient is retried (with a growing wait) before the task fails."""
    round_retry_seconds: float = 30
    """First wait before a transient round is retried; doubles each time."""
    ask_timeout_hours: float = 24
    """How long a question waits for the user before the model is told no one answered."""
    advisor_limit: int = 3
    """Successful advisor consultations per task; failed ones do not count."""
    side_question_timeout_seconds: float = SIDE_TIMEOUT_SECONDS
    max_history_events: int = 1500
    """A run continues as new past this many history events (or when Temporal suggests it),
    far inside Temporal's limits (10,240-event warning, 51,200-event termination)."""
    continue_as_new: bool = True
    """Off only to compare with a single-run history (tests, benchmarks)."""
    rounds_per_run: int | None = None
    """Continue as new after this many rounds in one run as well; None: only by history size."""
    notify_retry_seconds: float = 24 * 3600.0
    """How long a notification keeps being retried before it fails (SPEC §11)."""


class TaskInput(BaseModel):
    task_id: str
    """Also the workflow id."""
    session_id: str
    text: str
    model: str
    """``provider:model`` of the primary slot, resolved by the frontend (``demo`` offline)."""
    fallback_model: str | None = None
    advisor_model: str | None = None
    """``provider:model`` of the advisor; None: the task's model."""
    side_question_model: str | None = None
    """``provider:model`` for side questions; None: the task's model (the cache-friendly path)."""
    headless: bool = False
    """No one will answer questions: ``ask_user`` gets an explicit assumption result."""
    search_attributes: bool = True
    """Keep the Errands* search attributes current (they must be registered on the namespace)."""
    settings: RoundSettings = Field(default_factory=RoundSettings)
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    """USD per million tokens for the models this task may use (see errands.agent.pricing)."""
    carry: TaskState | None = None
    """Set by continue-as-new: where the previous run left off. Never the transcript."""
    queued: list[str] = Field(default_factory=list)
    """Messages queued on the task before this one, each to become a task once this one ends."""
    queued_ids: list[str] = Field(default_factory=list)
    """The message ids of ``queued``, in order (empty for messages queued before ids were
    kept): under each, the sender's start was recorded when the message was queued."""
    queued_as: str | None = None
    """The message id this task was queued as: its start, recorded under that id when the
    message was queued, becomes this task's (``OpenTaskInput.queued_as``)."""
    owner: str | None = None
    """The id of the principal the task (and its session) belongs to (SPEC §10), also its
    ``ErrandsOwner`` search attribute; never a token. None: a task from before owners, or one
    an operator started in a session nobody owns (admins only see it where principals are on)."""
    owner_role: str | None = None
    """The owner's role when they started the task (their ``role:`` quotas apply); None when
    someone else (an admin, the operator) started it for them."""
    notify: list[NotifyTarget] = Field(default_factory=list)
    """Where its changes of state are notified (SPEC §11), by reference: resolved by the
    frontend from ``ERRANDS_WEBHOOKS`` and the start's own ``notify``; never a secret."""
    schedule: str | None = None
    """The name of the schedule whose fire started it (its ``ErrandsSchedule``), if one did."""


class Slot(BaseModel):
    """One model's attempt at a round, as far as it has got. The round decider steps it; while it
    waits on the user it travels through continue-as-new as ``TaskState.resume``, so the next
    run carries on where this one stopped. (The field names are those older runs carried.)"""

    model_config = ConfigDict(
        validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )
    """Fields keep the names older runs wrote (an older worker reads what a newer one carries
    across continue-as-new); code reads them by their Python names."""

    round: int
    upto_seq: int = Field(
        validation_alias=AliasChoices("upto", "upto_seq"), serialization_alias="upto"
    )
    """The session position (a ``seq``) the round renders up to (``upto`` on the wire)."""
    final_reason: str | None = None
    """Why the round is final, when it is: decided once, as the round began."""
    slot_index: int = 0
    """0: the primary model, 1: the fallback."""
    repair: int = 0
    """Repairs of a rejected control call so far on this slot."""
    extra: list[Message] = Field(default_factory=list)
    """The slot's own messages so far (repairs and tool exchanges of this round only)."""
    steps_left: int = 0
    reason: str | None = None
    """Why this attempt's steps are final: the round's reason, or the user's dismissal."""
    call: ToolCall | None = None
    """While the slot waits on the user: the ``ask_user`` call the answer becomes the result of."""
    questions: QuestionSet | None = None
    """While the slot waits on the user: the question set pending."""
    deadline: datetime | None = None
    """When the question expires, kept across runs so the durable timer does not restart."""

    @property
    def name(self) -> Literal["primary", "fallback"]:
        return "fallback" if self.slot_index else "primary"


class SteerMark(BaseModel):
    message_id: str
    seq: int


class SendMessage(BaseModel):
    """The ``send_message`` update's input: a message of the user into the running task."""

    text: str
    mode: Literal["steer", "interrupt", "queue"] = "steer"
    by: Principal | None = None
    """Who sent it, as the client established (``message_received`` names them)."""


class MessageReceipt(BaseModel):
    """What became of a message sent into a task."""

    message_id: str
    mode: str
    status: Literal["accepted", "queued", "started"]
    """``accepted``: in the session, shown to the agent before its next step; ``queued``: the
    session's next task once this one ends; ``started``: queued on a task that had ended, it
    became the session's next task at once (``task_id``)."""
    task_id: str | None = None
    """The task the message started (status ``started``)."""


class TaskState(BaseModel):
    """Everything a task carries from one run to the next: ids, counters, ledger, decisions in
    flight. Small by construction: it never holds the conversation."""

    model_config = ConfigDict(
        validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )
    """Fields keep the names older runs wrote (an older worker reads what a newer one carries
    across continue-as-new); code reads them by their Python names."""

    types: list[SubtaskTypeInfo] = Field(default_factory=list)
    unopened: bool = False
    """The task's opening (its message stored, its types recorded) has yet to run: round 0's
    first step carries it (since 0.3.0), and a run continued before one succeeded carries it
    on. Runs before 0.3.0 opened with a store call of its own, first thing."""
    mcp_holders: list[McpHolder] = Field(default_factory=list)
    """The stateful MCP sessions of the task and its main agent, and the workers holding them:
    closed when the task ends."""
    started_at: datetime | None = None
    round: int = 0
    rounds: int = 0
    """Rounds run so far (see ``TaskResult.rounds``)."""
    attempts: int = 0
    """Decisions attempted so far (see ``TaskResult.attempts``)."""
    steps: int = 0
    ledger: UsageLedger = Field(default_factory=UsageLedger)
    advisor_uses: int = 0
    asks: int = 0
    retries: int = 0
    streak: int = 0
    last_signature: str = ""
    last_round: RoundStepInput | None = None
    answer_errors: list[str] = Field(default_factory=list)
    resume: Slot | None = None
    """A round waiting on the user when the previous run handed over."""
    runs: int = 1
    approvals: list[ApprovalRequest] = Field(default_factory=list)
    """Tool calls waiting for the user's approval, oldest first (the task's and its branches')."""
    messages: int = 0
    """Messages the user sent into the task (``send_message``), which number their ids."""
    steers: list[SteerMark] = Field(default_factory=list)
    """The steering messages in the session, with where they are in it."""
    seen_upto_seq: int = Field(
        default=0,
        validation_alias=AliasChoices("seen_upto", "seen_upto_seq"),
        serialization_alias="seen_upto",
    )
    """The furthest session position a step of the main agent has shown the model (``seen_upto``
    on the wire)."""
    queued: list[str] = Field(default_factory=list)
    """Messages queued to become the session's next tasks, oldest first."""
    queued_ids: list[str] = Field(default_factory=list)
    """Their message ids, in order (``TaskInput.queued_ids``)."""


class TaskError(BaseModel):
    kind: FailureKind
    message: str


class TaskResult(BaseModel):
    """A task as every frontend shows it: the ``status`` query while it runs, the workflow's
    result once it has ended (``errands status --json``, ``GET /v1/tasks/{id}``, ``Client``)."""

    task_id: str
    session_id: str
    status: TaskStatusName
    reply: str | None = None
    replied_by: Literal["model", "join"] | None = None
    """Who wrote the reply: a model's ``final_reply``, or the deterministic join of the completed
    branches when no model could answer (``join_reason`` says why)."""
    join_reason: str | None = None
    error: TaskError | None = None
    last_error: TaskError | None = None
    """From a round's transient failure until it goes through (or the task gives up): the error
    it failed with, while ``phase`` says when it is retried. None otherwise."""
    rounds: int = 0
    """Rounds the task has run (a round retried after a provider outage counts once)."""
    attempts: int = 0
    """Decisions attempted: one per round, plus one per retry of a round that failed transiently."""
    steps: int = 0
    """Model steps of the main agent, repairs included (the step budget counts these)."""
    usage: UsageLedger = Field(default_factory=UsageLedger)
    cost_usd: float = 0.0
    """The usage priced with the task's price table; models without a price count as 0."""
    round: int = 0
    """The round in progress, or the last one once the task has ended."""
    phase: str = ""
    """What the task is doing right now, in a few words."""
    pending_question: dict[str, Any] | None = None
    """The question set waiting for the user (``errands answer`` answers it)."""
    pending_approval: dict[str, Any] | None = None
    """The oldest tool call waiting for the user's approval (``errands approve`` / ``deny``)."""
    undelivered: list[str] = Field(default_factory=list)
    """Messages sent into the task that arrived as it ended: the agent never saw them."""
    next_task: str | None = None
    """The task a queued message became once this one ended."""
    answer_errors: list[str] = Field(default_factory=list)
    """Answers sent by signal that were invalid and ignored, newest last."""
    last_round: RoundStepInput | None = None
    """The latest round's request, by reference (ids and positions): what a side question
    replays, also after the task has ended."""
    side_question_model: str | None = None
    """The model that answers side questions about this task."""
    side_question_timeout_seconds: float | None = None
    """The task's side-question timeout, for side questions after it finished (None: the result
    of a task from before it was recorded; the default applies)."""

    def raise_for_status(self) -> TaskResult:
        """This result if the task replied; ``errands.errors.TaskFailed`` otherwise."""
        if self.status != "replied":
            raise TaskFailed(self)
        return self

    def public(self) -> dict[str, Any]:
        """The JSON every frontend prints, running or ended."""
        return self.model_dump(mode="json")


class SubtaskInput(BaseModel):
    """One branch: its subtask, where its references point, and the task's settings."""

    task_id: str
    session_id: str
    round: int
    ordinal: int
    subtask_type: str
    prompt: str
    references: list[int] = Field(default_factory=list)
    """Catalog indexes, resolved by the branch's activity against ``catalog_upto_seq``."""
    catalog_upto_seq: int
    catalog_view: RoundView | None = None
    """The delegating step's view of the session, which ``references`` number."""
    params: dict[str, Any] = Field(default_factory=dict)
    model: str
    settings: RoundSettings = Field(default_factory=RoundSettings)
    """The task's settings, whole: the branch reads its step limit, timeouts and attempts here."""
    headless: bool = False
    """As the task's: a call that needs approval is not run, there being nobody to ask."""
    first_step: int = 0
    """Set by continue-as-new: the step this run starts at (the thread is already open)."""
    usage: dict[str, ModelUsage] = Field(default_factory=dict)
    """Set by continue-as-new: what earlier runs of this branch spent."""
    compaction: dict[str, ModelUsage] = Field(default_factory=dict)
    """Summary calls of the runs before a continue-as-new (the ledger's ``compaction``)."""
    mcp_holders: list[McpHolder] = Field(default_factory=list)
    """The stateful MCP sessions the runs before a continue-as-new reached."""
    asks_no_patch: bool = False
    """Set by the tasks of 0.3.0 and later, whose branches ask no patch: they run the path of
    the code that starts them. A branch started before asks the patch it asked then
    (``workflows._patches.RunPatches.of_branch``)."""

    @model_validator(mode="before")
    @classmethod
    def _settings_from_flat_fields(cls, value: Any) -> Any:
        """Until 0.2.0 a branch got each setting as a field of its own: gather them into
        ``settings`` (a tolerant reader of 0.1.0's input, which is out of the support window)."""
        if not isinstance(value, dict) or "settings" in value:
            return value
        flat = {name: value[name] for name in _FLAT_BRANCH_SETTINGS if name in value}
        if "step_limit" in value:
            flat["branch_step_limit"] = value["step_limit"]
        rest = {k: v for k, v in value.items() if k not in _FLAT_BRANCH_SETTINGS}
        rest.pop("step_limit", None)
        return {**rest, "settings": flat}


_FLAT_BRANCH_SETTINGS = (
    "model_timeout_seconds",
    "model_max_attempts",
    "heartbeat_timeout_seconds",
    "tool_timeout_seconds",
    "tool_max_attempts",
    "ask_timeout_hours",
    "model_task_queue",
    "max_output_tokens",
    "max_history_events",
    "continue_as_new",
)
"""The settings a 0.1.0 branch carried as fields of its input."""


class SubtaskResult(BaseModel):
    status: Literal["completed", "failed"]
    error: str | None = None
    steps: int = 0
    usage: dict[str, ModelUsage] = Field(default_factory=dict)
    compaction: dict[str, ModelUsage] = Field(default_factory=dict)
    """The summary calls that kept the branch's thread within its model's window."""


class SideQuestion(BaseModel):
    """The ``ask_side_question`` update's input."""

    question: str


class AnswerReceipt(BaseModel):
    """What the ``answer_question`` update returns once the answer is accepted."""

    question_set_id: str
    status: str


TaskInput.model_rebuild()
