"""The gateway's Temporal side: the same starts, queries, updates and cancels the CLI sends.

Reads never write history: state comes from ``describe`` and the ``status`` query while a task
runs, and from its result once it has closed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.service import RPCError

from errands.activity_io import SideAnswer
from errands.gateway._errors import ApiError, from_rpc
from errands.gateway._models import AnswerRequest, NewTask
from errands.routing import parse_model
from errands.settings import Settings
from errands.tasks import ask_finished_task, closed_task_state, task_input
from errands.workflow_io import AnswerReceipt, SideQuestion, TaskStatus
from workflows import _search as search

TASK_WORKFLOW = "TaskWorkflow"
QUERY_TIMEOUT = timedelta(seconds=15)


class TaskOps:
    def __init__(self, client: Client, settings: Settings) -> None:
        self.client = client
        self.settings = settings

    # -- reads ------------------------------------------------------------------------------

    async def describe(self, task_id: str) -> WorkflowExecutionDescription:
        try:
            description = await self.client.get_workflow_handle(task_id).describe()
        except RPCError as error:
            raise from_rpc(error, task_id) from None
        if description.workflow_type != TASK_WORKFLOW:
            raise ApiError(
                404,
                f"{task_id!r} is a {description.workflow_type}, not a task; use a task id "
                "(task-<session>-<n>) as returned when the task was created",
            )
        return description

    async def state(self, task_id: str) -> dict[str, Any]:
        """What ``errands status --json`` prints for the task."""
        description = await self.describe(task_id)
        if description.status == WorkflowExecutionStatus.RUNNING:
            status = await self.live_status(task_id)
            if status is not None:
                return status.model_dump(mode="json")
        return await self.closed_state(task_id, description)

    async def live_status(self, task_id: str) -> TaskStatus | None:
        """The ``status`` query; None when the run closed between the describe and the query."""
        handle = self.client.get_workflow_handle(task_id)
        try:
            return await handle.query("status", result_type=TaskStatus, rpc_timeout=QUERY_TIMEOUT)
        except WorkflowQueryFailedError as error:
            raise ApiError(503, f"task {task_id} could not report its state: {error}") from None
        except RPCError as error:
            if "completed" in error.message.lower():
                return None
            raise from_rpc(error, task_id) from None

    async def closed_state(
        self, task_id: str, description: WorkflowExecutionDescription
    ) -> dict[str, Any]:
        session_id = description.typed_search_attributes.get(search.SESSION)
        try:
            return await closed_task_state(self.client, task_id, session_id=session_id)
        except RPCError as error:
            raise from_rpc(error, task_id) from None

    async def pending_question(self, task_id: str) -> dict[str, Any] | None:
        handle = self.client.get_workflow_handle(task_id)
        try:
            pending: dict[str, Any] | None = await handle.query(
                "pending_question", rpc_timeout=QUERY_TIMEOUT
            )
            return pending
        except WorkflowQueryFailedError as error:
            raise ApiError(503, f"task {task_id} could not report its question: {error}") from None
        except RPCError as error:
            raise from_rpc(error, task_id) from None

    # -- writes -----------------------------------------------------------------------------

    async def start(self, session_id: str, body: NewTask) -> str:
        settings = self.settings
        model = body.model or settings.default_model()[0]
        fallback = body.fallback_model or settings.fallback_model
        for field, spec in (("model", model), ("fallback_model", fallback)):
            if spec is not None:
                _check_model(field, spec)
        task = task_input(
            settings,
            session_id=session_id,
            text=body.text,
            model=model,
            fallback_model=fallback,
            headless=body.headless,
        )
        task_id = task.task_id
        try:
            await self.client.start_workflow(
                TASK_WORKFLOW,
                task,
                id=task_id,
                task_queue=settings.task_queue,
                search_attributes=search.initial(session_id),
                static_summary=body.text[:200],
            )
        except RPCError as error:
            raise from_rpc(error, task_id) from None
        return task_id

    async def answer(self, task_id: str, body: AnswerRequest) -> AnswerReceipt:
        await self._running(task_id, "there is no question to answer")
        pending = await self.pending_question(task_id)
        if not pending:
            raise ApiError(
                409,
                f"task {task_id} has no question waiting for an answer; GET /v1/tasks/{task_id} "
                "shows what it is doing",
            )
        if body.question_set_id and body.question_set_id != pending["id"]:
            raise ApiError(
                409,
                f"this answer is for question set {body.question_set_id!r}, but the question "
                f"waiting now is {pending['id']!r}; read it again and answer that one",
            )
        payload = {
            "question_set_id": pending["id"],
            "status": body.status,
            "answers": body.answers,
        }
        handle = self.client.get_workflow_handle(task_id)
        try:
            receipt: AnswerReceipt = await handle.execute_update(
                "answer_question", payload, result_type=AnswerReceipt
            )
            return receipt
        except WorkflowUpdateFailedError as error:
            reason = _reason(error)
            # The validator says "no question waiting" when someone else answered first.
            still = await self.pending_question(task_id)
            raise ApiError(422 if still else 409, f"answer rejected: {reason}") from None
        except RPCError as error:
            raise _ended_meanwhile(task_id, error) from None

    async def side_question(self, task_id: str, question: str) -> SideAnswer:
        description = await self.describe(task_id)
        try:
            if description.status == WorkflowExecutionStatus.RUNNING:
                update = await self._start_update(
                    description, "ask_side_question", SideQuestion(question=question), SideAnswer
                )
                answer: SideAnswer = await update.result()
                return answer
            closed = await self.closed_state(task_id, description)
            return await ask_finished_task(self.client, self.settings, closed, question)
        except WorkflowUpdateFailedError as error:
            if isinstance(error.cause, ActivityError):
                raise ApiError(502, f"side question not answered: {_reason(error)}") from None
            raise ApiError(409, f"side question refused: {_reason(error)}") from None
        except WorkflowFailureError as error:
            raise ApiError(502, f"side question not answered: {_reason(error)}") from None
        except RPCError as error:
            raise _ended_meanwhile(task_id, error) from None

    async def _start_update(
        self,
        description: WorkflowExecutionDescription,
        name: str,
        arg: Any,
        result_type: type,
    ) -> WorkflowUpdateHandle[Any]:
        """Start an update once the task's worker has accepted it, within the bound of a query:
        a task no worker serves is a 503 that says so, not a request that never returns."""
        handle = self.client.get_workflow_handle(description.id)
        try:
            return await handle.start_update(
                name,
                arg,
                wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                result_type=result_type,
                rpc_timeout=QUERY_TIMEOUT,
            )
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            raise ApiError(
                503,
                f"no worker on task queue {description.task_queue} took up task "
                f"{description.id} within {QUERY_TIMEOUT.total_seconds():g} s; check that "
                "`errands worker` runs for that queue",
            ) from None

    async def cancel(self, task_id: str) -> None:
        await self._running(task_id, "there is nothing to cancel")
        try:
            await self.client.get_workflow_handle(task_id).cancel()
        except RPCError as error:
            raise _ended_meanwhile(task_id, error) from None

    async def _running(self, task_id: str, consequence: str) -> None:
        description = await self.describe(task_id)
        if description.status != WorkflowExecutionStatus.RUNNING:
            name = description.status.name.lower() if description.status else "closed"
            raise ApiError(
                409,
                f"task {task_id} has ended ({name}); {consequence}. GET /v1/tasks/{task_id} "
                "shows its result",
            )


def _check_model(field: str, spec: str) -> None:
    try:
        parse_model(spec)
    except ApplicationError as error:
        raise ApiError(422, f"{field}: {error.message}") from None


def _reason(error: Exception) -> str:
    """The innermost cause's message: what the workflow or the model said, not the wrapping."""
    cause: BaseException = error
    while getattr(cause, "cause", None) is not None:
        cause = cause.cause  # type: ignore[attr-defined]
    if isinstance(cause, ApplicationError):
        return cause.message
    return str(cause)


def _ended_meanwhile(task_id: str, error: RPCError) -> ApiError:
    if "completed" in error.message.lower():
        return ApiError(409, f"task {task_id} ended while the request was on its way")
    return from_rpc(error, task_id)
