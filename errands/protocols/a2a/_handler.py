"""``ErrandsRequestHandler``: the A2A request handler of both bindings (JSON-RPC and HTTP+JSON),
over errands' own tasks. Not the SDK's ``AgentExecutor``: an executor runs a task inside one
server process and fails the task on any error it raises, where an errands task runs on its
workers whatever becomes of the gateway, and a refused answer must leave the task waiting.

Each call acts as the principal the gateway resolved for its HTTP request
(``context.state[PRINCIPAL]``) through ``errands.Client.as_principal``, so what it may see and
do is decided in the client layer, as for every other frontend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import RequestHandler
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    TaskNotCancelableError,
    UnsupportedOperationError,
)
from a2a.utils.task import validate_page_size

from errands.agent.webhooks import check_secret
from errands.client import Client, TaskHandle, add_target, remove_target, targets_of
from errands.client._notify import notify_urls
from errands.client._push import check_token
from errands.contracts.principals import Principal
from errands.errors import InvalidRequest, TaskEnded
from errands.protocols.a2a import _log
from errands.protocols.a2a._mapping import (
    ENDED,
    FALLBACK_MODEL,
    HEADLESS,
    MODE,
    MODEL,
    Incoming,
)
from errands.protocols.a2a._refusals import as_a2a, resume_point

PRINCIPAL = "errands.principal"
"""Where the call context holds the principal the request acts as."""
RECHECK = "errands.recheck"
"""Where it holds how to ask the request's credential again (raises ``Unauthorized`` when it
no longer stands for the principal)."""
RECHECK_SECONDS = 5.0
"""How often an open stream asks its credential again, before the next event it sends: a
revoked key or an expired token ends it (``InvalidRequestError`` saying why)."""

WAIT_SECONDS = 30.0
"""How long ``SendMessage`` without ``returnImmediately`` (and ``CancelTask``) waits for the
task to complete, fail, be canceled or need input before it answers with the task as it stands
(``working``): a long task never holds a request longer; the client follows it with
``SubscribeToTask`` or ``GetTask``."""

DEFAULT_PAGE = 50
DEEPEST_PAGE = 10_000
"""The furthest into the caller's tasks a ``ListTasks`` page may start."""
LISTED_AT_ONCE = 8
"""Tasks of a ``ListTasks`` page read at the same time."""


class ErrandsRequestHandler(RequestHandler):
    """A2A over ``base`` (the gateway's client), each call acting as its request's principal."""

    def __init__(self, base: Client) -> None:
        self._base = base

    def _acting(self, context: ServerCallContext | None) -> Client:
        principal = context.state.get(PRINCIPAL) if context is not None else None
        if not isinstance(principal, Principal):
            # The gateway resolves every A2A request's principal before the handler runs.
            raise InternalError(message="the request reached A2A without a principal")
        return self._base.as_principal(principal)

    # -- messages ---------------------------------------------------------------------------

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        client = self._acting(context)
        config = params.configuration
        last = config.history_length if config.HasField("history_length") else 0
        with as_a2a():
            handle, before = await self._deliver(client, params)
            if not config.return_immediately:
                await _log.settle(handle, before or 0, WAIT_SECONDS)
            task, _ = await _log.snapshot(client, handle, after_delivery=before, last=last)
        return task

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any]:
        client = self._acting(context)
        with as_a2a():
            handle, before = await self._deliver(client, params)
            # The stream of a delivery carries every event after it: a new task's from its first.
            upto = before or 0
            task, read = await _log.snapshot(client, handle, after_delivery=before, upto=upto)
        yield task
        if task.status.state in ENDED:
            return
        with as_a2a():
            async for update in _rechecked(context, _log.tail(client, handle, read)):
                yield update

    async def _deliver(
        self, client: Client, params: SendMessageRequest
    ) -> tuple[TaskHandle, int | None]:
        """Start a task, or answer, approve or steer the one the message names. Returns its
        handle and, for an existing task, the seq its log stood at before the delivery. A
        refusal changes nothing."""
        incoming = Incoming.read(params)
        message = params.message
        if not message.task_id:
            push = None
            if params.configuration.HasField("task_push_notification_config"):
                push = params.configuration.task_push_notification_config
                check_push(push)  # refused before anything starts
            handle = await client.start(
                incoming.text,
                session=message.context_id or None,
                model=incoming.option(MODEL, str),
                fallback_model=incoming.option(FALLBACK_MODEL, str),
                headless=bool(incoming.option(HEADLESS, bool)),
            )
            if push is not None:
                await add_target(
                    handle, push.url, token=push.token or None, secret=signing_secret(push)
                )
            return handle, None
        handle = client.task(message.task_id)
        before = await _log.last_seq(handle)
        await self._into(handle, incoming)
        return handle, before

    async def _into(self, handle: TaskHandle, incoming: Incoming) -> None:
        """Deliver a message to an existing task: an answer to its question, a decision on the
        call waiting for approval, or (while it works) a message that steers it."""
        data = incoming.data or {}
        if "decision" in data:
            await _decide(handle, data)
            return
        status = await handle.status()
        if status.pending_question is not None or "answers" in data:
            pending = status.pending_question or {}
            await handle.answer(
                incoming.answers(pending),
                question_set_id=_text_field(data, "question_set_id"),
            )
            return
        if status.pending_approval is not None:
            raise InvalidRequest(
                f"task {handle.task_id} waits for approval of a call of "
                f"{status.pending_approval.get('tool')}: send a DataPart "
                '{"decision": "approve" | "approve_always" | "deny", "reason"?}'
            )
        if not incoming.text.strip():
            raise InvalidRequest(
                "the message has no text to send the task; write what the agent should know"
            )
        try:
            await handle.say(incoming.text, mode=incoming.option(MODE, str) or "steer")
        except TaskEnded as ended:
            raise UnsupportedOperationError(
                message=f"task {handle.task_id} has ended ({ended.ended}); the message was not "
                "sent: send it without a taskId, with the task's contextId, to start a new task "
                "in its session"
            ) from None

    # -- reading ----------------------------------------------------------------------------

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any]:
        client = self._acting(context)
        after = resume_point(context.state.get("headers", {}).get("last-event-id"))
        handle = client.task(params.id)
        task: Task | None = None
        with as_a2a():
            if after is None:
                task, read = await _log.snapshot(client, handle)
                if task.status.state in ENDED:
                    raise UnsupportedOperationError(
                        message=f"task {params.id} has ended; GetTask shows its result"
                    )
            else:
                read = await _log.progress(handle, after)
                if read.ended is not None and not await handle.events_after(after, limit=1):
                    task, _ = await _log.snapshot(client, handle)  # resumed after its end
        if task is not None:
            yield task
            if task.status.state in ENDED:
                return
        with as_a2a():
            async for update in _rechecked(context, _log.tail(client, handle, read)):
                yield update

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        client = self._acting(context)
        last = params.history_length if params.HasField("history_length") else None
        if last is not None and last < 0:
            raise InvalidParamsError(message="historyLength is 0 or more")
        with as_a2a():
            task, _ = await _log.snapshot(client, client.task(params.id), last=last)
        return task

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        client = self._acting(context)
        size = params.page_size or DEFAULT_PAGE
        validate_page_size(size)
        offset = _offset(params.page_token)
        with as_a2a():
            found = await client.tasks(session=params.context_id or None, limit=offset + size + 1)
            page = found[offset : offset + size]
            gate = asyncio.Semaphore(LISTED_AT_ONCE)

            async def read(task_id: str) -> Task:
                async with gate:
                    task, _ = await _log.snapshot(client, client.task(task_id))
                    return task

            tasks = await asyncio.gather(*(read(t.task_id) for t in page))
        if params.status != TaskState.TASK_STATE_UNSPECIFIED:
            tasks = [t for t in tasks if t.status.state == params.status]
        if not params.include_artifacts:
            for task in tasks:
                del task.artifacts[:]
        more = len(found) > offset + size
        return ListTasksResponse(
            tasks=tasks,
            next_page_token=str(offset + size) if more else "",
            page_size=size,
            total_size=offset + len(page) + (1 if more else 0),
        )

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task:
        client = self._acting(context)
        handle = client.task(params.id)
        with as_a2a(ended=TaskNotCancelableError):
            before = await _log.last_seq(handle)
            await handle.cancel()
            await _log.settle(handle, before, WAIT_SECONDS)
            task, _ = await _log.snapshot(client, handle)
        return task

    # -- not (yet) offered ------------------------------------------------------------------

    # -- push notification configs: targets of the task's notifications (SPEC §11) ----------

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        handle = self._acting(context).task(params.task_id)
        with as_a2a():
            given = await add_target(
                handle, params.url, token=params.token or None, secret=signing_secret(params)
            )
        return TaskPushNotificationConfig(
            task_id=params.task_id, id=given.ref, url=given.url, token=params.token
        )

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        for config in await self._configs(context, params.task_id):
            if config.id == params.id:
                return config
        raise InvalidParamsError(message=f"task {params.task_id} has no push config {params.id}")

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        return ListTaskPushNotificationConfigsResponse(
            configs=await self._configs(context, params.task_id)
        )

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        handle = self._acting(context).task(params.task_id)
        with as_a2a():
            removed = await remove_target(handle, params.id)
        if not removed:
            raise InvalidParamsError(
                message=f"task {params.task_id} has no push config {params.id}"
            )

    async def _configs(
        self, context: ServerCallContext, task_id: str
    ) -> list[TaskPushNotificationConfig]:
        handle = self._acting(context).task(task_id)
        with as_a2a():
            targets = await targets_of(handle)
        return [
            TaskPushNotificationConfig(
                task_id=task_id, id=t.ref, url=t.url
            )  # the token: never again
            for t in targets
            if t.format == "a2a"
        ]

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError(
            message="errands has no extended agent card; the public one at "
            "/.well-known/agent-card.json is all there is"
        )


async def _rechecked(
    context: ServerCallContext, updates: AsyncGenerator[Any, None]
) -> AsyncGenerator[Any, None]:
    """``updates``, each after the request's credential was asked again if it was last asked
    ``RECHECK_SECONDS`` ago or more (a stream with nothing to send sends nothing to anyone)."""
    recheck = context.state.get(RECHECK)
    clock = asyncio.get_running_loop().time
    asked = clock()
    async with aclosing(updates):
        async for update in updates:
            if recheck is not None and clock() - asked >= RECHECK_SECONDS:
                await recheck()
                asked = clock()
            yield update


async def _decide(handle: TaskHandle, data: dict[str, Any]) -> None:
    """Approve or deny the call waiting for approval, as ``errands approve`` / ``deny``."""
    decision = data.get("decision")
    pinned = {
        "approval_id": _text_field(data, "approval_id"),
        "arguments_sha256": _text_field(data, "arguments_sha256"),
    }
    if decision == "deny":
        await handle.deny(_text_field(data, "reason"), **pinned)
    elif decision in ("approve", "approve_always"):
        await handle.approve(always=decision == "approve_always", **pinned)
    else:
        raise InvalidRequest(f"decision is approve, approve_always or deny, not {decision!r}")


def _text_field(data: dict[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidRequest(f"{name} is a string, not {value!r}")
    return value


def _offset(token: str) -> int:
    """A ``ListTasks`` page token: where the page starts in the caller's list."""
    if not token:
        return 0
    if not (token.isascii() and token.isdigit()) or len(token) > 9 or int(token) > DEEPEST_PAGE:
        raise InvalidParamsError(
            message=f"pageToken {token!r} is not one this server gave; send the nextPageToken "
            "of the previous page, or none for the first"
        )
    return int(token)


SIGNING_SCHEME = "standard-webhooks"
"""The ``authentication.scheme`` of a push config whose ``credentials`` is the ``whsec_…``
secret its notifications are signed with (docs/a2a.md); without it errands signs with a
secret of its own, and the config's ``token`` is what a receiver checks."""


def signing_secret(config: TaskPushNotificationConfig) -> str | None:
    """The secret a push config asks its notifications to be signed with, if it names one."""
    auth = config.authentication
    if auth.scheme.lower() == SIGNING_SCHEME and auth.credentials:
        return auth.credentials
    return None


def check_push(config: TaskPushNotificationConfig) -> None:
    """A push config errands could keep (its URL's shape, its token, its secret), or the
    ``InvalidRequest`` that ``add_target`` would raise, before a task is started for it."""
    notify_urls(config.url)
    check_token(config.token or None)
    secret = signing_secret(config)
    if secret is not None:
        try:
            check_secret(secret, "the push config's secret")
        except ValueError as error:
            raise InvalidRequest(str(error), field="secret") from None
