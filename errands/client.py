"""``errands.Client``: the one way a frontend talks to errands (the CLI, the HTTP gateway and any
Python program go through it).

::

    client = await errands.Client.connect()            # TEMPORAL_ADDRESS, or `errands dev`
    task = await client.start("Compare three databases", session="s1")
    async for event in task.progress():                 # round_started, delegated, …, replied
        ...
    result = await task.wait()                          # a TaskResult, whatever the outcome
    result.raise_for_status()                           # TaskFailed unless it replied

Every refusal is one of ``errands.errors``: ``TaskNotFound``, ``TaskEnded``, ``Conflict``,
``InvalidRequest``/``AnswerRejected``, ``NoWorker`` (a running task nobody serves: every query
and update start is bounded by ``query_timeout``), ``TemporalUnreachable``, ``SideQuestionFailed``.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypedDict, TypeVar, Unpack

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client as TemporalClient
from temporalio.client import (
    Interceptor,
    Plugin,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    TerminatedError,
    WorkflowAlreadyStartedError,
)
from temporalio.exceptions import TimeoutError as WorkflowTimeoutError
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode

from errands import ids
from errands.activity_io import RoundStepInput, SideAnswer, SideQuestionInput
from errands.contracts import StoredMessage
from errands.errors import (
    AnswerRejected,
    ConfigError,
    Conflict,
    FailureKind,
    InvalidRequest,
    NoWorker,
    SideQuestionFailed,
    TaskEnded,
    TaskNotFound,
    TemporalUnreachable,
    Unavailable,
    failure_kind,
)
from errands.pricing import price_table
from errands.progress import ProgressEvent, Snapshot, Tracker, last_round
from errands.settings import Settings, load_settings
from errands.side_questions import SIDE_TIMEOUT_SECONDS
from errands.store import SessionStore, open_store, sqlite_path
from errands.validation import check_model_spec, check_session_id, check_task_text
from errands.workflow_io import (
    AnswerReceipt,
    SideQuestion,
    TaskError,
    TaskInput,
    TaskResult,
    TaskStatusName,
)
from workflows import _search as search

TASK_WORKFLOW = "TaskWorkflow"
SIDE_QUESTION_WORKFLOW = "SideQuestionWorkflow"
QUERY_TIMEOUT = 5.0
"""Seconds a running task's worker has to answer a query (or accept an update) before the
request fails with ``NoWorker`` instead of waiting for one indefinitely."""
RANDOM_BYTES = 8
"""Random part of task and side-question ids: 64 bits, so two never collide."""

_Result = TypeVar("_Result")


async def connect(
    address: str,
    namespace: str = "default",
    *,
    runtime: Runtime | None = None,
    interceptors: Sequence[Interceptor] = (),
    plugins: Sequence[Plugin] = (),
) -> TemporalClient:
    """A Temporal client with the pydantic data converter errands' payloads need."""
    try:
        return await TemporalClient.connect(
            address,
            namespace=namespace,
            data_converter=pydantic_data_converter,
            runtime=runtime,
            interceptors=interceptors,
            plugins=plugins,
        )
    except RuntimeError as error:  # what Client.connect raises when it cannot connect
        raise TemporalUnreachable(
            f"cannot connect to Temporal at {address} ({error}); check TEMPORAL_ADDRESS and "
            "that the server is up, or start the embedded stack with `errands dev`"
        ) from None


def new_task_id(session_id: str) -> str:
    """Readable and unique: the task id is also the workflow id operators search for."""
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


def task_input(settings: Settings, text: str, **options: Unpack[StartOptions]) -> TaskInput:
    """A task's input with ``settings`` resolved (models, prices, constants), every argument
    checked (``InvalidRequest``, with ``field`` naming a bad model); never a secret. What
    ``Client.start`` sends; a frontend may call it first to refuse bad input early."""
    session, model = options.get("session"), options.get("model")
    fallback_model, task_id = options.get("fallback_model"), options.get("task_id")
    try:
        check_task_text(text)
        session_id = check_session_id(session) if session is not None else new_session_id()
    except ValueError as error:
        raise InvalidRequest(str(error)) from None
    primary = model or settings.default_model()[0]
    fallback = fallback_model or settings.fallback_model
    for field, spec in (("model", primary), ("fallback_model", fallback)):
        if spec is not None:
            try:
                check_model_spec(spec)
            except ValueError as error:
                raise InvalidRequest(f"{field}: {error}", field=field) from None
    if task_id is not None and not task_id.strip():
        raise InvalidRequest("the task id is blank; give one or leave it out", field="task_id")
    return TaskInput(
        task_id=task_id or new_task_id(session_id),
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


class Client:
    """errands over a connected Temporal client. ``settings`` (default: from the environment)
    choose the task queue, the default models, prices and the SPEC constants a new task gets.
    ``store``: the session store to read history and progress from (default: opened from
    ``settings`` on first use, never created: a SQLite file that does not exist is refused).
    ``temporal`` may be None for a client that only reads sessions (``history``)."""

    def __init__(
        self,
        temporal: TemporalClient | None,
        settings: Settings | None = None,
        *,
        store: SessionStore | None = None,
        query_timeout: float = QUERY_TIMEOUT,
    ) -> None:
        self._temporal = temporal
        self._settings = settings or load_settings()
        self._store = store
        self._owns_store = False
        self.query_timeout = query_timeout

    @classmethod
    async def connect(
        cls,
        address: str | None = None,
        namespace: str | None = None,
        settings: Settings | None = None,
        *,
        store: SessionStore | None = None,
    ) -> Client:
        """Connect to ``address`` (default ``TEMPORAL_ADDRESS``, else a running ``errands dev``
        on ``127.0.0.1:ERRANDS_DEV_PORT``)."""
        settings = settings or load_settings()
        address = address or settings.temporal_address or f"127.0.0.1:{settings.dev_port}"
        temporal = await connect(address, namespace or settings.temporal_namespace)
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
        """Start a task and return at once (``options``: see ``StartOptions``)."""
        data = task_input(self._settings, text, **options)
        try:
            await self.temporal.start_workflow(
                TASK_WORKFLOW,
                data,
                id=data.task_id,
                task_queue=self._settings.task_queue,
                search_attributes=search.initial(data.session_id),
                static_summary=text[:200],
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            )
        except WorkflowAlreadyStartedError:
            raise Conflict(
                f"a task with id {data.task_id!r} exists already; start it under another id "
                "(or leave the id out to get a new one)"
            ) from None
        except RPCError as error:
            raise _refusal(error, data.task_id, self.namespace) from None
        return TaskHandle(self, data.task_id, session_id=data.session_id)

    async def run(self, text: str, **options: Unpack[StartOptions]) -> TaskResult:
        """Start a task and wait for its result (``result.raise_for_status()`` to raise unless
        it replied)."""
        handle = await self.start(text, **options)
        return await handle.wait()

    # -- the session store ------------------------------------------------------------------

    async def history(self, session_id: str, *, after: int = 0) -> list[StoredMessage]:
        """The session's messages, oldest first (those with ``seq > after``)."""
        store = await asyncio.to_thread(self._reader, True)
        assert store is not None
        rows = await asyncio.to_thread(store.list_session, session_id)
        return [r for r in rows if r.seq > after]

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

    async def _why_unanswered(self, description: WorkflowExecutionDescription, detail: str) -> str:
        queue = description.task_queue
        request = DescribeTaskQueueRequest(
            namespace=self.namespace,
            task_queue=TaskQueue(name=queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
        timeout = timedelta(seconds=self.query_timeout)
        try:
            polled = await self.temporal.workflow_service.describe_task_queue(
                request, timeout=timeout
            )
        except RPCError:
            polled = None
        if polled is not None and not polled.pollers:
            return (
                f"no worker on task queue {queue} took up task {description.id} within "
                f"{self.query_timeout:g} s: no worker is polling task queue {queue}; start one "
                f"with `errands worker` (ERRANDS_TASK_QUEUE={queue}) or `errands dev`"
            )
        return (
            f"no worker on task queue {queue} answered about task {description.id} within "
            f"{self.query_timeout:g} s ({detail}); check that `errands worker` is running there "
            "and what its log says"
        )


@dataclass(frozen=True)
class TaskInfo:
    task_id: str
    running: bool
    status: str
    """How Temporal sees the workflow: running, completed, failed, canceled, terminated, …"""
    task_queue: str
    session_id: str | None


class TaskHandle:
    """One task: its state, its result, and everything a frontend may send it."""

    def __init__(self, client: Client, task_id: str, *, session_id: str | None = None) -> None:
        self._client = client
        self.task_id = task_id
        self.session_id = session_id
        """The task's session, when known without asking (a handle from ``start``)."""

    def __repr__(self) -> str:
        return f"TaskHandle({self.task_id!r})"

    # -- reads ------------------------------------------------------------------------------

    async def describe(self) -> TaskInfo:
        """What Temporal knows of the task without asking its worker (``TaskNotFound`` when
        there is no such task)."""
        description = await self._describe()
        status = description.status.name.lower() if description.status else "unknown"
        return TaskInfo(
            task_id=self.task_id,
            running=description.status == WorkflowExecutionStatus.RUNNING,
            status=status,
            task_queue=description.task_queue,
            session_id=description.typed_search_attributes.get(search.SESSION),
        )

    async def status(self) -> TaskResult:
        """The task as it stands: live while it runs, its result once it has ended."""
        description = await self._describe()
        if description.status == WorkflowExecutionStatus.RUNNING:
            live = await self._live(description)
            if live is not None:
                return live
            description = await self._describe()
        return await self._closed(description)

    async def wait(self, timeout: float | None = None) -> TaskResult:
        """The task's result once it ends, whatever the outcome (``TimeoutError`` after
        ``timeout`` seconds; the task goes on). Needs no worker to wait."""
        await self._describe()
        handle = self._temporal.get_workflow_handle(self.task_id, result_type=TaskResult)
        async with asyncio.timeout(timeout):
            try:
                return await handle.result(follow_runs=True)
            except WorkflowFailureError:
                return await self._closed(await self._describe())
            except RPCError as error:
                raise _refusal(error, self.task_id, self._client.namespace) from None

    async def pending_question(self) -> dict[str, Any] | None:
        """The question set waiting for an answer, or None."""
        description = await self._running("there is no question to answer")
        pending: dict[str, Any] | None = await self._query(description, "pending_question")
        return pending

    async def progress(self, *, interval: float = 0.25) -> AsyncIterator[ProgressEvent]:
        """The task's progress events from its start, then live, until it ends (the last event
        carries its result). Reading adds nothing to the task's history. While the task cannot
        be read (no worker, Temporal down) an ``unavailable`` note is yielded once per outage
        and reading goes on."""
        tracker, failures = Tracker(), 0
        while True:
            try:
                snap = await self._snapshot()
            except Unavailable as error:
                failures += 1
                if failures == 1:
                    yield tracker.unavailable(error.message)
                await asyncio.sleep(min(5.0, interval * 2**failures))
                continue
            failures = 0
            for event in tracker.update(snap):
                yield event
            if snap.ended:
                return
            await asyncio.sleep(interval)

    # -- writes -----------------------------------------------------------------------------

    async def answer(
        self,
        answers: Mapping[str, Sequence[str] | str] | None = None,
        *,
        dismiss: bool = False,
        cancel: bool = False,
        question_set_id: str | None = None,
    ) -> AnswerReceipt:
        """Answer the pending question: ``answers`` per question id (offered labels,
        ``Other: <words>``, or text), ``dismiss`` to choose nothing, ``cancel`` to withdraw it.
        ``question_set_id``: refuse the answer unless that question set is the one pending."""
        if int(dismiss) + int(cancel) + int(bool(answers)) > 1:
            raise InvalidRequest("give answers, or dismiss, or cancel: one of them")
        description = await self._running("there is no question to answer")
        pending = await self._query(description, "pending_question")
        if not pending:
            raise Conflict(
                f"task {self.task_id} has no question waiting for an answer; its status shows "
                "what it is doing"
            )
        if question_set_id and question_set_id != pending["id"]:
            raise Conflict(
                f"this answer is for question set {question_set_id!r}, but the question "
                f"waiting now is {pending['id']!r}; read it again and answer that one"
            )
        payload = {
            "question_set_id": pending["id"],
            "status": "cancelled" if cancel else "answered",
            "answers": {} if dismiss or cancel else dict(answers or {}),
        }
        handle = self._temporal.get_workflow_handle(self.task_id)
        try:
            receipt: AnswerReceipt = await handle.execute_update(
                "answer_question",
                payload,
                result_type=AnswerReceipt,
                rpc_timeout=timedelta(seconds=self._client.query_timeout),
            )
            return receipt
        except WorkflowUpdateFailedError as error:
            reason = _innermost(error)
            # The validator says "no question waiting" when someone else answered first.
            if await self._query(description, "pending_question"):
                raise AnswerRejected(f"answer rejected: {reason}") from None
            raise Conflict(f"answer rejected: {reason}") from None
        except WorkflowUpdateRPCTimeoutOrCancelledError as error:
            raise NoWorker(
                await self._client._why_unanswered(description, str(error)),
                task_queue=description.task_queue,
            ) from None
        except RPCError as error:
            raise self._ended_meanwhile(error) from None

    async def btw(self, question: str) -> SideAnswer:
        """A side question about the task, answered without touching it (running, waiting on
        the user, or finished)."""
        if not question.strip():
            raise InvalidRequest("the side question is empty; write what you want to know")
        description = await self._describe()
        try:
            if description.status == WorkflowExecutionStatus.RUNNING:
                update = await self._start_update(
                    description, "ask_side_question", SideQuestion(question=question), SideAnswer
                )
                answer: SideAnswer = await update.result()
                return answer
            return await self._ask_finished(await self._closed(description), question)
        except WorkflowUpdateFailedError as error:
            if isinstance(error.cause, ActivityError):
                raise SideQuestionFailed(
                    f"side question not answered: {_innermost(error)}", kind=_kind(error)
                ) from None
            raise Conflict(f"side question refused: {_innermost(error)}") from None
        except WorkflowFailureError as error:
            raise SideQuestionFailed(
                f"side question not answered: {_innermost(error)}", kind=_kind(error)
            ) from None
        except RPCError as error:
            raise self._ended_meanwhile(error) from None

    async def cancel(self) -> None:
        """Ask the task to stop; it ends ``canceled`` (``wait`` shows when)."""
        await self._running("there is nothing to cancel")
        try:
            await self._temporal.get_workflow_handle(self.task_id).cancel()
        except RPCError as error:
            raise self._ended_meanwhile(error) from None

    # -- the parts --------------------------------------------------------------------------

    @property
    def _temporal(self) -> TemporalClient:
        return self._client.temporal

    async def _describe(self) -> WorkflowExecutionDescription:
        try:
            description = await self._temporal.get_workflow_handle(self.task_id).describe()
        except RPCError as error:
            raise _refusal(error, self.task_id, self._client.namespace) from None
        if description.workflow_type != TASK_WORKFLOW:
            raise TaskNotFound(
                f"{self.task_id!r} is a {description.workflow_type}, not a task; give a task id "
                "(task-<session>-<n>) as returned when the task was started"
            )
        return description

    async def _running(self, consequence: str) -> WorkflowExecutionDescription:
        description = await self._describe()
        if description.status != WorkflowExecutionStatus.RUNNING:
            ended = description.status.name.lower() if description.status else "closed"
            raise TaskEnded(self.task_id, ended, consequence)
        return description

    async def _query(
        self,
        description: WorkflowExecutionDescription,
        name: str,
        result_type: type[_Result] | None = None,
    ) -> Any:
        """A query of a running task, bounded: without a worker it would wait indefinitely."""
        handle = self._temporal.get_workflow_handle(description.id)
        try:
            return await handle.query(
                name,
                result_type=result_type,
                rpc_timeout=timedelta(seconds=self._client.query_timeout),
            )
        except WorkflowQueryFailedError as error:
            raise Unavailable(
                f"task {description.id} could not answer the {name!r} query ({error}); its "
                "worker's log says why"
            ) from None
        except RPCError as error:
            raise NoWorker(
                await self._client._why_unanswered(description, error.message),
                task_queue=description.task_queue,
            ) from None

    async def _live(self, description: WorkflowExecutionDescription) -> TaskResult | None:
        """The ``status`` query; None when the task ended between the describe and the query."""
        try:
            live: TaskResult = await self._query(description, "status", TaskResult)
            return live
        except NoWorker:
            again = await self._describe()
            if again.status == WorkflowExecutionStatus.RUNNING:
                raise
            return None

    async def _start_update(
        self,
        description: WorkflowExecutionDescription,
        name: str,
        arg: Any,
        result_type: type[_Result],
    ) -> WorkflowUpdateHandle[_Result]:
        """Start an update once the task's worker has accepted it, within the bound of a query;
        its result then takes as long as the work does."""
        handle = self._temporal.get_workflow_handle(description.id)
        try:
            return await handle.start_update(
                name,
                arg,
                wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                result_type=result_type,
                rpc_timeout=timedelta(seconds=self._client.query_timeout),
            )
        except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError) as error:
            detail = error.message if isinstance(error, RPCError) else str(error)
            raise NoWorker(
                await self._client._why_unanswered(description, detail),
                task_queue=description.task_queue,
            ) from None

    async def _closed(self, description: WorkflowExecutionDescription) -> TaskResult:
        """A closed task's result. A task that ended without one (canceled, terminated, timed
        out) is described by its last ``status``, which a worker replays from its history, so
        its session, usage and last round (what a side question needs) are still at hand;
        without a worker only the way it ended is known."""
        handle = self._temporal.get_workflow_handle(self.task_id, result_type=TaskResult)
        try:
            return await handle.result(follow_runs=True)
        except WorkflowFailureError as error:
            status, kind, message = _ending(error)
        except RPCError as error:
            raise _refusal(error, self.task_id, self._client.namespace) from None
        session_id = description.typed_search_attributes.get(search.SESSION)
        last = TaskResult(
            task_id=self.task_id, session_id=session_id or self.session_id or "", status=status
        )
        try:
            last = await handle.query(
                "status",
                result_type=TaskResult,
                rpc_timeout=timedelta(seconds=self._client.query_timeout),
            )
        except (RPCError, WorkflowQueryFailedError):
            pass  # no worker to replay it: what it ended as is all there is
        return last.model_copy(
            update={
                "status": status,
                "reply": None,
                "replied_by": None,
                "join_reason": None,
                "error": TaskError(kind=kind, message=message),
                "phase": status,
                "pending_question": None,
            }
        )

    async def _snapshot(self) -> Snapshot:
        """What the task looks like now; reads only, so its history does not grow."""
        description = await self._describe()
        live = None
        if description.status == WorkflowExecutionStatus.RUNNING:
            live = await self._live(description)
            if live is None:
                description = await self._describe()
        result = live or await self._closed(description)
        rows: list[StoredMessage] = []
        store = await asyncio.to_thread(self._client._reader, False)
        if store is not None and result.session_id:
            rows = await asyncio.to_thread(
                store.list_by_prefix, result.session_id, ids.branch_rows_prefix(self.task_id)
            )
        if live is not None:
            return Snapshot(
                status=live.status,
                round=live.round,
                phase=live.phase,
                pending=live.pending_question,
                state=live.public(),
                rows=rows,
            )
        return Snapshot(
            status=result.status, round=last_round(rows), state=result.public(), rows=rows
        )

    async def _ask_finished(self, closed: TaskResult, question: str) -> SideAnswer:
        """A finished task takes no updates: a short-lived workflow answers from its latest
        round, with the task's side-question model and timeout (a task that ended without a
        round is answered over its transcript)."""
        settings = self._client.settings
        data = SideQuestionInput(
            task_id=self.task_id,
            session_id=closed.session_id,
            question=question,
            model=closed.side_question_model or settings.default_model()[0],
            round=RoundStepInput.model_validate(closed.last_round) if closed.last_round else None,
            timeout_seconds=closed.side_question_timeout_seconds or SIDE_TIMEOUT_SECONDS,
        )
        return await self._temporal.execute_workflow(
            SIDE_QUESTION_WORKFLOW,
            data,
            id=f"{self.task_id}/btw-{secrets.token_hex(RANDOM_BYTES)}",
            task_queue=settings.task_queue,
            result_type=SideAnswer,
        )

    def _ended_meanwhile(self, error: RPCError) -> Exception:
        if "completed" in error.message.lower():
            return TaskEnded(
                self.task_id, "completed", "it ended while the request was on its way"
            )
        return _refusal(error, self.task_id, self._client.namespace)


def _refusal(error: RPCError, task_id: str, namespace: str) -> Exception:
    """Temporal's refusal of a call about ``task_id``, as an errands error."""
    if error.status == RPCStatusCode.NOT_FOUND:
        return TaskNotFound(
            f"no task {task_id!r} in namespace {namespace}; check the task id (the one "
            "returned when the task was started)"
        )
    if error.status == RPCStatusCode.INVALID_ARGUMENT:
        return InvalidRequest(f"Temporal rejected {task_id!r}: {error.message}")
    if error.status == RPCStatusCode.ALREADY_EXISTS:
        return Conflict(f"{task_id!r} already exists: {error.message}")
    return TemporalUnreachable(f"Temporal could not be reached about {task_id!r}: {error.message}")


def _innermost(error: BaseException) -> str:
    """The innermost cause's message: what the workflow or the model said, not the wrapping."""
    cause: BaseException = error
    while getattr(cause, "cause", None) is not None:
        cause = cause.cause  # type: ignore[attr-defined]
    if isinstance(cause, ApplicationError):
        return cause.message
    return str(cause)


def _kind(error: BaseException) -> FailureKind:
    cause: BaseException = error
    while getattr(cause, "cause", None) is not None:
        cause = cause.cause  # type: ignore[attr-defined]
    return failure_kind(cause.type if isinstance(cause, ApplicationError) else "internal")


def _ending(error: WorkflowFailureError) -> tuple[TaskStatusName, FailureKind, str]:
    """Status, failure kind and message of a task that ended without a result."""
    cause = error.cause
    if isinstance(cause, CancelledError):
        return "canceled", "canceled", str(cause) or "canceled"
    if isinstance(cause, TerminatedError):
        return "failed", "terminated", f"terminated by an operator: {cause}"
    if isinstance(cause, WorkflowTimeoutError):
        return "failed", "timed_out", f"the task's workflow timed out: {cause}"
    return "failed", "internal", str(cause)
