"""Approvals (issue 16): a tool whose policy says so waits for the user before it runs.

A server's ``approval`` setting (``ERRANDS_MCP_SERVERS``) gives each tool a policy, from the
configuration only (the model cannot change it), pinned with the task's tool list:

- ``never`` (the default): the tool runs without asking;
- ``ask``: the call waits for the user; "approve always" lets every later call of that tool in
  the session run without asking;
- ``always``: every call waits for the user ("approve always" approves this call only).

A waiting call shows as the task's ``pending_approval``; a frontend answers it with the
``answer_approval`` update (validated) or the ``submit_approval`` signal. A denial (with the
user's reason), a timeout and a headless task each give the model a text of its own, stored as
the call's result: the tool never ran.

Workflows import this module: it stays free of I/O.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

Decision = Literal["approve", "approve_always", "deny"]

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
    decision: Decision
    reason: str | None = Field(default=None, max_length=2_000)
    """Why the user denied it; the model reads it."""


class Verdict(BaseModel):
    """What becomes of a waiting call: ``denial`` is None when it may run."""

    approval_id: str
    denial: str | None = None


class ApprovalReceipt(BaseModel):
    """What the ``answer_approval`` update returns."""

    approval_id: str
    decision: Decision


def request_of(
    need: ApprovalNeed, *, approval_id: str, where: str, requester: str, expires_at: datetime
) -> ApprovalRequest:
    return ApprovalRequest(
        approval_id=approval_id,
        tool=need.tool,
        arguments=_cut(need.arguments, ARGUMENTS_SHOWN),
        why=_cut(need.why.strip(), WHY_SHOWN),
        policy=need.policy,
        where=where,
        requester=requester,
        expires_at=expires_at,
    )


def denied(tool: str, reason: str | None) -> str:
    why = f" Their reason: {reason.strip()}" if reason and reason.strip() else ""
    return (
        f"Not approved: the user denied this call of {tool}, so it was not run.{why} Do not "
        "call it again for the same purpose; go on without it or ask the user how to proceed."
    )


def timed_out(tool: str, hours: float) -> str:
    return (
        f"Not approved: nobody answered the request to run {tool} within {hours:g} h, so it "
        "was not run. Go on without it, or say in your answer what it would have done."
    )


def headless(tool: str) -> str:
    return (
        f"Not approved: {tool} needs the user's approval and this task runs headless, with "
        "nobody to ask, so it was not run. Go on without it."
    )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" … ({len(text) - limit} more)"
