"""Approvals in workflows (``errands.agent.approvals``): the task holds every call that waits for
the user, its own (the main agent's) and its branches'; a branch asks its task by signal and waits
for the verdict by signal.

The task shows the first waiting call as its ``pending_approval`` and answers it from the
``answer_approval`` update or the ``submit_approval`` signal; the verdict goes back to whoever
waits (the task itself, or the branch). A call nobody answers in time is withdrawn by its waiter
and told to the model as not approved.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from errands.agent import approvals
    from errands.contracts import ids
    from errands.contracts.approvals import ApprovalNeed, ApprovalRequest, Verdict

REQUEST_SIGNAL = "request_approval"
WITHDRAW_SIGNAL = "withdraw_approval"
VERDICT_SIGNAL = "approval_verdict"


class Verdicts:
    """The verdicts a workflow (a task or a branch) has received, by approval id."""

    def __init__(self) -> None:
        self._by_id: dict[str, Verdict] = {}

    def put(self, verdict: Verdict) -> None:
        self._by_id[verdict.approval_id] = verdict

    async def wait(self, request: ApprovalRequest, hours: float) -> Verdict | None:
        """The verdict on ``request``, or None when nobody answered within ``hours``."""
        try:
            await workflow.wait_condition(
                lambda: request.approval_id in self._by_id,
                timeout=timedelta(hours=hours),
                timeout_summary=f"approval of {request.tool}",
            )
        except TimeoutError:
            return None
        return self._by_id.pop(request.approval_id)


def request_for(need: ApprovalNeed, step: int, where: str, hours: float) -> ApprovalRequest:
    """The request this workflow puts to the user for ``need``, the ``step``-th of its steps."""
    own = workflow.info().workflow_id
    return approvals.request_of(
        need,
        approval_id=ids.approval_id(own, step, need.index),
        where=where,
        requester=own,
        expires_at=workflow.now() + timedelta(hours=hours),
    )
