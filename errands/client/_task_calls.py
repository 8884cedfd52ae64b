"""The mechanics under ``TaskHandle``: finding a task, asking it (queries and updates, tried
again while its workflow fails over to another worker), reading how it ended, and answering what
waits for the user (a question or a tool call), the same way for both."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from temporalio.client import Client as TemporalClient
from temporalio.client import (
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.service import RPCError, RPCStatusCode

from errands.client._access import APPROVERS_ANSWER, Action, check_task, no_task
from errands.client._refusals import ending, innermost, no_worker, polled, refusal
from errands.client._sessions import session_of
from errands.contracts.search import OWNER
from errands.contracts.workflows import TaskError, TaskResult
from errands.errors import AnswerRejected, Conflict, NoWorker, TaskEnded, TaskNotFound, Unavailable

if TYPE_CHECKING:
    from errands.client._client import Client
    from errands.client._notify import GivenTarget

TASK_WORKFLOW = "TaskWorkflow"
_Result = TypeVar("_Result")

FAILOVER_SECONDS = 20.0
"""How long a query or an update (a message, an answer, an approval) is tried again while a
worker polls the task's queue but the task does not answer: its own worker died mid-task, and
Temporal hands the task to another once the dead one's time is out (up to 10 s on its sticky
queue, by default). With no worker polling at all, the refusal comes at once."""


_TIMED_OUT = (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED)
"""How a query's ``rpc_timeout`` ends."""


def _workflow_not_ready(error: RPCError) -> bool:
    """Whether Temporal refused an update because the workflow's task is failing or timed out
    (it answers FAILED_PRECONDITION with a WorkflowNotReadyFailure), not for good."""
    return error.status == RPCStatusCode.FAILED_PRECONDITION and (
        "WorkflowNotReady" in repr(error.raw_grpc_status)
        or "Workflow Task in failed state" in error.message
    )


class TaskCalls:
    """A task's id and client, and the calls every operation on it is made of."""

    def __init__(
        self,
        client: Client,
        task_id: str,
        *,
        session_id: str | None = None,
        notify_secrets: Sequence[GivenTarget] = (),
    ) -> None:
        self._client = client
        self.task_id = task_id
        self.session_id = session_id
        """The task's session, when known without asking (a handle from ``start``)."""
        self.notify_secrets = list(notify_secrets)
        """The URLs given with the start (``notify``), each with its ref and signing secret:
        on the handle ``start`` returns, and nowhere else, ever (empty on any other)."""

    async def _answer_pending(
        self,
        *,
        waiting: str,
        update: str,
        payload: Callable[[dict[str, Any]], Any],
        result_type: type[_Result],
        what: str,
        awaits: str,
        consequence: str,
        action: Action,
    ) -> _Result:
        """Answer what waits for the user (the ``waiting`` query: a question set or a tool call)
        with the validated ``update``; ``payload`` builds the answer from what is waiting (and
        refuses one meant for something else). A refused answer is ``AnswerRejected`` while
        the same thing still waits, a ``Conflict`` when someone else answered first. ``what``
        waits for ``awaits``; ``consequence`` says what a task that has ended means for it;
        ``action`` is what the acting principal must be allowed."""
        description = await self._running(consequence, action)
        pending = await self._query(description, waiting)
        if not pending:
            raise Conflict(
                f"task {self.task_id} has no {what} waiting for {awaits}; its status shows "
                "what it is doing"
            )
        handle = self._temporal.get_workflow_handle(self.task_id)
        try:
            receipt: _Result = await handle.execute_update(
                update,
                payload(pending),
                result_type=result_type,
                rpc_timeout=timedelta(seconds=self._client.query_timeout),
            )
            return receipt
        except WorkflowUpdateFailedError as error:
            reason = innermost(error)
            # The validator says nothing is waiting when someone else answered first.
            rejected = (
                "answer rejected" if update == "answer_question" else "approval answer rejected"
            )
            if await self._query(description, waiting):
                raise AnswerRejected(f"{rejected}: {reason}") from None
            raise Conflict(f"{rejected}: {reason}") from None
        except WorkflowUpdateRPCTimeoutOrCancelledError as error:
            raise await self._no_worker(description, str(error)) from None
        except RPCError as error:
            raise self._ended_meanwhile(error) from None

    @property
    def _temporal(self) -> TemporalClient:
        return self._client.temporal

    async def _describe(self, action: Action = "read") -> WorkflowExecutionDescription:
        """What Temporal knows of the task, once the acting principal may do ``action`` on it
        (``TaskNotFound`` otherwise, as for a task that does not exist)."""
        try:
            description = await self._temporal.get_workflow_handle(self.task_id).describe()
        except RPCError as error:
            raise refusal(error, self.task_id, self._client.namespace) from None
        owner = description.typed_search_attributes.get(OWNER)
        acting, namespace = self._client.acting, self._client.namespace
        check_task(acting, self.task_id, namespace, owner, action)
        if acting is not None and acting.role == "approver" and owner != acting.id:
            # An approver, on another's task: only while a call there waits for approvers.
            if description.workflow_type != TASK_WORKFLOW or not await self._waits_for_approvers(
                description
            ):
                raise no_task(self.task_id, namespace)
        if description.workflow_type != TASK_WORKFLOW:
            raise TaskNotFound(
                f"{self.task_id!r} is a {description.workflow_type}, not a task; give a task id "
                "(task-…) as returned when the task was started"
            )
        return description

    async def _waits_for_approvers(self, description: WorkflowExecutionDescription) -> bool:
        """Whether the task runs and the call it shows waiting has a policy that lets approvers
        answer (``approver``, ``two``). Asked once, bounded, and never an error of its own: for
        an approver, a task that cannot answer at once (no worker, a failing workflow task) is
        one with nothing waiting for them, refused as a missing task is."""
        if description.status != WorkflowExecutionStatus.RUNNING:
            return False
        handle = self._temporal.get_workflow_handle(description.id)
        try:
            pending = await handle.query(
                "pending_approval", rpc_timeout=timedelta(seconds=self._client.query_timeout)
            )
        except (RPCError, WorkflowQueryFailedError):
            return False
        return isinstance(pending, dict) and pending.get("policy") in APPROVERS_ANSWER

    async def _running(self, consequence: str, action: Action) -> WorkflowExecutionDescription:
        description = await self._describe(action)
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
        until = asyncio.get_running_loop().time() + FAILOVER_SECONDS
        while True:
            try:
                return await handle.query(
                    name,
                    result_type=result_type,
                    rpc_timeout=timedelta(seconds=self._client.query_timeout),
                )
            except WorkflowQueryFailedError as error:
                raise Unavailable(
                    f"task {description.id} could not answer the {name!r} query ({error}); "
                    "its worker's log says why"
                ) from None
            except RPCError as error:
                if error.status in _TIMED_OUT and await self._failing_over(description, until):
                    continue
                raise await self._no_worker(description, error.message) from None

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
        until = asyncio.get_running_loop().time() + FAILOVER_SECONDS
        while True:
            try:
                return await handle.start_update(
                    name,
                    arg,
                    wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                    result_type=result_type,
                    rpc_timeout=timedelta(seconds=self._client.query_timeout),
                )
            except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError) as error:
                not_ready = isinstance(error, RPCError) and _workflow_not_ready(error)
                timed_out = isinstance(error, WorkflowUpdateRPCTimeoutOrCancelledError)
                if (not_ready or timed_out) and await self._failing_over(description, until):
                    continue
                detail = error.message if isinstance(error, RPCError) else str(error)
                raise await self._no_worker(description, detail) from None

    async def _failing_over(self, description: WorkflowExecutionDescription, until: float) -> bool:
        """Whether to ask the task again after a refusal or a timeout: a worker polls its queue,
        so its own may have just died, and Temporal hands its work to another once the dead
        one's times out; until ``until`` (loop time)."""
        if asyncio.get_running_loop().time() >= until:
            return False
        if not await polled(self._temporal, description.task_queue, self._client.query_timeout):
            return False
        await asyncio.sleep(0.5)
        return True

    async def _closed(self, description: WorkflowExecutionDescription) -> TaskResult:
        """A closed task's result. A task that ended without one (canceled, terminated, timed
        out) is described by its last ``status``, which a worker replays from its history, so
        its session, usage and last round (what a side question needs) are still at hand;
        without a worker only the way it ended is known."""
        handle = self._temporal.get_workflow_handle(self.task_id, result_type=TaskResult)
        try:
            return await handle.result(follow_runs=True)
        except WorkflowFailureError as error:
            status, kind, message = ending(error)
        except RPCError as error:
            raise refusal(error, self.task_id, self._client.namespace) from None
        session_id = await session_of(self._temporal, description, self._client.session_tags)
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

    async def _no_worker(self, description: WorkflowExecutionDescription, detail: str) -> NoWorker:
        return await no_worker(self._temporal, description, detail, self._client.query_timeout)

    def _ended_meanwhile(self, error: RPCError) -> Exception:
        if "completed" in error.message.lower():
            return TaskEnded(self.task_id, "completed", "it ended while the request was on its way")
        return refusal(error, self.task_id, self._client.namespace)
