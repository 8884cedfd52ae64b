"""``Client``: errands over a connected Temporal client, and what a task's start is made of."""

from __future__ import annotations

import asyncio
import copy
import functools
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict, Unpack

from temporalio.client import Client as TemporalClient
from temporalio.client import Interceptor, Plugin
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.runtime import Runtime
from temporalio.service import RPCError

from errands.adapters import connection as connections
from errands.adapters.encryption import SessionTags, data_converter, encrypting, session_tags
from errands.adapters.store import SessionStore, TaskStart, open_store, sqlite_path
from errands.agent.pricing import price_table
from errands.agent.validation import check_model_spec, check_session_id, check_task_text
from errands.client import _notify as notices
from errands.client._access import check_session, no_session
from errands.client._handle import RANDOM_BYTES, TaskHandle
from errands.client._input import checked
from errands.client._quotas import quota_checked
from errands.client._refusals import refusal
from errands.client._schedules import ScheduleCalls
from errands.client._sessions import session_of, session_query, start_memo
from errands.client._task_calls import TASK_WORKFLOW
from errands.client._upgrade import TaskOnOldVersion, upgrade
from errands.contracts import ids, limits, search
from errands.contracts.messages import StoredMessage
from errands.contracts.principals import OPERATOR, Principal
from errands.contracts.workflows import TaskInput, TaskResult
from errands.errors import ConfigError, Conflict, InvalidRequest, TemporalUnreachable
from errands.settings import Settings, load_settings

QUERY_TIMEOUT = 5.0
"""Seconds a running task's worker has to answer a query (or accept an update) before the
request fails with ``NoWorker`` instead of waiting for one indefinitely."""


async def connect(
    settings: Settings | None = None,
    *,
    address: str | None = None,
    namespace: str | None = None,
    embedded: bool = False,
    runtime: Runtime | None = None,
    interceptors: Sequence[Interceptor] = (),
    plugins: Sequence[Plugin] = (),
) -> TemporalClient:
    """A Temporal client as ``settings`` (default: from the environment) configure it, through
    ``temporalio.envconfig``: ``address`` and ``namespace`` as flags, then the ``TEMPORAL_*``
    variables, then the ``temporal.toml`` profile, then a running ``errands dev`` on
    ``127.0.0.1:ERRANDS_DEV_PORT``. ``embedded``: ``address`` is errands' own dev server (plain
    gRPC, nothing of the profile). The data converter is errands' (encrypting with keys set).
    ``ConfigError`` for bad material or a refusal, ``TemporalUnreachable`` for no answer."""
    settings = settings or load_settings()
    if embedded and address is not None:
        connection = connections.embedded(address, settings)
    else:
        connection = connections.resolve(settings, address=address, namespace=namespace)
        if not connection.configured:
            connections.check_unconfigured(connection)
            connection = connections.embedded(f"127.0.0.1:{settings.dev_port}", settings)
    return await connections.open_client(
        connection,
        data_converter(settings),
        runtime=runtime,
        interceptors=interceptors,
        plugins=plugins,
    )


def new_task_id(session_id: str, *, private: bool = False) -> str:
    """Readable and unique: the task id is also the workflow id operators search for.
    ``private`` (payloads encrypted): the session id, which a user may have chosen, stays out
    of it, as out of every id that derives from it."""
    if private:
        return f"task-{secrets.token_hex(RANDOM_BYTES)}"
    return f"task-{session_id}-{secrets.token_hex(RANDOM_BYTES)}"


def new_session_id() -> str:
    return f"s-{secrets.token_hex(4)}"


class StartOptions(TypedDict, total=False):
    """How to start a task (every key optional)."""

    session: str | None
    """The session to work in; default: a new one."""
    model: str | None
    """``provider:model`` of the primary slot; default ``ERRANDS_MODEL`` (or what the provider
    keys imply)."""
    fallback_model: str | None
    """``provider:model`` of the fallback slot; default ``ERRANDS_FALLBACK_MODEL``."""
    headless: bool
    """Nobody will answer questions: ``ask_user`` gets an explicit assumption result."""
    task_id: str | None
    """The id to start it under; default: a new one. A task that exists already under it is
    refused with ``Conflict``, never silently reused."""
    notify: str | Sequence[str] | None
    """Up to 4 ``https://`` URLs notified of this task alone (SPEC §11), each signed with a
    secret of its own, returned once: ``TaskHandle.notify_secrets``."""


def task_input(settings: Settings, text: str, **options: Unpack[StartOptions]) -> TaskInput:
    """A task's input with ``settings`` resolved (models, prices, constants), every argument
    checked (``InvalidRequest``, with ``field`` naming a bad model); never a secret. What
    ``Client.start`` sends; a frontend may call it first to refuse bad input early."""
    session, model = options.get("session"), options.get("model")
    fallback_model, task_id = options.get("fallback_model"), options.get("task_id")
    try:
        check_task_text(text)
        checked(text, "text", limits.MESSAGE_CHARS, what="the task's text")
        session_id = check_session_id(session) if session is not None else new_session_id()
    except ValueError as error:
        raise InvalidRequest(str(error)) from None
    notices.check_not_reserved(session_id)
    notices.notify_urls(options.get("notify"))
    primary = model or settings.default_model()[0]
    fallback = fallback_model or settings.fallback_model
    for field, spec in (("model", primary), ("fallback_model", fallback)):
        if spec is not None:
            checked(spec, field, limits.MODEL_SPEC_CHARS)
            try:
                check_model_spec(spec)
            except ValueError as error:
                raise InvalidRequest(f"{field}: {error}", field=field) from None
    if task_id is not None and not task_id.strip():
        raise InvalidRequest("the task id is blank; give one or leave it out", field="task_id")
    if task_id is not None:
        checked(task_id, "task_id", limits.TASK_ID_CHARS, what="the task id")
        if not re.fullmatch(limits.TASK_PATTERN, task_id):
            raise InvalidRequest(
                f"the task id {task_id!r} is not allowed: it takes no slash, white space or "
                "control character (as in the gateway's task paths); choose one such as "
                "review-2026-12, or leave it out for a new one",
                field="task_id",
            )
    return TaskInput(
        task_id=task_id or new_task_id(session_id, private=encrypting(settings)),
        session_id=session_id,
        text=text,
        model=primary,
        fallback_model=fallback,
        advisor_model=settings.advisor_model,
        side_question_model=settings.side_question_model,
        headless=options.get("headless", False),
        settings=settings.round_settings(),
        prices=price_table(settings.prices),
    )


@dataclass(frozen=True)
class TaskSummary:
    """One task as a list shows it (``Client.tasks``)."""

    task_id: str
    session_id: str | None
    status: str
    """running, completed, failed, canceled, terminated, timed_out or continued_as_new."""
    started_at: str | None
    """ISO 8601, UTC."""
    summary: str
    """The start of the task's text (empty when the session store is not at hand)."""


class Client(ScheduleCalls):
    """errands over a connected Temporal client. ``settings`` (default: from the environment)
    choose the task queue, the default models, prices and the SPEC constants a new task gets.
    ``store``: the session store to read history and progress from (default: opened from
    ``settings`` on first use, never created: a SQLite file that does not exist is refused).
    ``temporal`` may be None for a client that only reads sessions (``history``).

    ``acting``: the principal every call acts as (SPEC §10): it owns the tasks it starts, sees
    only its own tasks and sessions (others' are ``TaskNotFound``/``SessionNotFound``, as missing
    ones), and its answers and approvals are recorded as its own. An application server that
    embeds errands makes one per request with ``as_principal``. None (the default): the operator,
    checked against nothing (the CLI)."""

    def __init__(
        self,
        temporal: TemporalClient | None,
        settings: Settings | None = None,
        *,
        store: SessionStore | None = None,
        query_timeout: float = QUERY_TIMEOUT,
        acting: Principal | None = None,
    ) -> None:
        self._temporal = temporal
        self._settings = settings or load_settings()
        self._store = store
        self._owns_store = False
        self.query_timeout = query_timeout
        self.acting = acting

    def as_principal(self, principal: Principal | None) -> Client:
        """This client acting as ``principal``: the same connection and store (closing it closes
        nothing), every call checked as theirs."""
        view = copy.copy(self)
        view._store = self._writer()  # opened once, here, and shared by every view
        view._owns_store = False
        view.acting = principal
        return view

    @property
    def actor(self) -> Principal:
        """Who an answer, an approval or a message is recorded as: the acting principal, or
        the operator."""
        return self.acting or OPERATOR

    @classmethod
    async def connect(
        cls,
        address: str | None = None,
        namespace: str | None = None,
        settings: Settings | None = None,
        *,
        store: SessionStore | None = None,
    ) -> Client:
        """Connect as ``connect`` does: ``address`` and ``namespace`` over the ``TEMPORAL_*``
        variables and the ``temporal.toml`` profile, else a running ``errands dev`` on
        ``127.0.0.1:ERRANDS_DEV_PORT``."""
        settings = settings or load_settings()
        temporal = await connect(settings, address=address, namespace=namespace)
        return cls(temporal, settings, store=store)

    @property
    def temporal(self) -> TemporalClient:
        """The Temporal client underneath (for a worker, or anything errands does not wrap)."""
        if self._temporal is None:
            raise ConfigError(
                "this errands.Client reads sessions only; connect it to Temporal "
                "(errands.Client.connect) to work with tasks",
                setting="TEMPORAL_ADDRESS",
            )
        return self._temporal

    @property
    def settings(self) -> Settings:
        return self._settings

    @functools.cached_property
    def session_tags(self) -> SessionTags:
        """How this client writes and searches ``ErrandsSession`` (digests with encryption)."""
        return session_tags(self._settings)

    @property
    def namespace(self) -> str:
        return self.temporal.namespace

    async def close(self) -> None:
        """Close the session store if this client opened it."""
        if self._owns_store and self._store is not None:
            await asyncio.to_thread(self._store.close)
            self._store = None

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- tasks ------------------------------------------------------------------------------

    def task(self, task_id: str) -> TaskHandle:
        """A handle on an existing task (nothing is checked until it is used)."""
        return TaskHandle(self, task_id)

    async def start(self, text: str, **options: Unpack[StartOptions]) -> TaskHandle:
        """Start a task and return at once (``options``: see ``StartOptions``). Acting as a
        principal: the task is theirs, the session too if nobody owned it (a session someone
        else owns is ``SessionNotFound``; an admin's task there is the session owner's), and
        their quotas are checked first (``QuotaExceeded``: nothing started)."""
        data = task_input(self._settings, text, **options)
        acting = self.acting
        async with quota_checked(self, acting):  # held until the start is recorded
            owner = await self._owner_of_new_task(data.session_id)  # claimed once allowed
            role = acting.role if acting is not None and acting.id == owner else None
            urls = notices.notify_urls(options.get("notify"))
            notify, given = await notices.start_targets(self, data.task_id, owner, role, urls)
            update = {"owner": owner, "owner_role": role, "notify": notify}
            data = data.model_copy(update=update)
            try:
                await self.temporal.start_workflow(
                    TASK_WORKFLOW,
                    data,
                    id=data.task_id,
                    task_queue=self._settings.task_queue,
                    search_attributes=search.initial(
                        self.session_tags.written(data.session_id), data.owner
                    ),
                    memo=start_memo(self.session_tags, data.session_id),
                    static_summary=text[:200],  # encrypted with the payloads when keys are set
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                    id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                )
            except WorkflowAlreadyStartedError:
                raise Conflict(
                    f"a task with id {data.task_id!r} exists already; start it under another id "
                    "(or leave the id out to get a new one)"
                ) from None
            except RPCError as error:
                raise refusal(error, data.task_id, self.namespace) from None
            await self.record_start(data)
        return TaskHandle(self, data.task_id, session_id=data.session_id, notify_secrets=given)

    async def record_start(self, data: TaskInput) -> None:
        """Record that the task ``data`` started, for its owner's quotas (nothing for a task
        nobody owns). Its first activity records it too (``open_task``), so a task started
        elsewhere (queued by a workflow, by another program) counts as well."""
        if data.owner is None:
            return
        start = TaskStart(
            task_id=data.task_id,
            owner=data.owner,
            session_id=data.session_id,
            started_at=datetime.now(UTC),
        )
        await self._store_call("record_start", start)

    async def _owner_of_new_task(self, session_id: str) -> str | None:
        """Whose a new task in ``session_id`` is: the session's owner. Acting as a principal,
        a new session becomes theirs; another's is refused unless they are an admin, and so is
        a session nobody owns that already has messages (one from before owners, or an
        operator's): claiming it would hand them its history. The operator's task belongs to
        the session's owner, if any."""
        owner: str | None = await self._store_call("session_owner", session_id)
        principal = self.acting
        if principal is None:
            return owner
        if owner is None:
            if not principal.is_admin and await self._store_call("last_seq", session_id) > 0:
                raise no_session(session_id)
            owner = await self._store_call("claim_session", session_id, principal.id)
        check_session(principal, session_id, owner)
        return owner

    async def run(self, text: str, **options: Unpack[StartOptions]) -> TaskResult:
        """Start a task and wait for its result (``result.raise_for_status()`` to raise unless
        it replied)."""
        handle = await self.start(text, **options)
        return await handle.wait()

    async def tasks(self, *, session: str | None = None, limit: int = 50) -> list[TaskSummary]:
        """The latest ``limit`` tasks (of ``session``), newest first, from Temporal's
        visibility (which lags a start by up to a second or so)."""
        query = f"WorkflowType = '{TASK_WORKFLOW}'"
        if self.acting is not None and not self.acting.is_admin:
            query += f" AND {search.owner_filter(self.acting.id)}"
        if session is not None:
            query += f" AND {session_query(self.session_tags, check_session_id(session))}"
        found = []
        try:
            async for execution in self.temporal.list_workflows(query, limit=limit):
                found.append(execution)
        except RPCError as error:
            raise TemporalUnreachable(
                f"Temporal could not list the tasks of namespace {self.namespace}: {error.message}"
            ) from None
        store = await asyncio.to_thread(self._reader, False)
        summaries = []
        for execution in found:
            text = ""
            if store is not None:
                row = await asyncio.to_thread(store.get, ids.user_message_id(execution.id))
                text = row.text[:200] if row is not None else ""
            status = execution.status.name.lower() if execution.status else "running"
            summaries.append(
                TaskSummary(
                    task_id=execution.id,
                    session_id=await session_of(self.temporal, execution, self.session_tags),
                    status=status,
                    started_at=execution.start_time.isoformat() if execution.start_time else None,
                    summary=text,
                )
            )
        return summaries

    async def notifications(self, task_id: str) -> list[notices.Delivery]:
        """Every delivery of the task's notifications, sent, failed or still retrying (the task
        read as ``status`` reads it: ``TaskNotFound`` unless the caller may)."""
        return await notices.deliveries(self.task(task_id))

    async def upgrade(
        self, from_build: str, *, deployment: str | None = None, dry_run: bool = False
    ) -> list[TaskOnOldVersion]:
        """The running tasks still pinned to build ``from_build`` of the worker deployment
        (default ``ERRANDS_DEPLOYMENT_NAME``), each woken so it moves to the current version
        (unless ``dry_run``): see ``errands.client._upgrade``."""
        return await upgrade(self, from_build, deployment=deployment, dry_run=dry_run)

    # -- the session store ------------------------------------------------------------------

    async def history(self, session_id: str, *, after: int = 0) -> list[StoredMessage]:
        """The session's messages, oldest first (those with ``seq > after``)."""
        notices.check_readable(session_id)  # not the targets of tasks, with their secrets
        store = await asyncio.to_thread(self._reader, True)
        assert store is not None
        if self.acting is not None:
            owner = await asyncio.to_thread(store.session_owner, session_id)
            check_session(self.acting, session_id, owner)
        rows = await asyncio.to_thread(store.list_session, session_id)
        return [r for r in rows if r.seq > after]

    async def _store_call(self, method: str, *args: object) -> Any:
        """``method`` of the session store (created on first use: a start may be the first
        thing this errands does), off the event loop."""
        store = await asyncio.to_thread(self._writer)
        return await asyncio.to_thread(getattr(store, method), *args)

    def store(self) -> SessionStore:
        """The session store (opened, and for SQLite created, on first use): where sessions,
        event logs, API keys and ownership are kept."""
        return self._writer()

    def _writer(self) -> SessionStore:
        if self._store is None:
            self._store, self._owns_store = open_store(self._settings.session_database_url()), True
        return self._store

    def _reader(self, required: bool) -> SessionStore | None:
        """The store to read from. One that does not exist yet is never created by a read:
        ``required`` refuses it with a ConfigError, otherwise there is nothing to read."""
        if self._store is not None:
            return self._store
        url = self._settings.session_database_url()
        path = sqlite_path(url)  # the settings checked the URL
        if path is not None and not Path(path).exists():
            if not required:
                return None
            raise ConfigError(
                f"no session store at {path}; run from the directory you ran errands in, or set "
                "ERRANDS_DATABASE_URL (or ERRANDS_DATA_DIR) to where the sessions are",
                setting="ERRANDS_DATABASE_URL",
            )
        self._store, self._owns_store = open_store(url), True
        return self._store

    # -- shared by the handles --------------------------------------------------------------
