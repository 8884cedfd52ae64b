"""Approvals' payloads: a call that waits for the user, the user's answer and its verdict.

The rules (what a request shows, the texts the model reads) live in ``errands.agent.approvals``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

ApprovalChoice = Literal["approve", "approve_always", "deny"]

ARGUMENTS_SHOWN = 2_000
"""Characters of a call's arguments a pending approval shows (the full call is in the store)."""
WHY_SHOWN = 1_000


class ApprovalNeed(BaseModel):
    """A tool call of one step that waits for the user, as the step's activity found it."""

    index: int
    """The call's place among the step's tool calls."""
    tool: str
    """The name the model called (``mcp__server__tool``)."""
    policy: Literal["ask", "always"]
    arguments: str
    why: str = ""
    """The agent's own words in the step that made the call, if any."""


class ApprovalRequest(BaseModel):
    """A call waiting for the user: what the ``pending_approval`` of the task shows."""

    approval_id: str
    tool: str
    arguments: str
    why: str = ""
    policy: Literal["ask", "always"]
    where: str
    """``main`` for the main agent, else the branch (``round 0 · subtask 2``)."""
    requester: str
    """The workflow waiting for the verdict: the task's own id, or a branch's."""
    expires_at: datetime

    def view(self) -> dict[str, object]:
        return {
            "approval_id": self.approval_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "why": self.why,
            "where": self.where,
            "can_approve_always": self.policy == "ask",
            "expires_at": self.expires_at.isoformat(),
        }


class ApprovalAnswer(BaseModel):
    """A frontend's answer to a pending approval."""

    approval_id: str
    decision: ApprovalChoice
    reason: str | None = Field(default=None, max_length=2_000)
    """Why the user denied it; the model reads it."""


class Verdict(BaseModel):
    """What becomes of a waiting call: ``denial`` is None when it may run."""

    approval_id: str
    denial: str | None = None


class ApprovalReceipt(BaseModel):
    """What the ``answer_approval`` update returns."""

    approval_id: str
    decision: ApprovalChoice
