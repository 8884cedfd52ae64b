"""Targets given to a task while it runs (an A2A push config, SPEC §12): each kept in the store
with a fresh secret like a start's ``notify`` URL (``errands.client._notify``), then signalled to
the task, which notifies it of every change from then on through the same durable, signed,
guarded delivery. Removing one signals the task and leaves a mark in the store, which is
append-only."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from temporalio.service import RPCError

from errands.adapters.webhooks import new_secret
from errands.agent.webhooks import check_secret
from errands.client._notify import GivenTarget, forget_target, notify_urls, store_target
from errands.contracts.messages import StoredMessage
from errands.contracts.notifications import (
    ADD_TARGET_SIGNAL,
    REMOVE_TARGET_SIGNAL,
    NotifyFormat,
    NotifyTarget,
    stored_target_id,
    stored_target_ref,
    task_owner,
)
from errands.errors import Conflict, InvalidRequest

if TYPE_CHECKING:
    from errands.client._handle import TaskHandle, TaskInfo

MAX_TARGETS = 16
"""The most targets one task keeps (its start's and those given since)."""


@dataclass(frozen=True)
class PushTarget:
    """A target given to a task, as the store keeps it (the secret aside)."""

    ref: str
    url: str
    format: NotifyFormat
    token: str | None


async def add_target(
    handle: TaskHandle,
    url: str,
    *,
    token: str | None = None,
    secret: str | None = None,
    format: NotifyFormat = "a2a",
) -> GivenTarget:
    """Notify ``url`` of the task's changes from now on (``token``: an A2A push config's, sent
    back with each notification; ``secret``: the ``whsec_…`` to sign with, default a fresh
    one). ``TaskNotFound`` for a task the caller may not read; a task that has ended keeps the
    target, which hears nothing more."""
    description = await _owned(handle)
    [url] = notify_urls(url)
    check_token(token)
    if secret is not None:
        try:
            check_secret(secret, "the push config's secret")
        except ValueError as error:
            raise InvalidRequest(str(error), field="secret") from None
    client, task_id = handle._client, handle.task_id
    rows = await _rows(handle)
    taken = {row.id for row in rows}
    k = next(
        k for k in range(1, MAX_TARGETS + 2) if stored_target_id(_ref(task_id, k))[1] not in taken
    )
    if k > MAX_TARGETS:
        raise Conflict(
            f"task {task_id} has {MAX_TARGETS} notification targets already; remove one first"
        )
    given = GivenTarget(url=url, ref=_ref(task_id, k), secret=secret or new_secret())
    if not await store_target(client, given, owner_id=task_id, format=format, token=token):
        raise Conflict(f"task {task_id} was given another target at the same moment; try again")
    if description.running:
        await _signal(handle, ADD_TARGET_SIGNAL, NotifyTarget(ref=given.ref, format=format))
    return given


async def targets_of(handle: TaskHandle) -> list[PushTarget]:
    """The targets the task was given (at its start or since), not removed, oldest first."""
    await _owned(handle)
    rows = await _rows(handle)
    removed = {row.id.removesuffix(":removed") for row in rows if row.id.endswith(":removed")}
    return [
        PushTarget(
            ref=row.id.removeprefix("notify:"),
            url=row.text,
            format=row.meta.get("format", "standard"),
            token=row.meta.get("token"),
        )
        for row in rows
        if not row.id.endswith(":removed") and row.id not in removed
    ]


async def remove_target(handle: TaskHandle, ref: str) -> bool:
    """Notify ``ref`` no more; False when the task has no such target."""
    description = await _owned(handle)
    if ref not in {target.ref for target in await targets_of(handle)}:
        return False
    await forget_target(handle._client, ref, owner_id=handle.task_id)
    if description.running:
        await _signal(handle, REMOVE_TARGET_SIGNAL, ref)
    return True


def _ref(task_id: str, k: int) -> str:
    return stored_target_ref(task_owner(task_id), k)


TOKEN = re.compile(r"[\x21-\x7e]{1,512}")
"""An A2A push token: printable ASCII, no spaces (it travels as a header)."""


def check_token(token: str | None) -> None:
    """A token that can travel as a header; the refusal never quotes it."""
    if token is not None and not TOKEN.fullmatch(token):
        raise InvalidRequest(
            "the push config's token must be 1 to 512 printable ASCII characters without spaces",
            field="token",
        )


async def _owned(handle: TaskHandle) -> TaskInfo:
    """The task, once the caller may steer it (its owner or an admin): where its notifications
    go is theirs alone, not an approver's reading it for a call."""
    await handle._describe("steer")
    return await handle.describe()


async def _rows(handle: TaskHandle) -> list[StoredMessage]:
    session_id, _ = stored_target_id(_ref(handle.task_id, 1))
    rows: list[StoredMessage] = await handle._client._store_call("list_session", session_id)
    return rows


async def _signal(handle: TaskHandle, name: str, arg: object) -> None:
    try:
        await handle._temporal.get_workflow_handle(handle.task_id).signal(name, arg)
    except RPCError:
        pass  # it ended meanwhile: nothing more to notify
