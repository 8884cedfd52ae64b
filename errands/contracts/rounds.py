"""A round's contracts (SPEC §1): its preparation, its model steps, and what the store holds of
it (the acknowledgement, the reply). Ids, positions and small decisions, never a transcript."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from errands.contracts.approvals import ApprovalNeed
from errands.contracts.messages import Message, ModelResponse, ModelUsage, Usage
from errands.contracts.subtasks import SubtaskDraft, SubtaskTypeInfo


class PrepareRoundInput(BaseModel):
    task_id: str
    session_id: str
    round: int
    owner: str | None = None
    """The task's owner: the activity checks their daily cost quota (``RoundState.over_quota``)."""
    owner_role: str | None = None
    """The owner's role when the task started (``TaskInput.owner_role``), for ``role:`` quotas."""


class BranchOutcome(BaseModel):
    ordinal: int
    type: str
    status: str
    error: str | None = None


class RoundState(BaseModel):
    """What the store already holds for a round: the basis of recovery without inference."""

    upto_seq: int
    """The session position this round renders up to."""
    reply: str | None = None
    """The task's stored reply, if a previous attempt already wrote it."""
    join_reason: str | None = None
    """Set when that reply is a deterministic join: why no model could answer."""
    ack: str | None = None
    ack_subtasks: list[SubtaskDraft] = Field(default_factory=list)
    ack_upto_seq: int | None = None
    branches: list[BranchOutcome] = Field(default_factory=list)
    over_quota: str | None = None
    """Set when the task's owner has passed their daily cost quota (``ERRANDS_QUOTAS``): why,
    in words the model and the user read. The round is then the task's final one."""
    spent: Usage | None = None
    """Found by a retry of the round step that wrote the reply or acknowledgement: what that
    step's model call spent (``WrittenByStep.usage``), for the ledger."""

    @property
    def settled(self) -> bool:
        """The store holds the round's end already: the task's reply, or the round's
        acknowledgement (its branches then run, or ran)."""
        return self.reply is not None or self.ack is not None


class OpenTaskInput(BaseModel):
    task_id: str
    session_id: str
    text: str
    prepare_first_round: bool = False
    """Also read what the store holds for round 0, in the same visit. Tasks started before
    this existed prepare their first round with a store call of its own."""
    owner: str | None = None
    """The task's owner (``task_started`` names them; round 0 checks their cost quota)."""
    owner_role: str | None = None
    """As ``PrepareRoundInput.owner_role``."""
    queued_as: str | None = None
    """``TaskInput.queued_as``: the start recorded under that message id becomes this task's."""


class OpenTaskOutput(BaseModel):
    types: list[SubtaskTypeInfo]
    """The installed subtask types, recorded once so a replay validates against the same set."""
    first_round: RoundState | None = None
    """Round 0's state, when asked for: what ``prepare_round`` would have answered next."""


class RoundView(BaseModel):
    """What a round's request rendered of its session: the compaction summary it started from
    (None: no summary) and which bulky outputs it showed as previews (``errands.agent.reading``).
    Pinned on the round, so its side questions, its advisor and its branches' citations
    render exactly what its model saw, whatever summaries come later."""

    summary_id: str | None = None
    previews: int = 0


class StepWrites(BaseModel):
    """What a step needs to write the decision the workflow will read from it."""

    types_digest: str | None
    """``errands.agent.steps.types_digest`` of the task's types: a worker with other types
    writes nothing (the workflow does). None: the types the step opens the task with."""
    workflow_id: str
    """The task's workflow id: its branches' threads are named after it."""


class StoredDecision(BaseModel):
    """A decision a step wrote: the acknowledgement or the reply, as the store holds it."""

    kind: Literal["ack", "reply"]
    text: str


class RoundStepInput(BaseModel):
    task_id: str
    session_id: str
    round: int
    upto_seq: int
    slot: str
    model: str
    step: int = 0
    """The task's step count once this step is charged (1, 2, …): names its events."""
    delivers: list[str] = Field(default_factory=list)
    """Messages of the user this step is the first to show the model (their ids)."""
    final_reason: str | None = None
    """Set on a final round: only ``final_reply`` is offered, and the instructions say why."""
    work_tools: bool = True
    """Offer the tools that need a step after them: ``ask_user`` and the work tools."""
    advisor: bool = True
    """Offer the ``advisor`` work tool (with ``work_tools``)."""
    extra: list[Message] = Field(default_factory=list)
    """This slot's own messages after the rendered session (repairs, work-tool exchanges)."""
    max_subtasks: int = 8
    max_output_tokens: int = 4096
    view: RoundView | None = None
    """Set once the step ran: render exactly this view (None: fit the request afresh)."""
    opens: OpenTaskInput | None = None
    """A new task's first step: open the task, and prepare round 0, before the call."""
    prepares: PrepareRoundInput | None = None
    """A round's first step: prepare the round before the call. The round then renders up to
    where the store is (``upto_seq`` is where the workflow last knew it), and a quota the owner
    passed makes the step final."""
    writes: StepWrites | None = None
    """The step writes what it decides: the acknowledgement of a delegation (its threads opened
    with it) or the reply. None: the workflow writes them (runs before 0.3.0; a dismissed
    question's last step, whose decision is not the model's)."""


class RoundStepOutput(BaseModel):
    response: ModelResponse
    catalog_size: int
    attempt: int
    """The activity attempt that succeeded; earlier attempts were failed calls."""
    compaction: ModelUsage | None = None
    """The summary calls this attempt made to fit the request (the ledger's ``compaction``)."""
    view: RoundView | None = None
    """What the request rendered, to pin on the round."""
    work_tools: list[str] = Field(default_factory=list)
    """The work tools beyond the built-ins the step offered (the main agent's Python tools and
    MCP's ``mcp__server__tool``): a call to one is run by ``run_round_tool``."""
    approvals: list[ApprovalNeed] = Field(default_factory=list)
    """The step's MCP calls that wait for the user before they run."""
    servers: dict[int, str] = Field(default_factory=dict)
    """As ``BranchStepOutput.servers``: the stateful MCP server of each such call, by index."""
    types: list[SubtaskTypeInfo] | None = None
    """The installed subtask types, when the step opened the task (``OpenTaskOutput.types``)."""
    prepared: RoundState | None = None
    """The round as the step's preparation found it (``prepares``, ``opens``): the position
    rendered up to and any quota passed. With ``settled``: what an earlier attempt stored."""
    settled: bool = False
    """The round already has its reply or acknowledgement (``prepared``): no model was asked,
    and ``response`` is empty."""
    stored: StoredDecision | None = None
    """What the step wrote of its decision (``writes``)."""


class StepSpent(BaseModel):
    """A round step that writes its decision, and what its model call spent."""

    step: int
    usage: Usage


class AppendAckInput(BaseModel):
    task_id: str
    session_id: str
    round: int
    upto_seq: int
    reply: str
    subtasks: list[SubtaskDraft]
    thread_ids: list[str] = Field(default_factory=list)
    """The subtasks' thread ids, in order: their threads are opened with the acknowledgement."""
    view: RoundView | None = None
    """The delegating step's view, against which the subtasks' references are resolved."""
    written_by: StepSpent | None = None
    """The round step writing it, and what its model call spent (None: the workflow)."""


class AppendReplyInput(BaseModel):
    task_id: str
    session_id: str
    text: str
