"""Approvals in workflows (``errands.agent.approvals``): the task holds every call that waits for
the user, its own (the main agent's) and its branches'; a branch asks its task by signal and waits
for the verdict by signal.

The task shows the first waiting call as its ``pending_approval`` and answers it from the
``answer_approval`` update or the ``submit_approval`` signal; the verdict goes back to whoever
waits (the task itself, or the branch). A call nobody answers in time is withdrawn by its waiter
and told to the model as not approved.

An answer that carries the digest of the arguments its user saw is refused unless they are the
waiting call's (a missing digest is not checked: the signal path, and answers recorded before).

Who answers is checked here too, under the client's checks (``errands.agent.approvals.refusal``:
the task's owner, approvers, admins, as the call's policy says). A call whose policy is ``two``
keeps waiting after its first approval, which is recorded on the request (``approved_by``,
logged as ``approval_recorded``); a second approval by someone else settles it. Every event of
an answer names who gave it and the digest of the call it answered.

The handlers live on the workflow class (Temporal needs them there); they and the round loop go
through ``PendingApprovals``, which changes only the calls waiting and says what happened. What
the task shows meanwhile (its state, its search attributes) stays the workflow's to set.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities import SessionActivities
    from errands.agent import approvals
    from errands.contracts import ids
    from errands.contracts.activities import RememberApprovalInput
    from errands.contracts.approvals import (
        ApprovalAnswer,
        ApprovalNeed,
        ApprovalRequest,
        Verdict,
    )
    from errands.contracts.events import ApprovalOutcome, named
    from errands.contracts.principals import Principal
    from errands.contracts.workflows import TaskState
    from errands.errors import AnswerRejected
    from workflows._log import log_event
    from workflows._options import store_call

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


@dataclass(frozen=True)
class Settled:
    """A waiting call the user answered: the request, and the verdict its waiter gets."""

    request: ApprovalRequest
    answer: ApprovalAnswer
    verdict: Verdict


@dataclass(frozen=True)
class Recorded:
    """An approval counted toward a call that needs more (policy ``two``): the call, with the
    approval in its ``approved_by``, waits on for ``waiting_for`` more."""

    request: ApprovalRequest
    answer: ApprovalAnswer
    waiting_for: int


class PendingApprovals:
    """The task's calls waiting for approval (kept in ``TaskState``, so they travel with a
    continue-as-new) and the verdicts on the task's own calls."""

    def __init__(self, state: TaskState) -> None:
        self._state = state
        self.verdicts = Verdicts()

    @property
    def waiting(self) -> list[ApprovalRequest]:
        """Oldest first."""
        return self._state.approvals

    def view(self) -> dict[str, Any] | None:
        """The first waiting call, as the ``pending_approval`` query shows it."""
        return self.waiting[0].view() if self.waiting else None

    def find(self, approval_id: str) -> ApprovalRequest | None:
        return next((r for r in self.waiting if r.approval_id == approval_id), None)

    def add(self, request: ApprovalRequest) -> bool:
        """Whether ``request`` is new (a repeated signal adds nothing)."""
        if self.find(request.approval_id) is not None:
            return False
        self._state.approvals.append(request)
        return True

    def drop(self, approval_id: str) -> ApprovalRequest | None:
        """The call that waited under ``approval_id``, if one did; it waits no more."""
        dropped = self.find(approval_id)
        self._state.approvals = [r for r in self.waiting if r.approval_id != approval_id]
        return dropped

    def drop_requested_by(self, requester: str) -> list[ApprovalRequest]:
        """The calls of ``requester`` (a branch that ended) that waited; they wait no more."""
        dropped = [r for r in self.waiting if r.requester == requester]
        if dropped:
            self._state.approvals = [r for r in self.waiting if r.requester != requester]
        return dropped

    def check(self, answer: ApprovalAnswer, task_id: str, owner: str | None = None) -> None:
        """Raise ``AnswerRejected`` unless ``answer`` can settle a waiting call of the task
        (owned by ``owner``) now, or count toward it."""
        request = self.find(answer.approval_id)
        if request is None:
            waiting = ", ".join(r.approval_id for r in self.waiting) or "none"
            raise AnswerRejected(
                f"task {task_id} has no tool call waiting for approval {answer.approval_id!r} "
                f"(waiting: {waiting}); check `errands status {task_id}`"
            )
        if workflow.now() >= request.expires_at:
            raise AnswerRejected(
                f"the call of {request.tool} waited for approval until "
                f"{request.expires_at.isoformat()} and is no longer waiting; it was not run"
            )
        if answer.arguments_sha256 and answer.arguments_sha256 != request.arguments_sha256:
            raise AnswerRejected(
                f"the arguments of the call of {request.tool} waiting in task {task_id} "
                f"(approval {request.approval_id}, sha256 {request.arguments_sha256 or 'unknown'}"
                f") are not the ones this answer was given for (sha256 "
                f"{answer.arguments_sha256}); nothing was approved or denied. Read the call "
                f"again with `errands status {task_id}` and answer what it shows"
            )
        refused = approvals.refusal(request, answer, owner, task_id)
        if refused is not None:
            raise AnswerRejected(refused)

    def settle(self, answer: ApprovalAnswer) -> Settled | Recorded | None:
        """Take the user's answer off the waiting call (None: answered meanwhile, by another
        update or signal), or, when the call needs more approvals than it now has, record the
        approval on it (it waits on). A verdict on the task's own call is kept here for its
        waiter."""
        request = self.find(answer.approval_id)
        if request is None:
            return None
        approving = answer.decision != "deny"
        approved_by = [*request.approved_by, *([answer.by] if answer.by else [])]
        if approving and answer.by is not None:
            request = request.model_copy(update={"approved_by": approved_by})
            if (left := approvals.still_needed(request)) > 0:
                self._state.approvals = [
                    request if r.approval_id == request.approval_id else r for r in self.waiting
                ]
                return Recorded(request=request, answer=answer, waiting_for=left)
        self.drop(answer.approval_id)
        denial = (
            approvals.denied(request.tool, answer.reason) if answer.decision == "deny" else None
        )
        by = approved_by if approving else [answer.by] if answer.by else []
        verdict = Verdict(approval_id=request.approval_id, denial=denial, by=by)
        if request.requester == workflow.info().workflow_id:
            self.verdicts.put(verdict)
        return Settled(request=request, answer=answer, verdict=verdict)


async def deliver(settled: Settled, session_id: str) -> None:
    """Send a branch its verdict, and remember an approve-always for the session."""
    request = settled.request
    if request.requester != workflow.info().workflow_id:
        await workflow.get_external_workflow_handle(request.requester).signal(
            VERDICT_SIGNAL, settled.verdict
        )
    if settled.answer.decision == "approve_always":
        await store_call(
            SessionActivities.remember_approval,
            RememberApprovalInput(session_id=session_id, tool=request.tool),
        )


async def log_requested(task_id: str, request: ApprovalRequest) -> None:
    """``approval_requested``: the call waits for the user from now on."""
    await log_event(
        task_id,
        f"{request.approval_id}:requested",
        "approval_requested",
        request.approval_id,
        approval_id=request.approval_id,
        tool=request.tool,
        arguments=request.arguments,
        arguments_sha256=request.arguments_sha256,
        arguments_bytes=request.arguments_bytes,
        why=request.why,
        where=request.where,
        can_approve_always=request.policy == "ask",
        expires_at=request.expires_at.isoformat(),
        policy=request.policy,
    )


async def log_answered(
    task_id: str,
    approval_id: str,
    decision: ApprovalOutcome,
    reason: str | None = None,
    arguments_sha256: str | None = None,
    *,
    answered: Answered | None = None,
) -> None:
    """``approval_answered``: the call waits no more. One per call: when the user's answer and
    the timeout meet, the first written stands. A person's answer records the digest it
    carried (the arguments the person read), None when it carried none, and (``answered``)
    who gave it and the digest of the call it settled."""
    await log_event(
        task_id,
        f"{approval_id}:answered",
        "approval_answered",
        approval_id,
        approval_id=approval_id,
        decision=decision,
        reason=reason,
        arguments_sha256=arguments_sha256,
        **(answered.fields() if answered else {}),
    )


@dataclass(frozen=True)
class Answered:
    """Who answered a call, and the call they answered (what ``approval_answered`` and
    ``approval_recorded`` add for a person's answer)."""

    by: Principal | None
    request: ApprovalRequest

    def fields(self) -> dict[str, Any]:
        return {
            "by": named(self.by),
            "approved_by": [named(p) for p in self.request.approved_by],
            "call_sha256": self.request.arguments_sha256,
            "tool": self.request.tool,
        }


async def log_recorded(task_id: str, recorded: Recorded) -> None:
    """``approval_recorded``: one approval of a call that needs more (policy ``two``); the call
    waits on. Keyed by who approved, so each approval is written once."""
    request, by = recorded.request, recorded.answer.by
    await log_event(
        task_id,
        f"{request.approval_id}:approved-by:{by.id if by else ''}",
        "approval_recorded",
        request.approval_id,
        approval_id=request.approval_id,
        arguments_sha256=recorded.answer.arguments_sha256,
        waiting_for=recorded.waiting_for,
        **Answered(by, request).fields(),
    )
