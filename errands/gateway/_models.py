"""The gateway's request and response bodies. Requests forbid unknown fields, so a typo in a field
name is a 422 that names it instead of a silently ignored option."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from errands.agent.validation import MAX_TEXT, check_task_text
from errands.agent.validation import (
    SESSION_PATTERN as SESSION_PATTERN,  # the paths' patterns, for _app
)
from errands.agent.validation import TASK_PATTERN as TASK_PATTERN
from errands.contracts import limits
from errands.contracts.approvals import SHA256_HEX
from errands.contracts.messages import ModelUsage
from errands.contracts.principals import Role, Via


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NewTask(_Request):
    """A task to start in the session of the path."""

    text: str = Field(max_length=MAX_TEXT, description="What the agent should do.")
    model: str | None = Field(
        default=None,
        max_length=limits.MODEL_SPEC_CHARS,
        description="provider:model of the primary slot (openai:…, anthropic:…, demo); "
        "default: the gateway's ERRANDS_MODEL",
    )
    fallback_model: str | None = Field(
        default=None,
        max_length=limits.MODEL_SPEC_CHARS,
        description="provider:model of the fallback",
    )
    headless: bool = Field(default=False, description="No one will answer questions.")
    notify: str | list[str] | None = Field(
        default=None,
        description="An https:// URL, or a list of up to 4, notified of this task's changes "
        "of state (docs/notifications.md); each one's signing secret is in the response, once.",
    )

    @field_validator("text")
    @classmethod
    def _text_is_a_task(cls, value: str) -> str:
        return check_task_text(value)


class AnswerRequest(_Request):
    """An answer to the pending question (the same wire form as ``errands answer``)."""

    answers: dict[str, list[str] | str] = Field(
        default_factory=dict,
        max_length=limits.ANSWER_ITEMS,
        description='Per question id: offered labels, "Other: your words", or text. '
        "Send {} to dismiss the question without choosing.",
    )
    status: Literal["answered", "cancelled"] = "answered"
    question_set_id: str | None = Field(
        default=None,
        max_length=limits.ID_CHARS,
        description="The pending question's id; default: the one pending now.",
    )

    @model_validator(mode="after")
    def _answers_given(self) -> AnswerRequest:
        if self.status == "answered" and "answers" not in self.model_fields_set:
            raise ValueError(
                'give "answers" (send {} to dismiss the question), or "status": "cancelled"'
            )
        return self


class MessageRequest(_Request):
    """A message into the running task (as ``errands say``)."""

    text: str = Field(max_length=limits.MESSAGE_CHARS, description="What the agent should know.")
    mode: Literal["steer", "interrupt", "queue"] = "steer"


class ApprovalRequestBody(_Request):
    """The answer to the tool call waiting for approval (as ``errands approve`` / ``deny``)."""

    decision: Literal["approve", "approve_always", "deny"]
    reason: str | None = Field(
        default=None,
        max_length=limits.REASON_CHARS,
        description="Why it is denied; the agent reads it.",
    )
    approval_id: str | None = Field(
        default=None,
        max_length=limits.ID_CHARS,
        description="The waiting call's id; default: the one waiting now.",
    )
    arguments_sha256: str | None = Field(
        default=None,
        pattern=SHA256_HEX,
        description="The SHA-256 of the arguments the user saw (the pending approval's "
        "arguments_sha256, hex, either case): refused (422) unless the waiting call's "
        "arguments are those. Default: the call waiting now, whatever its arguments.",
    )

    @field_validator("arguments_sha256", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        """A digest as a person copied it, in either case: checked as the lowercase hex every
        layer writes."""
        return value.lower() if isinstance(value, str) else value


class Approver(BaseModel):
    """A principal who approved a call, as events name one: its id and role, nothing else."""

    id: str
    role: Role


class ApprovalAccepted(BaseModel):
    task_id: str
    approval_id: str
    decision: str
    tool: str | None = None
    arguments_sha256: str | None = Field(
        default=None, description="The digest of the arguments of the call answered."
    )
    arguments_bytes: int | None = None
    waiting_for: int = Field(
        default=0,
        description="Approvals the call still waits for: 0 when this answer settled it; 1 when "
        "it was the first approval of a call whose policy is two (it waits for a second, "
        "different approver).",
    )
    approved_by: list[Approver] = Field(
        default_factory=list,
        description="Who has approved the call so far (policy two: one, then both).",
    )


class SideQuestionRequest(_Request):
    question: str = Field(
        max_length=limits.SIDE_QUESTION_CHARS, description="What you want to know."
    )

    @field_validator("question")
    @classmethod
    def _question_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the side question is blank; write what you want to know")
        return value


class NotifySecret(BaseModel):
    url: str
    ref: str = Field(description="stored:task:TASK:K, the target its deliveries name.")
    secret: str = Field(
        description="whsec_…: verifies each notification's webhook-signature (Standard "
        "Webhooks). Shown in this response only: errands never shows it again."
    )


class TaskCreated(BaseModel):
    task_id: str
    session_id: str
    status: Literal["running"] = "running"
    notify: list[NotifySecret] = Field(
        default_factory=list, description="The URLs given in notify, each with its secret."
    )


class DeliveryOut(BaseModel):
    webhook_id: str = Field(description="The webhook-id header, the same on every attempt.")
    event: str = Field(description="waiting_for_user, replied, failed or canceled")
    target: str = Field(description="config:NAME or stored:task:TASK:K")
    host: str | None
    state: Literal["sent", "failed", "retrying"]
    attempts: int
    status: int | None = Field(default=None, description="The receiver's last HTTP status.")
    detail: str | None = Field(default=None, description="Why it failed, or is retried.")
    at: str | None = Field(default=None, description="When it became final (ISO 8601, UTC).")


class Notifications(BaseModel):
    task_id: str
    deliveries: list[DeliveryOut]


class AnswerAccepted(BaseModel):
    task_id: str
    accepted: bool = True
    question_set_id: str
    status: str


class SideAnswerOut(BaseModel):
    task_id: str
    answer: str
    path: str
    model: str
    usage: dict[str, ModelUsage] = Field(default_factory=dict)


class CancelRequested(BaseModel):
    task_id: str
    status: Literal["cancel_requested"] = "cancel_requested"


class MessageOut(BaseModel):
    id: str
    seq: int
    role: str
    kind: str
    """As stored, but a compaction summary is ``compaction``."""
    text: str
    task_id: str | None = None
    round: int | None = None
    covers: list[int] | None = None
    """For a compaction: the first and last seq it folds in."""
    meta: dict[str, Any] = Field(default_factory=dict)


class Messages(BaseModel):
    session_id: str
    messages: list[MessageOut]


class Problem(BaseModel):
    """Every refusal: ``detail`` says what to fix."""

    detail: str
    errors: list[dict[str, Any]] | None = None


class TaskOut(BaseModel):
    task_id: str
    session_id: str | None
    status: str = Field(description="running, completed, failed, canceled, terminated, timed_out")
    started_at: str | None = Field(description="ISO 8601, UTC")
    summary: str = Field(description="The start of the task's text")


class TaskList(BaseModel):
    tasks: list[TaskOut]


class GatewayInfo(BaseModel):
    namespace: str
    temporal_ui: str | None = Field(
        description="The Temporal UI's base URL (a task: {temporal_ui}/namespaces/{namespace}/"
        "workflows/{task_id}), or null"
    )


class Me(BaseModel):
    """Who the request acts as (the page shows who is signed in)."""

    id: str = Field(description="The principal's id: what its tasks and sessions are owned by.")
    role: Role
    via: Via = Field(
        description="How it was established: key (an errands API key), oidc, token "
        "(ERRANDS_API_TOKEN), or local (a loopback gateway with no auth configured)"
    )
    auth_required: bool = Field(
        description="Whether this gateway needs a bearer token (false: its one local user)."
    )
