"""Inputs, outputs, queries and updates of the workflows: the contract frontends rely on.

One typed model per call so fields can be added without breaking running histories. Nothing here
carries the conversation: ids, counters and small decisions only (DESIGN invariant 2).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from errands.activity_io import RoundStepInput
from errands.asking import QuestionSet
from errands.contracts import Message, ModelUsage, ToolCall, UsageLedger
from errands.pricing import ModelPrice
from errands.side_questions import SIDE_TIMEOUT_SECONDS
from errands.subtask_types import SubtaskTypeInfo

TaskStatusName = Literal["running", "waiting_for_user", "replied", "failed", "canceled"]

ErrorKind = Literal[
    "exhausted",
    "credential",
    "permission",
    "unknown_model",
    "invalid_request",
    "payload_too_large",
    "transient",
    "internal",
    "canceled",
    "terminated",
    "timed_out",
]
"""Why a task failed. Each kind but ``exhausted``/``internal``/``canceled``/``terminated``/
``timed_out`` comes from a provider error classified in ``errands.providers.classify``; the last
two are an operator's termination and a workflow timeout, which end a task without a result."""


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
    """USD per million tokens for the models this task may use (see errands.pricing)."""
    carry: TaskState | None = None
    """Set by continue-as-new: where the previous run left off. Never the transcript."""


class SlotResume(BaseModel):
    """Where a round stood when the task continued as new while a question was pending."""

    round: int
    upto: int
    final_reason: str | None = None
    slot_index: int
    repair: int
    extra: list[Message]
    """The slot's own messages so far (repairs and tool exchanges of this round only)."""
    steps_left: int
    reason: str | None = None
    call: ToolCall
    questions: QuestionSet
    deadline: datetime
    """When the question expires, kept across runs so the durable timer does not restart."""


class TaskState(BaseModel):
    """Everything a task carries from one run to the next: ids, counters, ledger, decisions in
    flight. Small by construction: it never holds the conversation."""

    types: list[SubtaskTypeInfo] = Field(default_factory=list)
    started_at: datetime | None = None
    round: int = 0
    rounds: int = 0
    steps: int = 0
    ledger: UsageLedger = Field(default_factory=UsageLedger)
    advisor_uses: int = 0
    asks: int = 0
    retries: int = 0
    streak: int = 0
    last_signature: str = ""
    last_round: RoundStepInput | None = None
    answer_errors: list[str] = Field(default_factory=list)
    resume: SlotResume | None = None
    runs: int = 1


class TaskError(BaseModel):
    kind: ErrorKind
    message: str


class TaskResult(BaseModel):
    task_id: str
    session_id: str
    status: TaskStatusName
    reply: str | None = None
    error: TaskError | None = None
    rounds: int = 0
    steps: int = 0
    usage: UsageLedger = Field(default_factory=UsageLedger)
    cost_usd: float = 0.0
    """The usage priced with the task's price table; models without a price count as 0."""
    last_round: RoundStepInput | None = None
    """The latest round's request, by reference: what a side question replays."""
    side_question_model: str | None = None
    side_question_timeout_seconds: float | None = None
    """The task's side-question timeout, for side questions after it finished (None: the
    result of a task from before it was recorded; the default applies)."""


class TaskStatus(TaskResult):
    """What ``errands status`` shows: the result so far, plus the live part."""

    round: int = 0
    phase: str = ""
    """What the task is doing right now, in a few words."""
    pending_question: dict[str, Any] | None = None
    answer_errors: list[str] = Field(default_factory=list)
    """Answers sent by signal that were invalid and ignored, newest last."""


class SubtaskInput(BaseModel):
    task_id: str
    session_id: str
    round: int
    ordinal: int
    subtask_type: str
    prompt: str
    references: list[int] = Field(default_factory=list)
    """Catalog indexes, resolved by the branch's activity against ``catalog_upto_seq``."""
    catalog_upto_seq: int
    params: dict[str, Any] = Field(default_factory=dict)
    model: str
    step_limit: int
    model_timeout_seconds: float = 300
    model_max_attempts: int = 6
    max_output_tokens: int = 4096
    max_history_events: int = 1500
    continue_as_new: bool = True
    first_step: int = 0
    """Set by continue-as-new: the step this run starts at (the thread is already open)."""
    usage: dict[str, ModelUsage] = Field(default_factory=dict)
    """Set by continue-as-new: what earlier runs of this branch spent."""


class SubtaskResult(BaseModel):
    status: Literal["completed", "failed"]
    error: str | None = None
    steps: int = 0
    usage: dict[str, ModelUsage] = Field(default_factory=dict)


class SideQuestion(BaseModel):
    """The ``ask_side_question`` update's input."""

    question: str


class AnswerReceipt(BaseModel):
    """What the ``answer_question`` update returns once the answer is accepted."""

    question_set_id: str
    status: str


TaskInput.model_rebuild()
