"""What each kind of stored row keeps in its ``meta``: one model per kind.

``StoredMessage.meta`` is a JSON object in the store. Writers build it from these models
(``AckMeta(...).stored()``) and readers read it through them (``AckMeta.of(row)``), so every key
is declared once, with its type. Reading accepts what stores already hold: keys a model does not
declare are kept, and a key an older row lacks takes the model's default.

| kind | model |
|---|---|
| ``user`` (a message sent to a running task) | ``UserMeta`` |
| ``ack`` | ``AckMeta`` |
| ``reply`` | ``ReplyMeta`` |
| ``branch`` | ``BranchMeta`` |
| ``step`` | ``StepMeta`` |
| ``tool_result`` | ``ToolResultMeta`` |
| ``summary`` | ``SummaryMeta`` |
| ``note`` (a tool approved for the session) | ``ApprovedToolMeta`` |
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field

from errands.contracts.messages import StoredMessage, ToolCall, Usage
from errands.contracts.subtasks import SubtaskDraft


class RowMeta(BaseModel):
    """The meta of one kind of row; undeclared keys are kept as they were stored."""

    model_config = ConfigDict(extra="allow")

    @classmethod
    def of(cls, row: StoredMessage) -> Self:
        return cls.model_validate(row.meta)

    def stored(self) -> dict[str, Any]:
        """The JSON object to store: declared fields (unset optional ones left out) and extras."""
        return self.model_dump(mode="json", exclude_none=True)


class UserMeta(RowMeta):
    message: str | None = None
    """How a message sent to a running task is delivered; absent on a task's own request."""


class WrittenByStep(RowMeta):
    """A round's decision row (its acknowledgement or the task's reply), which a round step
    writes itself since 0.3.0 (``activities._rounds.RoundRecords.write_decision``)."""

    step: int | None = None
    """The round step that wrote it; None when the workflow did."""
    usage: Usage | None = None
    """What that step's model call spent: a retry of the step that finds the row charges it
    to the ledger, the attempt that made the call having died before it reported."""


class AckMeta(WrittenByStep):
    upto_seq: int | None = None
    """The session position the delegating round rendered up to."""
    subtasks: list[SubtaskDraft] = Field(default_factory=list)


class ReplyMeta(WrittenByStep):
    deterministic_join: bool = False
    """The reply was joined from the branches' outputs: no model could answer."""
    reason: str | None = None
    """Why no model could answer, for a joined reply."""


class BranchMeta(RowMeta):
    """A branch's outcome in the task's session: its subtask as delegated and how it ended."""

    ordinal: int = 0
    subtask_id: str | None = None
    thread_id: str | None = None
    status: str = ""
    """``completed``, or how it did not complete (``failed``, ``interrupted``, …)."""
    type: str = ""
    prompt: str = ""
    references: list[int] = Field(default_factory=list)
    params: dict[str, Any] = Field(default_factory=dict)


class StepMeta(RowMeta):
    """A model step of a branch's thread (or of the main agent's tool exchange)."""

    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    model: str | None = None


class ToolResultMeta(RowMeta):
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False


class SummaryMeta(RowMeta):
    covers: list[int] = Field(default_factory=list)
    """The first and last ``seq`` the summary folds in."""
    model: str | None = None
    usage: Usage = Field(default_factory=Usage)


class ApprovedToolMeta(RowMeta):
    tool: str = ""
