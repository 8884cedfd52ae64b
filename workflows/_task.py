"""TaskWorkflow: one user request, worked in rounds until a reply (SPEC §1).

Each round one model decides: ``final_reply`` ends the task, ``delegate`` starts subtasks as
child workflows and the next round decides again with their results; ``ask_user`` waits for the
user inside the round. The workflow passes ids, positions and small decisions; the conversation
stays in the session store. A long task continues as new, carrying only ``TaskState``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from activities import SessionActivities
    from errands.agent.pricing import cost_usd
    from errands.contracts import ids
    from errands.contracts.activities import (
        AppendMessageInput,
        McpHolder,
        SideAnswer,
        SideQuestionInput,
    )
    from errands.contracts.approvals import (
        ApprovalAnswer,
        ApprovalReceipt,
        ApprovalRequest,
    )
    from errands.contracts.events import EventType, named
    from errands.contracts.notifications import (
        ADD_TARGET_SIGNAL,
        REMOVE_TARGET_SIGNAL,
        NotifyTarget,
    )
    from errands.contracts.principals import Principal
    from errands.contracts.workflows import (
        CANCEL_REQUESTED_SIGNAL,
        WAKE_SIGNAL,
        AnswerReceipt,
        MessageReceipt,
        SendMessage,
        SideQuestion,
        SteerMark,
        TaskInput,
        TaskResult,
        TaskState,
    )
    from errands.errors import AnswerRejected
    from workflows._approvals import (
        REQUEST_SIGNAL,
        WITHDRAW_SIGNAL,
        Answered,
        PendingApprovals,
        Recorded,
        Settled,
        deliver,
        log_answered,
        log_recorded,
    )
    from workflows._log import log_event
    from workflows._loop import RoundLoop, task_opening
    from workflows._options import store_call
    from workflows._patches import RunPatches
    from workflows._queued import start_queued
    from workflows._sessions import MCP_HOLDER_SIGNAL, SessionHolders
    from workflows._side import answer_side_question
    from workflows._status import TaskStatus
    from workflows._waiting import PendingQuestion


@workflow.defn(name="TaskWorkflow")
class TaskWorkflow:
    """Pinned on a versioned worker (``ERRANDS_DEPLOYMENT_NAME``): a run stays on the version
    that started it and the task moves to a new one by continuing as new between rounds
    (``RoundLoop``), so a change only the new version runs needs no ``patched`` fork.

    Pinned by the worker's default behavior (``errands.plugin.worker_deployment``), not by
    ``@workflow.defn(versioning_behavior=...)``: Temporal refuses every workflow task of a
    workflow that declares a behavior on an unversioned worker."""

    @workflow.init
    def __init__(self, data: TaskInput) -> None:
        # Set before any handler runs: a signal or update may arrive in a run's first task.
        self.data = data
        self.state = data.carry or TaskState()
        if data.carry is None and data.queued:
            self.state.queued = list(data.queued)
            self.state.queued_ids = list(data.queued_ids)
        resume = self.state.resume
        self._question = PendingQuestion(resume.questions if resume else None)
        self._approvals = PendingApprovals(self.state)
        self._status = TaskStatus(data, self.state)
        self._loop = RoundLoop(data, self.state, self._status, self._question, self._approvals)
        self._patches = RunPatches()  # asked as the run starts
        self._side_in_flight = False
        self._ending = False
        self._next_task: str | None = None
        self._canceled_by: Principal | None = None
        """Who asked to cancel the task (the client signals it just before cancelling)."""

    # -- queries ---------------------------------------------------------------------------

    @workflow.query(name="status")
    def status(self) -> TaskResult:
        return self._result()

    @workflow.query(name="pending_question")
    def pending_question(self) -> dict[str, Any] | None:
        return self._question.view()

    # -- answers: an update that validates, a signal that records what it cannot use ----------

    @workflow.update(name="answer_question")
    def answer_question(self, payload: Any) -> AnswerReceipt:
        return self._question.accept(payload)  # validated by the validator

    @answer_question.validator
    def _validate_answer(self, payload: Any) -> None:
        if not self._question.open:
            raise AnswerRejected(
                f"task {self.data.task_id} has no question waiting for an answer "
                f"(status: {self._status.status}); check `errands status {self.data.task_id}`"
            )
        self._question.validate(payload, self.data.owner, self.data.task_id)

    @workflow.signal(name="submit_answer")
    def submit_answer(self, payload: Any) -> None:
        # Typed Any: a payload that is not even an object is still received and recorded.
        try:
            self._validate_answer(payload)
        except (AnswerRejected, ValueError) as error:
            self._answer_error("ignored an invalid answer signal", error)
            return
        self._question.accept(payload)

    # -- approvals: tool calls (the main agent's or a branch's) waiting for the user ---------

    @workflow.query(name="pending_approval")
    def pending_approval(self) -> dict[str, Any] | None:
        return self._approvals.view()

    @workflow.signal(name=REQUEST_SIGNAL)
    def request_approval(self, request: ApprovalRequest) -> None:
        """A branch's call waits for the user (the branch waits for the verdict signal)."""
        self._approvals.add(request)
        self._loop.show_approvals()

    @workflow.signal(name=WITHDRAW_SIGNAL)
    def withdraw_approval(self, approval_id: str) -> None:
        """A branch stopped waiting: nobody answered in time."""
        self._approvals.drop(approval_id)
        self._loop.show_approvals()

    @workflow.update(name="answer_approval")
    async def answer_approval(self, answer: ApprovalAnswer) -> ApprovalReceipt:
        try:
            decided = await self._decide_approval(answer)
        except AnswerRejected as error:
            # Validated, then refused as it ran: the same principal's approval landed first.
            raise ApplicationError(str(error), type="AnswerRejected", non_retryable=True) from None
        if decided is None:
            # Validated, then answered by another update or signal before this one ran.
            raise ApplicationError(
                f"approval {answer.approval_id!r} was answered meanwhile; nothing changed",
                type="AnswerRejected",
                non_retryable=True,
            )
        return ApprovalReceipt(
            approval_id=answer.approval_id,
            decision=answer.decision,
            waiting_for=decided.waiting_for if isinstance(decided, Recorded) else 0,
            approved_by=decided.request.approved_by,
        )

    @answer_approval.validator
    def _validate_approval(self, answer: ApprovalAnswer) -> None:
        self._approvals.check(answer, self.data.task_id, self.data.owner)

    @workflow.signal(name="submit_approval")
    async def submit_approval(self, payload: Any) -> None:
        # Typed Any, as submit_answer: a payload that does not parse is recorded, not lost.
        try:
            answer = ApprovalAnswer.model_validate(payload)
            self._validate_approval(answer)
        except (AnswerRejected, ValueError) as error:
            self._answer_error("ignored an invalid approval signal", error)
            return
        try:
            await self._decide_approval(answer)
        except AnswerRejected as error:
            self._answer_error("ignored an invalid approval signal", error)
        except Exception as error:  # noqa: BLE001 - a signal handler's error fails the task
            self._answer_error("an approval signal could not be delivered", error)

    async def _decide_approval(self, answer: ApprovalAnswer) -> Settled | Recorded | None:
        """Deliver the user's verdict to the waiting call, then remember approve-always; or
        record a first approval of a call that needs two. None when the call was answered
        meanwhile (by another update or signal); ``AnswerRejected`` when an approval by the
        same principal landed meanwhile."""
        if self._approvals.find(answer.approval_id) is not None:
            # Checked again as it runs: another answer may have landed since the validator.
            self._approvals.check(answer, self.data.task_id, self.data.owner)
        decided = self._approvals.settle(answer)
        if decided is None:
            return None
        self._loop.show_approvals()
        if isinstance(decided, Recorded):
            # Policy `two` is newer than every history recorded before it: no patch needed.
            await log_recorded(self.data.task_id, decided)
            return decided
        if self._patches.asked:
            # An answer taken before the run asked its patches (in a continued run's first
            # moments) goes unlogged, as it always did.
            reason = answer.reason if answer.decision == "deny" else None
            # The digest the person's answer carried (None: they answered whatever waited),
            # and the digest of the call it settled, always.
            await log_answered(
                self.data.task_id,
                answer.approval_id,
                answer.decision,
                reason,
                answer.arguments_sha256,
                answered=Answered(answer.by, decided.request),
            )
        await deliver(decided, self.data.session_id)
        return decided

    def _answer_error(self, what: str, error: Exception) -> None:
        """An answer or approval that could not be used: kept (the last 20) for the status."""
        self.state.answer_errors = [*self.state.answer_errors[-19:], str(error)]
        workflow.logger.warning("%s: %s", what, error)

    # -- cancellation: who asked ---------------------------------------------------------------

    @workflow.signal(name=ADD_TARGET_SIGNAL)
    def add_notify_target(self, target: NotifyTarget) -> None:
        """Notify ``target`` of the changes from now on (a push config given while it runs)."""
        if all(known.ref != target.ref for known in self.data.notify):
            self.data.notify.append(target)

    @workflow.signal(name=REMOVE_TARGET_SIGNAL)
    def remove_notify_target(self, ref: str) -> None:
        self.data.notify = [known for known in self.data.notify if known.ref != ref]

    @workflow.signal(name=MCP_HOLDER_SIGNAL)
    def mcp_holder(self, holder: McpHolder) -> None:
        """A branch reached one of the task's own stateful MCP sessions (closed at the end)."""
        SessionHolders(self.state.mcp_holders).learn(holder)

    @workflow.signal(name=CANCEL_REQUESTED_SIGNAL)
    def cancel_requested(self, by: Principal) -> None:
        """Who asks to cancel the task; the client sends it just before the cancellation, so it
        arrives first, and the ``canceled`` event names them."""
        self._canceled_by = by

    # -- messages into the running task: steer it, or queue the next task ---------------------

    @workflow.update(name="send_message")
    async def send_message(self, message: SendMessage) -> MessageReceipt:
        state, data = self.state, self.data
        state.messages += 1
        message_id = ids.steer_message_id(data.task_id, state.messages)
        if message.mode == "queue":
            if len(state.queued_ids) == len(state.queued):  # else queued before ids were kept
                state.queued_ids.append(message_id)
            state.queued.append(message.text)
            return MessageReceipt(message_id=message_id, mode="queue", status="queued")
        appended = await store_call(
            SessionActivities.append_message,
            AppendMessageInput(
                task_id=data.task_id,
                session_id=data.session_id,
                message_id=message_id,
                text=message.text,
                mode=message.mode,
                by=message.by,
            ),
        )
        state.steers.append(SteerMark(message_id=message_id, seq=appended.seq))
        if message.mode == "interrupt":
            self._loop.interrupted = True  # branches running now are cancelled
        return MessageReceipt(message_id=message_id, mode=message.mode, status="accepted")

    @send_message.validator
    def _validate_message(self, message: SendMessage) -> None:
        if not message.text.strip():
            raise ValueError("the message is empty; write what the agent should know")
        if self._status.ended or self._ending:
            raise ValueError(
                f"task {self.data.task_id} is ending ({self._status.status}); start a new task "
                f"in its session: errands run --session {self.data.session_id} TEXT"
            )

    # -- upgrades: a task left on an old worker version is woken so it can move ---------------

    @workflow.signal(name=WAKE_SIGNAL)
    def wake_for_upgrade(self) -> None:
        """Nothing to do: the signal's workflow task is the point. In it the run sees that a
        newer worker version is current, and a task parked on a question moves at once (the
        round loop moves any other at its next round boundary); ``errands upgrade`` sends it."""

    # -- side questions: answered beside the task, never touching it ---------------------------

    @workflow.update(name="ask_side_question")
    async def ask_side_question(self, request: SideQuestion) -> SideAnswer:
        data, settings = self.data, self.data.settings
        self._side_in_flight = True
        try:
            answer = await answer_side_question(
                SideQuestionInput(
                    task_id=data.task_id,
                    session_id=data.session_id,
                    question=request.question,
                    model=data.side_question_model or data.model,
                    round=self.state.last_round,
                    timeout_seconds=settings.side_question_timeout_seconds,
                    heartbeat_timeout_seconds=settings.heartbeat_timeout_seconds,
                    model_task_queue=settings.model_task_queue,
                ),
                summary="side question",
            )
        finally:
            self._side_in_flight = False
        self.state.ledger.merge("side_questions", answer.usage)
        return answer

    @ask_side_question.validator
    def _validate_side_question(self, request: SideQuestion) -> None:
        if not request.question.strip():
            raise ValueError("the side question is empty; write what you want to know")
        if self._side_in_flight:
            raise ValueError(
                f"task {self.data.task_id} is already answering a side question; ask again "
                "when it has answered"
            )

    # -- the run ---------------------------------------------------------------------------

    @workflow.run
    async def run(self, data: TaskInput) -> TaskResult:
        self._patches = RunPatches.at_start()
        self._status.notifier.enabled = self._patches.notices
        if self._patches.records_on_steps:
            self._status.known_from_start()
        try:
            if data.carry is None:
                self.state.started_at = workflow.now()
                await self._open(data)
            await self._loop.run(self._patches)
        except asyncio.CancelledError:
            self._status.set("canceled", "canceled")
            await self._close_sessions()
            await self._log_end("canceled", **self._cancel_fields())
            await self._status.notifier.started()
            raise
        except Exception as error:  # noqa: BLE001 - nothing escapes as a stuck workflow task
            if is_cancelled_exception(error):
                self._status.set("canceled", "canceled")
                await self._close_sessions()
                await self._log_end("canceled", **self._cancel_fields())
                await self._status.notifier.started()
                raise asyncio.CancelledError(str(error)) from error
            workflow.logger.exception("task %s failed outside a round", data.task_id)
            self._status.fail("internal", f"{type(error).__name__}: {error}")
        await self._close_sessions()
        if (failed := self._status.error) is not None:
            await self._log_end("failed", kind=failed.kind, message=failed.message)
        self._ending = True  # messages sent from now on are refused
        self._next_task = await start_queued(self.data, self.state)
        await self._status.notifier.started()
        # A side question in flight is answered before the task closes.
        await workflow.wait_condition(workflow.all_handlers_finished)
        await self._status.notifier.started()  # any a handler asked for meanwhile
        return self._result()

    async def _open(self, data: TaskInput) -> None:
        """The task's opening: the user's message appended once, the installed types recorded,
        round 0 prepared. Carried by round 0's first step since 0.3.0; a store call before."""
        if self._patches.records_on_steps:
            self.state.unopened = True
            return
        opened = await store_call(SessionActivities.open_task, task_opening(data))
        self.state.types = opened.types
        self._loop.first_round = opened.first_round

    async def _close_sessions(self) -> None:
        """Close the task's stateful MCP sessions and the main agent's own: it ended (a branch
        closes its own)."""
        await SessionHolders(self.state.mcp_holders).close(lambda holder: True)

    def _cancel_fields(self) -> dict[str, Any]:
        """The ``canceled`` event's ``by``: who asked (absent when nobody said: a cancellation
        from Temporal directly, or from a client before principals)."""
        return {} if self._canceled_by is None else {"by": named(self._canceled_by)}

    def _undelivered(self) -> list[str]:
        """Messages that arrived as the task ended: no step of the agent showed them."""
        return [m.message_id for m in self.state.steers if m.seq > self.state.seen_upto_seq]

    async def _log_end(self, type_: EventType, **data: Any) -> None:
        """The event log's last event when the task fails or is canceled (a reply's is written
        with the reply)."""
        await log_event(self.data.task_id, type_, type_, self.data.task_id, **data)

    def _result(self) -> TaskResult:
        data, state, shown = self.data, self.state, self._status
        return TaskResult(
            task_id=data.task_id,
            session_id=data.session_id,
            status=shown.status,  # type: ignore[arg-type]
            reply=shown.reply,
            replied_by=None if shown.reply is None else "join" if shown.join_reason else "model",
            join_reason=shown.join_reason,
            error=shown.error,
            last_error=shown.last_error,
            rounds=state.rounds,
            attempts=state.attempts,
            steps=state.steps,
            usage=state.ledger,
            cost_usd=cost_usd(state.ledger, data.prices),
            round=state.round,
            phase=shown.phase,
            pending_question=self.pending_question(),
            pending_approval=self.pending_approval(),
            undelivered=self._undelivered() if shown.status != "running" else [],
            next_task=self._next_task,
            answer_errors=state.answer_errors[-5:],
            last_round=state.last_round,
            side_question_model=data.side_question_model or data.model,
            side_question_timeout_seconds=data.settings.side_question_timeout_seconds,
        )
