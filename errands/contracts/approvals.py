"""Approvals' payloads: a call that waits for the user, the user's answer and its verdict.

The rules (what a request shows, the texts the model reads) live in ``errands.agent.approvals``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from errands.contracts.events import named
from errands.contracts.limits import REASON_CHARS
from errands.contracts.principals import Principal

ApprovalChoice = Literal["approve", "approve_always", "deny"]
ApprovalPolicy = Literal["ask", "always", "approver", "two"]
"""Who a waiting call needs (SPEC §10; ``never`` calls do not wait):

- ``ask``: the task's owner (or an admin); "approve always" covers the session's later calls;
- ``always``: the owner (or an admin), every call;
- ``approver``: a principal with the approver role (or an admin), every call;
- ``two``: two distinct principals, each the owner, an approver or an admin, every call (four
  eyes): the first approval is recorded and the call waits for the second; a denial by either
  settles it."""


def approvals_needed(policy: ApprovalPolicy) -> int:
    """How many distinct principals must approve a call of ``policy`` before it runs."""
    return 2 if policy == "two" else 1


WHY_SHOWN = 1_000
"""Characters of the model's explanation (``why``) a pending approval shows. The arguments are
never cut: what the user approves is the whole call."""
SHA256_HEX = r"^[0-9a-f]{64}$"
"""A digest of a call's arguments as every layer writes and checks it: 64 lowercase hex digits
(a frontend lowers the case of what a person typed before checking)."""


class ApprovalNeed(BaseModel):
    """A tool call of one step that waits for the user, as the step's activity found it."""

    index: int
    """The call's place among the step's tool calls."""
    tool: str
    """The name the model called (``mcp__server__tool``)."""
    policy: ApprovalPolicy
    arguments: str
    """The call's arguments canonicalised for display (``errands.agent.approvals.need_of``)
    when ``arguments_sha256`` is set; in a need recorded before the activity canonicalised them
    (empty digest), the model's raw arguments."""
    why: str = ""
    """The agent's own words in the step that made the call, if any."""
    arguments_sha256: str = ""
    """SHA-256 (hex) of the canonical ``arguments`` as UTF-8, computed by the activity."""
    arguments_bytes: int = 0
    """The UTF-8 size of the canonical ``arguments``."""
    refusal: str | None = None
    """The text the model reads instead of a person being asked (the call is too large to
    show); the tool does not run. None: the call waits for the user."""


class ApprovalRequest(BaseModel):
    """A call waiting for the user: what the ``pending_approval`` of the task shows.

    ``arguments`` are the exact arguments the tool will receive, whole, canonicalised for display
    (``errands.agent.approvals.canonical_arguments``): whitespace outside strings and invisible
    characters inside them cannot hide anything. ``arguments_sha256`` is the digest of that text;
    an answer that carries a digest is refused unless it is this one. ``why`` is the model's own
    words, never part of the call."""

    approval_id: str
    tool: str
    arguments: str
    arguments_sha256: str = ""
    """SHA-256 (hex) of ``arguments`` as UTF-8 (empty in a request recorded before 0.3)."""
    arguments_bytes: int = 0
    """The UTF-8 size of ``arguments``."""
    why: str = ""
    policy: ApprovalPolicy
    where: str
    """``main`` for the main agent, else the branch (``round 0 · subtask 2``)."""
    requester: str
    """The workflow waiting for the verdict: the task's own id, or a branch's."""
    expires_at: datetime
    approved_by: list[Principal] = Field(default_factory=list)
    """Who approved the call so far, while it waits for more (policy ``two``: the first of
    the two). Kept in ``TaskState`` with the request, so it travels across continue-as-new."""

    def view(self) -> dict[str, object]:
        return {
            "approval_id": self.approval_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "arguments_sha256": self.arguments_sha256,
            "arguments_bytes": self.arguments_bytes,
            "why": self.why,
            "where": self.where,
            "can_approve_always": self.policy == "ask",
            "expires_at": self.expires_at.isoformat(),
            "policy": self.policy,
            "approvals_needed": approvals_needed(self.policy),
            "approved_by": [named(p) for p in self.approved_by],
        }


class ApprovalAnswer(BaseModel):
    """A frontend's answer to a pending approval."""

    approval_id: str
    decision: ApprovalChoice
    reason: str | None = Field(default=None, max_length=REASON_CHARS)
    """Why the user denied it; the model reads it."""
    arguments_sha256: str | None = Field(default=None, pattern=SHA256_HEX)
    """The digest of the arguments the user saw (``ApprovalRequest.arguments_sha256``): the
    answer is refused unless the waiting call's arguments are those. None: not checked (the
    person answers whatever call waits: the signal path, a program that did not read the call,
    frontends from before 0.3)."""
    by: Principal | None = None
    """Who answered, as the client established, never as the caller claims: the workflow checks
    them against the tool's policy (``ApprovalPolicy``) and the task's owner, and the events
    name them. None: an answer from before principals (taken as the owner's)."""


class Verdict(BaseModel):
    """What becomes of a waiting call: ``denial`` is None when it may run."""

    approval_id: str
    denial: str | None = None
    by: list[Principal] = Field(default_factory=list)
    """Who approved it (each of the two, for policy ``two``), or who denied it; empty for an
    answer from before principals."""


class ApprovalReceipt(BaseModel):
    """What the ``answer_approval`` update returns; the client adds which call it answered."""

    approval_id: str
    decision: ApprovalChoice
    tool: str | None = None
    arguments_sha256: str | None = None
    arguments_bytes: int | None = None
    waiting_for: int = 0
    """Approvals the call still waits for: 0 when the answer settled it; 1 when it was the
    first approval of a call whose policy is ``two`` (it waits for a second, different
    approver)."""
    approved_by: list[Principal] = Field(default_factory=list)
    """Who has approved the call so far (policy ``two``: one, then both)."""
