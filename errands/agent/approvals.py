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

Workflows import this module: it stays free of I/O. The payloads are in
``errands.contracts.approvals``.
"""

from __future__ import annotations

from datetime import datetime

from errands.contracts.approvals import (
    ARGUMENTS_SHOWN,
    WHY_SHOWN,
    ApprovalNeed,
    ApprovalRequest,
)


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
