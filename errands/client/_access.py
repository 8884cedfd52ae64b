"""Who may do what (SPEC §10, DESIGN invariant 13): the one place ownership is checked, under
every frontend (gateway, page, protocols, an application embedding ``errands.Client``).

A client made with ``acting=`` a principal acts as that principal on every call; a client with
none is the operator's (the CLI, which talks to Temporal directly: Temporal's namespace is the
operator's boundary, the gateway the users'), and is checked against nothing.

- an admin may do everything, on everyone's tasks and sessions;
- the owner of a task or a session may do everything on it;
- an approver may also read and follow anyone's task while a call there waits for approvers (a
  tool whose policy is ``approver`` or ``two``), and answer that call (whether their answer
  counts is the task's to say, by the tool's policy: ``workflows._approvals``);
- anyone else is told the task or session does not exist: exactly the refusal a missing one
  gets, so an id reveals nothing of whether it is in use.

A task or session nobody owns (from before owners, or started by an operator in a session
nobody claimed) is an admin's, save that an approver answers the calls there that wait for
approvers (an operator's task whose tool needs two approvals gets its second that way).
"""

from __future__ import annotations

from typing import Literal

from errands.contracts.principals import Principal
from errands.errors import SessionNotFound, TaskNotFound

Action = Literal["read", "follow", "answer", "approve", "steer", "cancel", "ask", "start"]
"""``read``: status and result; ``follow``: the event log; ``answer``: a pending question;
``approve``: a tool approval (approve or deny); ``steer``: messages into the task; ``cancel``;
``ask``: side questions; ``start``: a task in a session."""

APPROVER_ACTIONS: frozenset[Action] = frozenset({"read", "follow", "approve"})
"""What an approver may do on a task that is not theirs, while a call there waits for
approvers (``TaskCalls._describe`` asks the task)."""
APPROVERS_ANSWER = frozenset({"approver", "two"})
"""The policies (``errands.contracts.approvals.ApprovalPolicy``) of calls approvers answer."""


def may(principal: Principal | None, owner: str | None, action: Action) -> bool:
    """Whether ``principal`` (None: the operator) may do ``action`` on what ``owner`` owns."""
    if principal is None or principal.is_admin:
        return True
    if owner is not None and owner == principal.id:
        return True
    return principal.role == "approver" and action in APPROVER_ACTIONS


def no_task(task_id: str, namespace: str) -> TaskNotFound:
    """The refusal of a task that does not exist, or is not the caller's to see: word for word
    the one Temporal's own not-found becomes (``_refusals.refusal``)."""
    return TaskNotFound(
        f"no task {task_id!r} in namespace {namespace}; check the task id (the one "
        "returned when the task was started)"
    )


def no_session(session_id: str) -> SessionNotFound:
    """The refusal of a session that does not exist, or is not the caller's to see."""
    return SessionNotFound(
        f"no session {session_id!r} of yours; check the session id (a new session needs an id "
        "of its own)"
    )


def check_task(
    principal: Principal | None, task_id: str, namespace: str, owner: str | None, action: Action
) -> None:
    """``TaskNotFound`` unless ``principal`` may do ``action`` on task ``task_id`` of ``owner``."""
    if not may(principal, owner, action):
        raise no_task(task_id, namespace)


def check_session(principal: Principal | None, session_id: str, owner: str | None) -> None:
    """``SessionNotFound`` unless ``principal`` may read session ``session_id`` of ``owner``: its
    owner or an admin (an approver reads the tasks waiting on them, not others' sessions)."""
    if principal is None or principal.is_admin or (owner is not None and owner == principal.id):
        return
    raise no_session(session_id)
