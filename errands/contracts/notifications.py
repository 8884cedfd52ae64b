"""Notifications of a task's state changes (SPEC §11): what a task carries, what its delivery
workflow and activity receive.

A task carries its targets as references (``NotifyTarget.ref``), never a URL's secret: an entry
of the worker's ``ERRANDS_WEBHOOKS`` (``config:NAME``) or a target stored with the task or the
schedule that started it (``stored:OWNER:K``, its URL and secret in the session store under
``stored_target_id``). Each change of state the targets want becomes one ``Notice``, delivered by
a ``NotificationWorkflow`` of its own (``notice_workflow_id``) so the task never waits on it, and
signed as a Standard Webhook whose ``webhook-id`` (``notification_id``) is the same on every
attempt, on every worker.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, get_args

from pydantic import BaseModel, Field

NotifyEvent = Literal["waiting_for_user", "replied", "failed", "canceled"]
NotifyFormat = Literal["standard", "a2a"]
NOTIFY_EVENTS: tuple[NotifyEvent, ...] = get_args(NotifyEvent)

SUMMARY_CHARS = 200
"""The longest ``Notice.summary``: a notification carries ids and links, not the transcript."""


class NotifyTarget(BaseModel):
    """Where a task's notifications go, by reference, and which of them."""

    ref: str
    """``config:NAME`` (an entry of ``ERRANDS_WEBHOOKS``) or ``stored:OWNER:K`` (a URL given with
    a task or schedule, its secret in the store: ``stored_target_id``)."""
    events: list[NotifyEvent] = Field(default_factory=lambda: list(NOTIFY_EVENTS))
    format: NotifyFormat = "standard"
    """What the body says: ``standard`` errands' own (docs/notifications.md), ``a2a`` an A2A
    push notification (a ``StreamResponse`` with the task's status update)."""


class StoredTarget(BaseModel):
    """A target given with one task or schedule (``notify``), as the store keeps it."""

    url: str
    secret: str
    """Standard Webhooks ``whsec_…``: shown once to whoever gave the URL, then only signed with."""
    token: str | None = None
    """An A2A push config's token, sent back as ``X-A2A-Notification-Token``."""


class Notice(BaseModel):
    """One change of a task's state, for its targets that want it (``NotificationWorkflow``)."""

    task_id: str
    session_id: str
    owner: str | None = None
    event: NotifyEvent
    key: str
    """What changed, unique within the task and stable across its runs: ``replied``,
    ``failed``, ``canceled``, ``question:{round}:{ask}``, ``approval:{id}``."""
    at: datetime
    summary: str | None = None
    """The question's headers or the tool awaiting approval, at most ``SUMMARY_CHARS``; never
    the transcript."""
    targets: list[NotifyTarget]
    schedule: str | None = None
    """The schedule whose fire started the task, if one did."""
    retry_seconds: float = 24 * 3600.0
    """How long a delivery keeps being retried (``ERRANDS_WEBHOOK_RETRY``, carried by the
    task's ``RoundSettings``)."""


class DeliverInput(BaseModel):
    """One notice to one target: the ``deliver_notification`` activity's input."""

    notice: Notice
    target: NotifyTarget


class DeliveryFailed(BaseModel):
    """A delivery that gave up (its retry window closed): ``record_notification_failed``."""

    notice: Notice
    target: NotifyTarget
    detail: str
    attempts: int | None = None
    """How many attempts were made, as the last one reported; None when none reported."""


def task_owner(task_id: str) -> str:
    """The owner key of the targets given with a task (``stored:task:ID:K``), apart from a
    schedule's (``stored:schedule:NAME:K``) whatever the task id holds."""
    return f"task:{task_id}"


def stored_target_ref(owner: str, k: int) -> str:
    """The reference to the ``k``-th target given with ``owner`` (``task_owner(ID)`` or
    ``schedule:NAME``)."""
    return f"stored:{owner}:{k}"


def stored_target_id(ref: str) -> tuple[str, str]:
    """The session id and message id under which a ``stored:`` target is kept."""
    owner = ref.removeprefix("stored:").rsplit(":", 1)[0]
    return f"notify:{owner}", f"notify:{ref}"


def notice_workflow_id(task_id: str, key: str) -> str:
    """The delivery workflow of one notice: one per change of state, however often a run of
    the task reaches it (a second start of the same id is refused, and ignored)."""
    return f"{task_id}/notify/{key}"


def notification_id(task_id: str, key: str, ref: str) -> str:
    """The ``webhook-id`` of one notice to one target: the receiver's idempotency key."""
    return f"errands:{task_id}:{key}:{ref}"


ADD_TARGET_SIGNAL = "add_notify_target"
"""Signal a running task a ``NotifyTarget`` more (a push config given after it started)."""
REMOVE_TARGET_SIGNAL = "remove_notify_target"
"""Signal a running task to notify a target (by ``ref``) no more."""
