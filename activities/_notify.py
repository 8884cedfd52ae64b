"""Delivering notifications (SPEC §11): one notice to one target per activity attempt, signed as
a Standard Webhook through the guarded sender, and what came of it written to the task's event
log once (one record per notice and target, whichever attempt or activity writes it)::

    delivered                                   notification_sent; return "sent"
    final: a 4xx, a redirect, a refusal,        notification_failed; return "failed"
      a target this worker does not know       (nothing a retry could change)
    worth another attempt: 408, 429, 5xx,       raise ``notification_retry``: Temporal retries,
      a timeout, a connection failure           ``Retry-After`` as the next delay (at most 1 h)

The workflow records a delivery whose retry window closed (``record_notification_failed``).
Neither the secret nor the URL's path or query appears in any record or error: they may hold a
token.
"""

from __future__ import annotations

import asyncio
import shlex
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import quote, urlsplit

from a2a.types import StreamResponse, TaskState, TaskStatus, TaskStatusUpdateEvent
from google.protobuf.json_format import MessageToDict
from google.protobuf.timestamp_pb2 import Timestamp
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities._events import event
from errands.adapters.store import SessionStore, store_work
from errands.adapters.webhooks import send
from errands.contracts.notifications import (
    DeliverInput,
    DeliveryFailed,
    Notice,
    NotifyTarget,
    StoredTarget,
    notification_id,
    stored_target_id,
)
from errands.settings import Settings

Delivered = Literal["sent", "failed"]
"""What became of one notice to one target: recorded as sent, or recorded as failed."""

RETRY_TYPE = "notification_retry"
"""The error type of an attempt worth repeating; its details are the attempt's outcome and its
number."""
MAX_RETRY_AFTER = 3600.0
"""The longest ``Retry-After`` honoured, in seconds: a receiver cannot park a delivery longer."""


def record_key(notice: Notice, target: NotifyTarget) -> str:
    """The event-log key of a notice's record for one target: sent or failed, written once."""
    return f"notification:{notice.key}:{target.ref}"


class NotifyActivities:
    """The activities that deliver notifications, with the worker's store (for ``stored:``
    targets and the event log) and settings (``ERRANDS_WEBHOOKS``, ``ERRANDS_WEBHOOK_ALLOW``,
    ``ERRANDS_PUBLIC_URL``)."""

    def __init__(self, store: SessionStore, settings: Settings) -> None:
        self._store = store
        self._settings = settings

    @activity.defn(name="deliver_notification")
    async def deliver_notification(self, data: DeliverInput) -> Delivered:
        """One attempt to deliver ``data.notice`` to ``data.target``; raises only to be retried."""
        notice, target = data.notice, data.target
        attempt = activity.info().attempt
        found = await asyncio.to_thread(self._resolve, target)
        if isinstance(found, str):
            await self._record_failed(notice, target, None, 0, found)
            return "failed"
        host = urlsplit(found.url).hostname or ""
        msg_id = notification_id(notice.task_id, notice.key, target.ref)
        if target.format == "a2a":
            body = a2a_push(notice)
            extra = {A2A_TOKEN_HEADER: found.token} if found.token else {}
        else:
            body, extra = self.body(notice), {}
        outcome = await send(
            found.url,
            found.secret,
            msg_id,
            body,
            self._settings.webhook_policy(),
            extra_headers=extra,
        )
        if outcome.delivered:
            fields = {"host": host, "attempts": attempt, "status": outcome.status}
            await self._record(notice, target, "notification_sent", **fields)
            return "sent"
        if not outcome.retry:
            # Refused before sending: this attempt made no request, the earlier ones did.
            made = attempt if outcome.status is not None else attempt - 1
            await self._record_failed(notice, target, host, made, outcome.detail)
            return "failed"
        after = outcome.retry_after
        raise ApplicationError(
            f"attempt {attempt} to notify {host} of {notice.event}: {outcome.detail}; the "
            "activity retry policy tries again until the notification's retry window closes",
            outcome.detail,
            attempt,
            type=RETRY_TYPE,
            next_retry_delay=None
            if after is None
            else timedelta(seconds=min(after, MAX_RETRY_AFTER)),
        )

    @activity.defn(name="record_notification_failed")
    async def record_notification_failed(self, data: DeliveryFailed) -> None:
        """Record a delivery the workflow gave up on (its retry window closed), once."""
        found = await asyncio.to_thread(self._resolve, data.target)
        host = None if isinstance(found, str) else urlsplit(found.url).hostname
        await self._record_failed(data.notice, data.target, host, data.attempts, data.detail)

    def body(self, notice: Notice) -> dict[str, Any]:
        """The notification as the receiver reads it: ids, links and commands, no transcript."""
        task = notice.task_id
        data: dict[str, Any] = {
            "task_id": task,
            "session_id": notice.session_id,
            "state": notice.event,
        }
        if notice.summary:
            data["summary"] = notice.summary
        if notice.schedule:
            data["schedule"] = notice.schedule
        public = self._settings.public_url
        if public is not None:
            base = str(public).rstrip("/")
            data["links"] = {
                "task": f"{base}/v1/tasks/{quote(task, safe='')}",
                "page": f"{base}/#task={quote(task, safe='')}",
            }
        data["commands"] = commands(notice)
        return {"type": f"task.{notice.event}", "timestamp": _iso(notice.at), "data": data}

    def _resolve(self, target: NotifyTarget) -> StoredTarget | str:
        """The target's URL and secret, or why there are none (a final failure's detail)."""
        kind, _, name = target.ref.partition(":")
        if kind == "config":
            hook = self._settings.webhook_table().get(name)
            if hook is None:
                return f"the webhook {name!r} is not in this worker's ERRANDS_WEBHOOKS"
            return StoredTarget(url=hook.url, secret=hook.secret.get_secret_value())
        if kind == "stored":
            _, message_id = stored_target_id(target.ref)
            if self._store.get(f"{message_id}:removed") is not None:
                return f"the target {target.ref} was removed"
            row = self._store.get(message_id)
            secret = row.meta.get("secret") if row is not None else None
            if row is None or not row.text or not isinstance(secret, str):
                return (
                    f"the target was not found: {target.ref} is not in the session store "
                    "(it was deleted, or the worker reads another database)"
                )
            token = row.meta.get("token")
            return StoredTarget(
                url=row.text, secret=secret, token=token if isinstance(token, str) else None
            )
        return f"the target {target.ref!r} is neither config:NAME nor stored:OWNER:K"

    async def _record_failed(
        self,
        notice: Notice,
        target: NotifyTarget,
        host: str | None,
        attempts: int | None,
        detail: str,
    ) -> None:
        fields: dict[str, Any] = {"detail": detail}
        if host is not None:
            fields["host"] = host
        if attempts is not None:
            fields["attempts"] = attempts
        await self._record(notice, target, "notification_failed", **fields)

    async def _record(
        self,
        notice: Notice,
        target: NotifyTarget,
        type_: Literal["notification_sent", "notification_failed"],
        **fields: Any,
    ) -> None:
        written = event(
            notice.task_id,
            record_key(notice, target),
            type_,
            notice.key,
            id=notification_id(notice.task_id, notice.key, target.ref),
            event=notice.event,
            target=target.ref,
            **fields,
        )
        await store_work(self._store, self._store.append_events, [written])


A2A_TOKEN_HEADER = "X-A2A-Notification-Token"
"""How an A2A push config's token comes back with each of its notifications."""

A2A_STATES = {
    "waiting_for_user": TaskState.TASK_STATE_INPUT_REQUIRED,
    "replied": TaskState.TASK_STATE_COMPLETED,
    "failed": TaskState.TASK_STATE_FAILED,
    "canceled": TaskState.TASK_STATE_CANCELED,
}


def a2a_push(notice: Notice) -> dict[str, Any]:
    """An A2A push notification: a ``StreamResponse`` holding the task's status update (its
    id, its session as ``contextId``, its A2A state and when it changed)."""
    at = Timestamp()
    at.FromDatetime(notice.at.astimezone(UTC))
    update = TaskStatusUpdateEvent(
        task_id=notice.task_id,
        context_id=notice.session_id,
        status=TaskStatus(state=A2A_STATES[notice.event], timestamp=at),
    )
    return dict(MessageToDict(StreamResponse(status_update=update)))


def commands(notice: Notice) -> dict[str, str]:
    """The CLI commands that act on the notice: its status, and what answers it."""
    task = shlex.quote(notice.task_id)
    said = {"status": f"errands status {task}"}
    if notice.event == "waiting_for_user":
        if notice.key.startswith("approval:"):
            approval = shlex.quote(notice.key.removeprefix("approval:"))
            said["approve"] = f"errands approve {task} --id {approval}"
            said["deny"] = f"errands deny {task} --id {approval}"
        else:
            said["answer"] = f"errands answer {task}"
    return said


def _iso(at: datetime) -> str:
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).isoformat()
