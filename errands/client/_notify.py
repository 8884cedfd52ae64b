"""A task's notifications as its frontends see them (SPEC §11): the URLs given with a start
(``notify``), each kept in the store with a fresh secret shown once, and every delivery of the
task: finished ones from its event log, those still trying from their delivery workflows.

A URL given with a task is checked here for its shape only (``http(s)://host…``, no user name
or password): whether its host resolves to a public address is decided at each delivery and
recorded there, so the task starts either way. Its secret goes to the store, never to a
payload: the task carries ``stored:task:TASK:K`` (``stored_target_ref``), the delivery activity
reads the URL and secret under ``stored_target_id``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from errands.adapters.webhooks import new_secret
from errands.agent.webhooks import targets_for
from errands.client._access import no_session
from errands.client._input import checked
from errands.contracts.events import StoredEvent
from errands.contracts.messages import NewMessage
from errands.contracts.notifications import (
    Notice,
    NotifyTarget,
    notification_id,
    stored_target_id,
    stored_target_ref,
    task_owner,
)
from errands.errors import Conflict, InvalidRequest, TemporalUnreachable

if TYPE_CHECKING:
    from errands.client._client import Client
    from errands.client._handle import TaskHandle

MAX_URLS = 4
"""The most URLs one task may be given to notify."""
URL_CHARS = 2_000
"""The longest URL a task may be given to notify."""
RESERVED_SESSION = "notify:"
"""Sessions whose ids start so hold the targets given with tasks (their secrets): no task
works in one, and no history shows one."""
NOTIFICATION_WORKFLOW = "NotificationWorkflow"
DELIVER_ACTIVITY = "deliver_notification"
FINAL = ("notification_sent", "notification_failed")
EVENTS_PAGE = 1000


@dataclass(frozen=True)
class GivenTarget:
    """A URL given with a start, as ``TaskHandle.notify_secrets`` returns it once."""

    url: str
    ref: str
    """``stored:task:TASK:K``: the ``target`` its deliveries name (``Client.notifications``)."""
    secret: str
    """``whsec_…``: verifies the ``webhook-signature`` of every notification to ``url``.
    Shown once, here: errands keeps it only to sign with."""


@dataclass(frozen=True)
class Delivery:
    """One notification to one target, as far as it has got (``Client.notifications``)."""

    webhook_id: str
    """The ``webhook-id`` header, the same on every attempt: the receiver's idempotency key."""
    event: str
    """waiting_for_user, replied, failed or canceled."""
    target: str
    """``config:NAME`` or ``stored:task:TASK:K``."""
    host: str | None
    state: Literal["sent", "failed", "retrying"]
    """sent and failed are final (its event is in the task's log); retrying: its delivery
    workflow still tries."""
    attempts: int
    status: int | None = None
    """The receiver's last HTTP status, when known."""
    detail: str | None = None
    """Why it failed, or the last attempt's failure while it retries."""
    at: str | None = None
    """When it became final (ISO 8601, UTC); None while it retries."""

    def public(self) -> dict[str, Any]:
        return asdict(self)


def notify_urls(notify: str | Sequence[str] | None) -> list[str]:
    """The URLs of a start's ``notify``, each checked for its shape (``InvalidRequest`` with
    ``field="notify"``); their hosts are checked at delivery, not here."""
    if notify is None:
        return []
    urls = [notify] if isinstance(notify, str) else list(notify)
    if len(urls) > MAX_URLS:
        raise InvalidRequest(
            f"notify has {len(urls)} URLs, more than the {MAX_URLS} a task may notify; give at "
            "most four (ERRANDS_WEBHOOKS notifies every task of an owner)",
            field="notify",
        )
    for n, url in enumerate(urls, 1):
        if not isinstance(url, str):
            raise InvalidRequest(
                f"notify URL {n} is not text; give an https:// URL", field="notify"
            )
        checked(url, "notify", URL_CHARS, what=f"notify URL {n}")
        _check_shape(url, n)
        if url in urls[: n - 1]:
            raise InvalidRequest(f"notify URL {n} is given twice; give it once", field="notify")
    return urls


def _check_shape(url: str, n: int) -> None:
    """A URL errands could deliver to, save its host's address: its path and query may hold a
    token, so the refusal never quotes them."""
    try:
        parts = urlsplit(url.strip())
        host, _ = parts.hostname, parts.port
    except ValueError:
        host, parts = None, None
    if parts is None or parts.scheme not in ("https", "http") or not host or url != url.strip():
        raise InvalidRequest(
            f"notify URL {n} is not an http(s) URL with a host; give one such as "
            "https://hooks.example.com/errands",
            field="notify",
        )
    if parts.username is not None or parts.password is not None:
        raise InvalidRequest(
            f"notify URL {n} holds a user name or password; notifications are signed instead: "
            "give the URL without them and verify the signature with the secret returned",
            field="notify",
        )


def check_not_reserved(session_id: str) -> None:
    """Refuse a session the targets of tasks are kept in (``RESERVED_SESSION``)."""
    if session_id.startswith(RESERVED_SESSION):
        raise InvalidRequest(
            f"session ids starting with {RESERVED_SESSION!r} are errands' own; choose another",
            field="session",
        )


def check_readable(session_id: str) -> None:
    """Refuse to read a session the targets of tasks are kept in, as a missing one is
    refused: it holds their secrets, shown once when the task started."""
    if session_id.startswith(RESERVED_SESSION):
        raise no_session(session_id)


async def start_targets(
    client: Client, task_id: str, owner: str | None, role: str | None, urls: list[str]
) -> tuple[list[NotifyTarget], list[GivenTarget]]:
    """The targets a new task ``task_id`` carries: the configured ones that hear ``owner``
    (with ``role``), then each of ``urls`` with a fresh secret, stored before the task starts.
    ``Conflict`` when the store already keeps other targets under that task id (an earlier
    start under the same id)."""
    targets = targets_for(client.settings.webhook_table(), owner, role)
    given = [
        GivenTarget(url=url, ref=stored_target_ref(task_owner(task_id), k), secret=new_secret())
        for k, url in enumerate(urls, 1)
    ]
    for target in given:
        if not await store_target(client, target, owner_id=task_id):
            raise Conflict(
                f"the store already keeps notification targets for task id {task_id!r}; start "
                "the task under another id (or leave the id out to get a new one)"
            )
    return targets + [NotifyTarget(ref=t.ref) for t in given], given


async def store_target(
    client: Client, target: GivenTarget, *, owner_id: str, **meta: str | None
) -> bool:
    """Keep ``target`` (its URL, its secret and ``meta``) in the store under its reference,
    for the deliveries to read; False when another was kept under that reference first."""
    session_id, message_id = stored_target_id(target.ref)
    row = await client._store_call(
        "append_once",
        NewMessage(
            id=message_id,
            session_id=session_id,
            role="system",
            kind="notify_target",
            text=target.url,
            task_id=owner_id,
            meta={"secret": target.secret, **meta},
        ),
    )
    return bool(row.meta.get("secret") == target.secret)


async def forget_target(client: Client, ref: str, *, owner_id: str) -> None:
    """Notify the stored target ``ref`` no more: a tombstone beside it, which every delivery
    reads first (the store keeps rows; it never rewrites one)."""
    session_id, message_id = stored_target_id(ref)
    await client._store_call(
        "append_once",
        NewMessage(
            id=f"{message_id}:removed",
            session_id=session_id,
            role="system",
            kind="notify_target",
            text="",
            task_id=owner_id,
        ),
    )


async def deliveries(handle: TaskHandle) -> list[Delivery]:
    """Every delivery of the task's notifications: final ones from its event log, in order,
    then those its running delivery workflows still try."""
    await handle.describe()  # the caller may read the task, or it is TaskNotFound
    client, task_id = handle._client, handle.task_id
    store = await asyncio.to_thread(client._reader, True)
    assert store is not None
    events: list[StoredEvent] = []
    while batch := await asyncio.to_thread(
        store.list_events, task_id, after_seq=events[-1].seq if events else 0, limit=EVENTS_PAGE
    ):
        events += [e for e in batch if e.type in FINAL]
        if len(batch) < EVENTS_PAGE:
            break
    done = [_final(e) for e in events]
    return done + await _trying(client, task_id, {d.webhook_id for d in done})


def _final(event: StoredEvent) -> Delivery:
    data = event.data
    status = data.get("status")
    return Delivery(
        webhook_id=str(data.get("id", "")),
        event=str(data.get("event", "")),
        target=str(data.get("target", "")),
        host=data.get("host"),
        state="sent" if event.type == "notification_sent" else "failed",
        attempts=int(data.get("attempts") or 0),
        status=status if isinstance(status, int) else None,
        detail=data.get("detail"),
        at=event.at,
    )


async def _trying(client: Client, task_id: str, finished: set[str]) -> list[Delivery]:
    """The deliveries of the task's running delivery workflows (``notice_workflow_id``) not
    yet ``finished`` (webhook ids)."""
    temporal = client.temporal
    quoted = task_id.replace("\\", "\\\\").replace('"', '\\"')
    query = (
        f'WorkflowType = "{NOTIFICATION_WORKFLOW}" AND WorkflowId STARTS_WITH "{quoted}/notify/" '
        'AND ExecutionStatus = "Running"'
    )
    found: list[Delivery] = []
    try:
        async for execution in temporal.list_workflows(query):
            found += await _running(client, execution.id, finished)
    except RPCError as error:
        raise TemporalUnreachable(
            f"Temporal could not list the notifications of task {task_id}: {error.message}"
        ) from None
    return found


async def _running(client: Client, workflow_id: str, finished: set[str]) -> list[Delivery]:
    """What one running delivery workflow still tries: each target of its notice that wants
    it and has no final event, with the attempt and last failure of its pending delivery
    activity (the workflow starts one per target, in the notice's order, so they are matched
    in that order when each has one; otherwise each shows the first)."""
    handle = client.temporal.get_workflow_handle(workflow_id)
    try:
        description = await handle.describe()
        notice = await _notice(client, workflow_id)
    except RPCError:
        return []  # it ended meanwhile: its event is in the log by now
    if notice is None or description.status != WorkflowExecutionStatus.RUNNING:
        return []
    pending = sorted(
        (
            a
            for a in description.raw_description.pending_activities
            if a.activity_type.name == DELIVER_ACTIVITY
        ),
        key=lambda a: (len(a.activity_id), a.activity_id),  # "2" before "10"
    )
    wanted = {t.ref: t for t in notice.targets if notice.event in t.events}
    trying = [
        ref for ref in wanted if notification_id(notice.task_id, notice.key, ref) not in finished
    ]
    webhooks = client.settings.webhook_table()
    found = []
    for n, ref in enumerate(trying):
        activity = pending[n] if len(pending) == len(trying) else None
        if activity is None and pending:
            activity = pending[0]
        failure = activity.last_failure.message if activity is not None else ""
        found.append(
            Delivery(
                webhook_id=notification_id(notice.task_id, notice.key, ref),
                event=notice.event,
                target=ref,
                host=await _host(client, ref, webhooks),
                state="retrying",
                attempts=activity.attempt if activity is not None else 0,
                detail=failure or None,
            )
        )
    return found


async def _notice(client: Client, workflow_id: str) -> Notice | None:
    """The notice a delivery workflow was started with (its first history event)."""
    handle = client.temporal.get_workflow_handle(workflow_id)
    async for event in handle.fetch_history_events():
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        try:
            [notice] = await client.temporal.data_converter.decode(payloads, [Notice])
        except (ValueError, TypeError):
            return None
        return notice if isinstance(notice, Notice) else None
    return None


async def _host(client: Client, ref: str, webhooks: dict[str, Any]) -> str | None:
    """The host a target's notifications go to, as far as this frontend knows it."""
    if ref.startswith("config:"):
        hook = webhooks.get(ref.removeprefix("config:"))
        return urlsplit(hook.url).hostname if hook is not None else None
    _, message_id = stored_target_id(ref)
    row = await client._store_call("get", message_id)
    return urlsplit(row.text).hostname if row is not None else None
