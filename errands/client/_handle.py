"""``TaskHandle``: one task, and everything a frontend may ask of it or send it."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from temporalio.client import (
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ActivityError
from temporalio.service import RPCError

from errands.adapters.store import TaskStart
from errands.client._input import checked, checked_answers
from errands.client._queued import ENDED, start_next
from errands.client._quotas import quota_checked
from errands.client._refusals import innermost, kind_of, refusal
from errands.client._sessions import session_of
from errands.client._task_calls import TaskCalls
from errands.contracts import ids, limits
from errands.contracts.activities import SideAnswer, SideQuestionInput
from errands.contracts.approvals import ApprovalAnswer, ApprovalChoice, ApprovalReceipt
from errands.contracts.events import TERMINAL, StoredEvent
from errands.contracts.limits import SIDE_TIMEOUT_SECONDS
from errands.contracts.rounds import RoundStepInput
from errands.contracts.search import OWNER
from errands.contracts.workflows import (
    CANCEL_REQUESTED_SIGNAL,
    AnswerReceipt,
    MessageReceipt,
    SendMessage,
    SideQuestion,
    TaskResult,
)
from errands.errors import (
    Conflict,
    InvalidRequest,
    SideQuestionFailed,
    TaskEnded,
    TaskNotFound,
)

SIDE_QUESTION_WORKFLOW = "SideQuestionWorkflow"
CHECK_EVERY = 25
"""Reads of the log between two looks at the task while following it (5 s at the default
interval): whether it ended without a last event, and whether the reader may still follow it."""

RANDOM_BYTES = 8
"""Random part of task and side-question ids: 64 bits, so two never collide."""


@dataclass(frozen=True)
class TaskInfo:
    task_id: str
    running: bool
    status: str
    """How Temporal sees the workflow: running, completed, failed, canceled, terminated, …"""
    task_queue: str
    session_id: str | None


class TaskHandle(TaskCalls):
    """One task: its state, its result, and everything a frontend may send it."""

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
            session_id=await session_of(self._temporal, description, self._client.session_tags),
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
                result = await handle.result(follow_runs=True)
            except WorkflowFailureError:
                return await self._closed(await self._describe())
            except RPCError as error:
                raise refusal(error, self.task_id, self._client.namespace) from None
        # Whoever could read the task when the wait began may not now (an approver, once
        # nothing waits for them): asked again before the result is theirs.
        await self._describe()
        return result

    async def pending_question(self) -> dict[str, Any] | None:
        """The question set waiting for an answer, or None."""
        description = await self._running("there is no question to answer", "read")
        pending: dict[str, Any] | None = await self._query(description, "pending_question")
        return pending

    async def events_after(self, after: int = 0, *, limit: int = 1000) -> list[StoredEvent]:
        """The events of the task's log written so far with ``seq > after`` (at most ``limit``)."""
        if self._client.acting is not None:
            await self._describe("follow")
        store = await asyncio.to_thread(self._client._reader, True)
        assert store is not None
        return await asyncio.to_thread(
            store.list_events, self.task_id, after_seq=after, limit=limit
        )

    async def events(
        self, *, after: int = 0, follow: bool = True, interval: float = 0.2
    ) -> AsyncGenerator[StoredEvent, None]:
        """The task's event log (``errands.contracts.events``) from ``seq > after``, in order, each
        event once; with ``follow``, then live until the task's last event (``replied``, ``failed``
        or ``canceled``). Reading adds nothing to the task's history. A task that ended
        without a last event in its log (one from before the log) ends the iteration once its
        events are read."""
        if self._client.acting is not None:
            await self._describe("follow")
        store = await asyncio.to_thread(self._client._reader, True)
        assert store is not None
        seen, idle, ticks = after, 0, 0
        while True:
            batch = await asyncio.to_thread(store.list_events, self.task_id, after_seq=seen)
            for event in batch:
                seen = event.seq
                yield event
                if event.type in TERMINAL:
                    return
            if not follow:
                return
            idle = 0 if batch else idle + 1
            ticks += 1
            if ticks % CHECK_EVERY == 0:
                # Still theirs to follow (an approver is not, once nothing waits for them)?
                try:
                    described = await self._describe("follow")
                except TaskNotFound:
                    return
                if idle and described.status != WorkflowExecutionStatus.RUNNING:
                    # Ended without a last event: read what was written meanwhile, then stop.
                    rest = await asyncio.to_thread(store.list_events, self.task_id, after_seq=seen)
                    for event in rest:
                        yield event
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
        answers = checked_answers(answers or {})
        if question_set_id is not None:
            checked(question_set_id, "question_set_id", limits.ID_CHARS)

        def payload(pending: dict[str, Any]) -> dict[str, Any]:
            if question_set_id and question_set_id != pending["id"]:
                raise Conflict(
                    f"this answer is for question set {question_set_id!r}, but the question "
                    f"waiting now is {pending['id']!r}; read it again and answer that one"
                )
            return {
                "question_set_id": pending["id"],
                "status": "cancelled" if cancel else "answered",
                "answers": {} if dismiss or cancel else dict(answers or {}),
                "by": self._client.actor.model_dump(),
            }

        return await self._answer_pending(
            waiting="pending_question",
            update="answer_question",
            payload=payload,
            result_type=AnswerReceipt,
            what="question",
            awaits="an answer",
            consequence="there is no question to answer",
            action="answer",
        )

    async def say(self, text: str, *, mode: str = "steer") -> MessageReceipt:
        """Send a message into the running task. ``steer`` (the default): into its session,
        shown to the agent before its next step (a reply it wrote without it is discarded and
        it decides again); ``queue``: the session's next task once this one ends; queued on a
        task that has ended, it starts that task at once (the receipt's ``task_id``)."""
        if not text.strip():
            raise InvalidRequest("the message is empty; write what the agent should know")
        checked(text, "text", limits.MESSAGE_CHARS, what="the message")
        if mode not in ("steer", "interrupt", "queue"):
            raise InvalidRequest(f"mode is steer, interrupt or queue, not {mode!r}")
        description = await self._describe("steer")
        if description.status != WorkflowExecutionStatus.RUNNING:
            if mode == "queue":
                return await start_next(self._client, description, text)
            ended = description.status.name.lower() if description.status else "closed"
            session = (await self._closed(description)).session_id
            raise TaskEnded(
                self.task_id,
                ended,
                f"the message was not sent; start a new task in its session instead: "
                f"errands run --session {session} TEXT",
            )
        # A queued message becomes a task when this one ends: its sender's quotas count it
        # now, and its start is recorded now, under the message's id (the task it becomes
        # takes that record over), so several queued at once are each counted.
        acting = self._client.acting if mode == "queue" else None
        async with quota_checked(self._client, acting, queued=True):
            receipt = await self._send(description, text, mode)
            if receipt is not None and receipt.status == "queued":
                await self._record_queued(description, receipt.message_id)
        if receipt is None:  # the task ended meanwhile: the queued message starts the next
            return await start_next(self._client, description, text)
        return receipt

    async def _send(
        self, description: WorkflowExecutionDescription, text: str, mode: str
    ) -> MessageReceipt | None:
        """The ``send_message`` update's receipt; None when a message to queue found the task
        ending (it then starts the next task itself)."""
        try:
            update = await self._start_update(
                description,
                "send_message",
                SendMessage(text=text, mode=mode, by=self._client.actor),  # type: ignore[arg-type]
                MessageReceipt,
            )
            receipt: MessageReceipt = await update.result()
            return receipt
        except WorkflowUpdateFailedError as error:
            # The task refuses messages once it is ending; a queued one starts the next task.
            if mode == "queue" and (await self.status()).status in ENDED:
                return None
            raise Conflict(f"message refused: {innermost(error)}") from None
        except RPCError as error:
            refused = self._ended_meanwhile(error)
            if mode == "queue" and isinstance(refused, TaskEnded):
                return None
            raise refused from None

    async def _record_queued(
        self, description: WorkflowExecutionDescription, message_id: str
    ) -> None:
        owner = description.typed_search_attributes.get(OWNER)
        if owner is None:
            return
        session = await session_of(self._temporal, description, self._client.session_tags)
        start = TaskStart(
            task_id=ids.queued_start_id(message_id),
            owner=owner,
            session_id=session or "",
            started_at=datetime.now(UTC),
        )
        await self._client._store_call("record_start", start)

    async def approve(
        self,
        *,
        always: bool = False,
        approval_id: str | None = None,
        arguments_sha256: str | None = None,
    ) -> ApprovalReceipt:
        """Let the tool call waiting for approval run; ``always``: every later call of that
        tool in the session too (tools whose approval is ``ask``). ``approval_id``: refuse
        unless that call is the one waiting. ``arguments_sha256``: refuse unless the waiting
        call's arguments are the ones with that digest (the ``arguments_sha256`` of the
        ``pending_approval`` the user read). ``arguments_sha256=None`` (the default) answers
        whatever call waits when the answer lands, unchecked: a program that showed the call to
        a person passes its digest. The receipt says which call was answered (its tool, digest
        and size)."""
        decision: ApprovalChoice = "approve_always" if always else "approve"
        return await self._answer_approval(decision, None, approval_id, arguments_sha256)

    async def deny(
        self,
        reason: str | None = None,
        *,
        approval_id: str | None = None,
        arguments_sha256: str | None = None,
    ) -> ApprovalReceipt:
        """Refuse the tool call waiting for approval; the model reads ``reason``.
        ``approval_id`` and ``arguments_sha256`` as for ``approve``."""
        if reason is not None:
            checked(reason, "reason", limits.REASON_CHARS, what="the reason")
        return await self._answer_approval("deny", reason, approval_id, arguments_sha256)

    async def _answer_approval(
        self,
        decision: ApprovalChoice,
        reason: str | None,
        approval_id: str | None,
        arguments_sha256: str | None,
    ) -> ApprovalReceipt:
        digest = _digest(arguments_sha256)
        answered: dict[str, Any] = {}

        def payload(pending: dict[str, Any]) -> ApprovalAnswer:
            if approval_id and approval_id != pending["approval_id"]:
                raise Conflict(
                    f"this answer is for approval {approval_id!r}, but the call waiting now is "
                    f"{pending['approval_id']!r} ({pending['tool']}); read it again and answer "
                    "that one"
                )
            answered.update(pending)
            return ApprovalAnswer(
                approval_id=pending["approval_id"],
                decision=decision,
                reason=reason,
                # The workflow checks the digest: it alone knows the call waiting when the
                # answer lands. None is sent as None: the digest comes from who read the call.
                arguments_sha256=digest,
                by=self._client.actor,
            )

        receipt = await self._answer_pending(
            waiting="pending_approval",
            update="answer_approval",
            payload=payload,
            result_type=ApprovalReceipt,
            what="tool call",
            awaits="approval",
            consequence="there is no tool call to approve",
            action="approve",
        )
        return receipt.model_copy(
            update={
                "tool": answered.get("tool"),
                "arguments_sha256": answered.get("arguments_sha256") or None,
                "arguments_bytes": answered.get("arguments_bytes"),
            }
        )

    async def btw(self, question: str) -> SideAnswer:
        """A side question about the task, answered without touching it (running, waiting on
        the user, or finished)."""
        if not question.strip():
            raise InvalidRequest("the side question is empty; write what you want to know")
        checked(question, "question", limits.SIDE_QUESTION_CHARS, what="the side question")
        description = await self._describe("ask")
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
                    f"side question not answered: {innermost(error)}", kind=kind_of(error)
                ) from None
            raise Conflict(f"side question refused: {innermost(error)}") from None
        except WorkflowFailureError as error:
            raise SideQuestionFailed(
                f"side question not answered: {innermost(error)}", kind=kind_of(error)
            ) from None
        except RPCError as error:
            raise self._ended_meanwhile(error) from None

    async def cancel(self) -> None:
        """Ask the task to stop; it ends ``canceled`` (``wait`` shows when). The task records
        who asked (its ``canceled`` event names them)."""
        await self._running("there is nothing to cancel", "cancel")
        handle = self._temporal.get_workflow_handle(self.task_id)
        try:
            await handle.signal(CANCEL_REQUESTED_SIGNAL, self._client.actor)
            await handle.cancel()
        except RPCError as error:
            raise self._ended_meanwhile(error) from None

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


def _digest(value: str | None) -> str | None:
    """A SHA-256 digest as given (any case, surrounding blanks), or ``InvalidRequest``."""
    if value is None:
        return None
    digest = value.strip().lower()
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise InvalidRequest(
            f"{value!r} is not a SHA-256 digest: give the 64 hex digits of arguments_sha256 as "
            "`errands status TASK` shows them"
        )
    return digest
