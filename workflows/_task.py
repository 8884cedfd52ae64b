"""TaskWorkflow: one user request, worked in rounds until a reply (SPEC §1).

Each round one model decides: ``final_reply`` ends the task, ``delegate`` starts subtasks as
child workflows and the next round decides again with their results; ``ask_user`` waits for the
user inside the round. The workflow passes ids, positions and small decisions; the conversation
stays in the session store. A long task continues as new, carrying only ``TaskState``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.exceptions import ApplicationError, is_cancelled_exception
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from activities import SessionActivities
    from errands.agent import approvals, prompts
    from errands.agent.pricing import cost_usd
    from errands.contracts import ids
    from errands.contracts.activities import (
        AppendAckInput,
        AppendMessageInput,
        AppendReplyInput,
        BranchOutcome,
        JoinInput,
        OpenTaskInput,
        PrepareRoundInput,
        RememberApprovalInput,
        RoundState,
        SideAnswer,
        SideQuestionInput,
    )
    from errands.contracts.approvals import (
        ApprovalAnswer,
        ApprovalNeed,
        ApprovalReceipt,
        ApprovalRequest,
        Verdict,
    )
    from errands.contracts.asking import Answer
    from errands.contracts.events import EventType
    from errands.contracts.search import initial
    from errands.contracts.subtasks import DelegateDecision, ReplyDecision, RoundDecision
    from errands.contracts.workflows import (
        AnswerReceipt,
        MessageReceipt,
        SendMessage,
        SideQuestion,
        SteerMark,
        TaskError,
        TaskInput,
        TaskResult,
        TaskState,
    )
    from errands.errors import AnswerRejected
    from workflows._approvals import (
        REQUEST_SIGNAL,
        VERDICT_SIGNAL,
        WITHDRAW_SIGNAL,
        Verdicts,
        request_for,
    )
    from workflows._branches import (
        failure_signature,
        record_failed_branch,
        run_branches,
        thread_id,
        to_start,
    )
    from workflows._failures import Failure, settled
    from workflows._log import log_event
    from workflows._options import run_is_long, store_call
    from workflows._patches import RunPatches
    from workflows._round import RoundDecider, Waiting
    from workflows._search import Publisher
    from workflows._side import answer_side_question
    from workflows._waiting import HandOver, PendingQuestion

INTERRUPTIBLE_ROUNDS = "branches-interruptible-by-a-message"
"""Patch: a round's branches run beside a wait for an interrupting message. Runs from before it
await the branches directly. Asked as the branches start in runs from before RunPatches."""

TASK_END_LOGGED = "task-end-in-the-event-log"
"""Patch: a task that fails or is canceled writes that to the event log. Runs from before it
replay without the call. Asked at the end in runs from before RunPatches."""

FIRST_ROUND_PREPARED_AT_OPEN = "open-task-prepares-round-0"
"""Patch: opening the task also prepares round 0, one store call instead of two. Runs started
before it replay with round 0 prepared by a call of its own."""


@workflow.defn(name="TaskWorkflow")
class TaskWorkflow:
    @workflow.init
    def __init__(self, data: TaskInput) -> None:
        # Set before any handler runs: a signal or update may arrive in a run's first task.
        self.data = data
        self.state = data.carry or TaskState()
        self._status = "running"
        self._phase = "starting"
        self._reply: str | None = None
        self._join_reason: str | None = None
        self._error: TaskError | None = None
        self._last_error: TaskError | None = None
        resume = self.state.resume
        self._question = PendingQuestion(resume.questions if resume else None)
        self._side_in_flight = False
        self._rounds_this_run = 0
        self._first_round: RoundState | None = None
        self._search = Publisher(enabled=data.search_attributes, session_id=data.session_id)
        self._verdicts = Verdicts()
        self._ending = False
        self._interrupted = False
        self._next_task: str | None = None
        self._patches = RunPatches.none()  # asked as the run starts
        if data.carry is None and data.queued:
            self.state.queued = list(data.queued)
        self._phase_before_approval: str | None = None

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
                f"(status: {self._status}); check `errands status {self.data.task_id}`"
            )
        self._question.validate(payload)

    @workflow.signal(name="submit_answer")
    def submit_answer(self, payload: Any) -> None:
        # Typed Any: a payload that is not even an object is still received and recorded.
        try:
            self._validate_answer(payload)
        except (AnswerRejected, ValueError) as error:
            self.state.answer_errors = [*self.state.answer_errors[-19:], str(error)]
            workflow.logger.warning("ignored an invalid answer signal: %s", error)
            return
        self._question.accept(payload)

    # -- approvals: tool calls (the main agent's or a branch's) waiting for the user ---------

    @workflow.query(name="pending_approval")
    def pending_approval(self) -> dict[str, Any] | None:
        waiting = self.state.approvals
        return waiting[0].view() if waiting else None

    @workflow.signal(name=REQUEST_SIGNAL)
    def request_approval(self, request: ApprovalRequest) -> None:
        """A branch's call waits for the user (the branch waits for the verdict signal)."""
        self._add_approval(request)

    @workflow.signal(name=WITHDRAW_SIGNAL)
    def withdraw_approval(self, approval_id: str) -> None:
        """A branch stopped waiting: nobody answered in time."""
        self._drop_approval(approval_id)

    @workflow.update(name="answer_approval")
    async def answer_approval(self, answer: ApprovalAnswer) -> ApprovalReceipt:
        if not await self._decide_approval(answer):
            # Validated, then answered by another update or signal before this one ran.
            raise ApplicationError(
                f"approval {answer.approval_id!r} was answered meanwhile; nothing changed",
                type="AnswerRejected",
                non_retryable=True,
            )
        return ApprovalReceipt(approval_id=answer.approval_id, decision=answer.decision)

    @answer_approval.validator
    def _validate_approval(self, answer: ApprovalAnswer) -> None:
        request = self._waiting_approval(answer.approval_id)
        if request is None:
            waiting = ", ".join(r.approval_id for r in self.state.approvals) or "none"
            raise AnswerRejected(
                f"task {self.data.task_id} has no tool call waiting for approval "
                f"{answer.approval_id!r} (waiting: {waiting}); check "
                f"`errands status {self.data.task_id}`"
            )
        if workflow.now() >= request.expires_at:
            raise AnswerRejected(
                f"the call of {request.tool} waited for approval until "
                f"{request.expires_at.isoformat()} and is no longer waiting; it was not run"
            )
        if answer.decision == "approve_always" and request.policy != "ask":
            raise AnswerRejected(
                f"{request.tool} asks before every call (approval 'always'): approve this call "
                "once, or deny it"
            )

    @workflow.signal(name="submit_approval")
    async def submit_approval(self, payload: Any) -> None:
        # Typed Any, as submit_answer: a payload that does not parse is recorded, not lost.
        try:
            answer = ApprovalAnswer.model_validate(payload)
            self._validate_approval(answer)
        except (AnswerRejected, ValueError) as error:
            self.state.answer_errors = [*self.state.answer_errors[-19:], str(error)]
            workflow.logger.warning("ignored an invalid approval signal: %s", error)
            return
        try:
            await self._decide_approval(answer)
        except Exception as error:  # noqa: BLE001 - a signal handler's error fails the task
            self.state.answer_errors = [*self.state.answer_errors[-19:], str(error)]
            workflow.logger.warning("an approval signal could not be delivered: %s", error)

    def _waiting_approval(self, approval_id: str) -> ApprovalRequest | None:
        return next((r for r in self.state.approvals if r.approval_id == approval_id), None)

    async def _decide_approval(self, answer: ApprovalAnswer) -> bool:
        """Deliver the user's verdict to the waiting call, then remember approve-always; False
        when the call was answered meanwhile (by another update or signal)."""
        request = self._waiting_approval(answer.approval_id)
        if request is None:
            return False
        self._drop_approval(request.approval_id)
        denial = None
        if answer.decision == "deny":
            denial = approvals.denied(request.tool, answer.reason)
        verdict = Verdict(approval_id=request.approval_id, denial=denial)
        if request.requester == workflow.info().workflow_id:
            self._verdicts.put(verdict)
        else:
            await workflow.get_external_workflow_handle(request.requester).signal(
                VERDICT_SIGNAL, verdict
            )
        if answer.decision == "approve_always":
            await store_call(
                SessionActivities.remember_approval,
                RememberApprovalInput(session_id=self.data.session_id, tool=request.tool),
            )
        return True

    async def _approve(self, need: ApprovalNeed, step: int) -> str | None:
        """Put one of the main agent's calls to the user and wait: None when approved, else
        the text the model reads."""
        settings = self.data.settings
        if self.data.headless:
            return approvals.headless(need.tool)
        request = request_for(need, step, "main", settings.ask_timeout_hours)
        self._add_approval(request)
        try:
            verdict = await self._verdicts.wait(request, settings.ask_timeout_hours)
        finally:  # answered, timed out or canceled: it waits no more
            self._drop_approval(request.approval_id)
        if verdict is None:
            return approvals.timed_out(need.tool, settings.ask_timeout_hours)
        return verdict.denial

    def _branch_ended(self, thread_id: str) -> None:
        """A branch that ended (completed, failed or canceled) waits for no approval."""
        if any(r.requester == thread_id for r in self.state.approvals):
            self.state.approvals = [r for r in self.state.approvals if r.requester != thread_id]
            self._show_approvals()

    def _add_approval(self, request: ApprovalRequest) -> None:
        if self._waiting_approval(request.approval_id) is None:
            self.state.approvals.append(request)
        self._show_approvals()

    def _drop_approval(self, approval_id: str) -> None:
        self.state.approvals = [r for r in self.state.approvals if r.approval_id != approval_id]
        self._show_approvals()

    def _show_approvals(self) -> None:
        """While a call waits for approval the task waits for the user; then it runs again."""
        waiting = self.state.approvals
        if waiting and self._status == "running":
            self._phase_before_approval = self._phase
            self._set_state("waiting_for_user", f"waiting for approval of {waiting[0].tool}")
        elif not waiting and self._phase_before_approval is not None:
            phase, self._phase_before_approval = self._phase_before_approval, None
            if self._status == "waiting_for_user" and not self._question.open:
                self._set_state("running", phase)

    # -- messages into the running task: steer it, or queue the next task ---------------------

    @workflow.update(name="send_message")
    async def send_message(self, message: SendMessage) -> MessageReceipt:
        state, data = self.state, self.data
        state.messages += 1
        message_id = ids.steer_message_id(data.task_id, state.messages)
        if message.mode == "queue":
            state.queued.append(message.text)
            return MessageReceipt(message_id=message_id, mode="queue", status="queued")
        seq = await store_call(
            SessionActivities.append_message,
            AppendMessageInput(
                task_id=data.task_id,
                session_id=data.session_id,
                message_id=message_id,
                text=message.text,
                mode=message.mode,
            ),
        )
        state.steers.append(SteerMark(message_id=message_id, seq=seq))
        if message.mode == "interrupt":
            self._interrupted = True  # branches running now are cancelled (_run_branches)
        return MessageReceipt(message_id=message_id, mode=message.mode, status="accepted")

    @send_message.validator
    def _validate_message(self, message: SendMessage) -> None:
        if not message.text.strip():
            raise ValueError("the message is empty; write what the agent should know")
        if self._status in ("replied", "failed", "canceled") or self._ending:
            raise ValueError(
                f"task {self.data.task_id} is ending ({self._status}); start a new task in its "
                f"session: errands run --session {self.data.session_id} TEXT"
            )

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
        try:
            if data.carry is None:
                self.state.started_at = workflow.now()
                opened = await store_call(
                    SessionActivities.open_task,
                    OpenTaskInput(
                        task_id=data.task_id,
                        session_id=data.session_id,
                        text=data.text,
                        prepare_first_round=workflow.patched(FIRST_ROUND_PREPARED_AT_OPEN),
                    ),
                )
                self.state.types = opened.types
                self._first_round = opened.first_round
            await self._round_loop()
        except asyncio.CancelledError:
            self._set_state("canceled", "canceled")
            await self._log_end("canceled")
            raise
        except Exception as error:  # noqa: BLE001 - nothing escapes as a stuck workflow task
            if is_cancelled_exception(error):
                self._set_state("canceled", "canceled")
                await self._log_end("canceled")
                raise asyncio.CancelledError(str(error)) from error
            workflow.logger.exception("task %s failed outside a round", data.task_id)
            self._fail("internal", f"{type(error).__name__}: {error}")
        if self._error is not None:
            await self._log_end("failed", kind=self._error.kind, message=self._error.message)
        self._ending = True  # messages sent from now on are refused
        await self._start_queued()
        # A side question in flight is answered before the task closes.
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self._result()

    async def _start_queued(self) -> None:
        """The first queued message becomes the session's next task (carrying the rest)."""
        if not self.state.queued:
            return
        data, first, rest = self.data, self.state.queued[0], self.state.queued[1:]
        next_id = ids.queued_task_id(data.task_id, self.state.messages)
        await workflow.start_child_workflow(
            "TaskWorkflow",
            data.model_copy(
                update={"task_id": next_id, "text": first, "carry": None, "queued": rest}
            ),
            id=next_id,
            parent_close_policy=ParentClosePolicy.ABANDON,
            search_attributes=initial(data.session_id) if data.search_attributes else None,
            static_summary=f"queued after {data.task_id}",
        )
        self.state.queued = []
        self._next_task = next_id

    def _undelivered(self) -> list[str]:
        """Messages that arrived as the task ended: no step of the agent showed them."""
        return [m.message_id for m in self.state.steers if m.seq > self.state.seen_upto]

    async def _log_end(self, type_: EventType, **data: Any) -> None:
        """The event log's last event when the task fails or is canceled (a reply's is written
        with the reply). Runs from before the log replay without it."""
        if self._patches.task_end_logged or workflow.patched(TASK_END_LOGGED):
            await log_event(self.data.task_id, type_, type_, self.data.task_id, **data)

    def _result(self) -> TaskResult:
        data, state = self.data, self.state
        return TaskResult(
            task_id=data.task_id,
            session_id=data.session_id,
            status=self._status,  # type: ignore[arg-type]
            reply=self._reply,
            replied_by=None if self._reply is None else "join" if self._join_reason else "model",
            join_reason=self._join_reason,
            error=self._error,
            last_error=self._last_error,
            rounds=state.rounds,
            attempts=state.attempts,
            steps=state.steps,
            usage=state.ledger,
            cost_usd=cost_usd(state.ledger, data.prices),
            round=state.round,
            phase=self._phase,
            pending_question=self.pending_question(),
            pending_approval=self.pending_approval(),
            undelivered=self._undelivered() if self._status != "running" else [],
            next_task=self._next_task,
            answer_errors=state.answer_errors[-5:],
            last_round=state.last_round,
            side_question_model=data.side_question_model or data.model,
            side_question_timeout_seconds=data.settings.side_question_timeout_seconds,
        )

    async def _round_loop(self) -> None:
        state = self.state
        decider = RoundDecider(self.data, state, self._approve, self._patches)
        while True:
            # A round that waited on the user when the previous run handed over goes on waiting.
            parked = Waiting(state.resume) if state.resume is not None else None
            state.resume = None
            if parked is None:
                await self._continue_as_new_if_due()
            self._set_state("running", f"round {state.round}: deciding")
            round_ = state.round
            state.rounds = max(state.rounds, round_ + 1)
            prepared = await self._prepare(round_)
            if prepared.reply is not None:
                # A previous attempt already replied: return it, no inference.
                self._replied(prepared.reply, join_reason=prepared.join_reason)
                return
            if prepared.ack is not None:
                # This round already delegated: reuse its acknowledgement, run what is missing.
                decision = DelegateDecision(reply=prepared.ack, subtasks=prepared.ack_subtasks)
                upto = prepared.ack_upto_seq or prepared.upto_seq
                done = {b.ordinal: b for b in prepared.branches}
            else:
                upto = parked.slot.upto if parked else prepared.upto_seq
                outcome = await self._decide(decider, round_, upto, parked)
                upto = max(upto, state.seen_upto)  # the messages its steps showed
                if isinstance(outcome, Failure):
                    if await self._retried_later(round_, outcome):
                        continue
                    await self._give_up(outcome)
                    return
                state.retries, self._last_error = 0, None
                if isinstance(outcome, ReplyDecision):
                    await self._reply_with(outcome)
                    return
                decision, done = outcome, {}
                await self._acknowledge(round_, upto, decision)
            await self._run_branches(round_, upto, decision, done)
            state.round += 1

    async def _prepare(self, round_: int) -> RoundState:
        """What the store already holds for the round. Round 0 is usually prepared already, by
        the call that opened the task."""
        prepared, self._first_round = self._first_round, None
        if prepared is not None:
            return prepared
        data = self.data
        return await store_call(
            SessionActivities.prepare_round,
            PrepareRoundInput(task_id=data.task_id, session_id=data.session_id, round=round_),
        )

    async def _decide(
        self, decider: RoundDecider, round_: int, upto: int, parked: Waiting | None
    ) -> RoundDecision | Failure:
        """The round's decision, waiting for the user as often as the model asks."""
        if parked is None:
            # Counted as it starts: a round that waits across runs is carried, not counted again.
            self.state.attempts += 1
        outcome = parked or await decider.decide(round_, upto, self._final_reason())
        while isinstance(outcome, Waiting):
            outcome = await decider.resume(outcome, await self._wait_for_answer(outcome))
        self._rounds_this_run += 1
        return outcome

    async def _retried_later(self, round_: int, failure: Failure) -> bool:
        """Whether a round that failed as transient waits (longer each time) and goes again."""
        settings, state = self.data.settings, self.state
        if not failure.transient or state.retries >= settings.round_retry_limit:
            return False
        wait = settings.round_retry_seconds * 2**state.retries
        # Shown by the status query while the round waits: no history event for it.
        self._last_error = TaskError(kind="transient", message=settled(failure.message))
        self._phase = (
            f"round {round_}: models unavailable, retry {state.retries + 1} of "
            f"{settings.round_retry_limit} in {wait:.0f} s"
        )
        await workflow.sleep(timedelta(seconds=wait))
        state.retries += 1
        return True

    def _final_reason(self) -> str | None:
        settings, state = self.data.settings, self.state
        if settings.step_budget - state.steps < 2:
            return f"the step budget is spent ({state.steps} of {settings.step_budget} steps used)"
        assert state.started_at is not None
        elapsed = (workflow.now() - state.started_at).total_seconds()
        if elapsed >= settings.deadline_seconds:
            return f"the task's time limit ({settings.deadline_seconds:.0f} s) has passed"
        if state.streak >= settings.same_failure_rounds:
            return (
                f"the subtasks of the last {state.streak} rounds all failed the same way, "
                "so delegating again would not help"
            )
        return None

    async def _acknowledge(self, round_: int, upto: int, decision: DelegateDecision) -> None:
        """The acknowledgement the user sees while the branches run, written before any starts."""
        data = self.data
        await store_call(
            SessionActivities.append_ack,
            AppendAckInput(
                task_id=data.task_id,
                session_id=data.session_id,
                round=round_,
                upto_seq=upto,
                reply=decision.reply,
                subtasks=decision.subtasks,
                thread_ids=[thread_id(round_, k) for k in range(1, len(decision.subtasks) + 1)],
                view=self.state.last_round.view if self.state.last_round else None,
            ),
        )

    async def _run_branches(
        self, round_: int, upto: int, decision: DelegateDecision, done: dict[int, BranchOutcome]
    ) -> None:
        """Run the round's missing branches; rounds whose branches all fail the same way in a
        row make a streak, and a long streak makes the next round final."""
        state, todo = self.state, to_start(decision, done)
        self._phase = f"round {round_}: {len(todo)} subtasks running"
        branches = run_branches(self.data, state, round_, upto, todo, done, self._branch_ended)
        if not (self._patches.interruptible_rounds or workflow.patched(INTERRUPTIBLE_ROUNDS)):
            outcomes = await branches
        else:
            self._interrupted = False
            running = asyncio.ensure_future(branches)
            try:
                await workflow.wait_condition(lambda: running.done() or self._interrupted)
            except asyncio.CancelledError:
                running.cancel()  # the task is canceled: so are its branches
                await asyncio.gather(running, return_exceptions=True)
                raise
            if not running.done():
                await self._interrupt(round_, decision, running)
                return
            outcomes = running.result()
        signature = failure_signature(outcomes)
        repeated = bool(signature) and signature == state.last_signature
        state.streak = state.streak + 1 if repeated else int(bool(signature))
        state.last_signature = signature

    async def _interrupt(
        self, round_: int, decision: DelegateDecision, running: asyncio.Future[Any]
    ) -> None:
        """The user's message interrupts the round: its branches are cancelled, each that had
        not finished is recorded as such, and the next round decides with the message."""
        self._phase = f"round {round_}: interrupted by your message"
        running.cancel()
        try:
            await running
        except asyncio.CancelledError:
            pass
        await asyncio.gather(
            *(
                record_failed_branch(self.data, round_, ordinal, draft, prompts.INTERRUPTED)
                for ordinal, draft in enumerate(decision.subtasks, 1)
            )
        )
        self._interrupted = False

    # -- waiting for the user ---------------------------------------------------------------

    async def _wait_for_answer(self, waiting: Waiting) -> Answer | None:
        """The user's answer, or None when the question expired first. A run grown too long
        meanwhile hands over to a fresh one, the question still pending."""
        round_ = waiting.slot.round
        self._set_state("waiting_for_user", f"round {round_}: waiting for the user")
        ended = await self._question.wait(waiting.questions, waiting.deadline, self.data.settings)
        if isinstance(ended, HandOver):
            self.state.resume = waiting.slot
            await self._continue_as_new()
        self._set_state("running", f"round {round_}: deciding")
        return ended

    # -- continue-as-new --------------------------------------------------------------------

    async def _continue_as_new_if_due(self) -> None:
        settings = self.data.settings
        per_run = settings.rounds_per_run
        due = per_run is not None and self._rounds_this_run >= per_run
        long = run_is_long(
            continue_as_new=settings.continue_as_new,
            max_history_events=settings.max_history_events,
        )
        if long or (due and settings.continue_as_new):
            await self._continue_as_new()

    async def _continue_as_new(self) -> NoReturn:
        """Hand over to a fresh run under the same workflow id: ids, counters, ledger and any
        pending question travel; the transcript never does. Handlers in flight finish first."""
        await workflow.wait_condition(workflow.all_handlers_finished)
        self.state.runs += 1
        workflow.continue_as_new(self.data.model_copy(update={"carry": self.state}))

    # -- endings ----------------------------------------------------------------------------

    async def _reply_with(self, decision: ReplyDecision) -> None:
        data = self.data
        stored = await store_call(
            SessionActivities.append_reply,
            AppendReplyInput(task_id=data.task_id, session_id=data.session_id, text=decision.text),
        )
        self._replied(stored)

    async def _give_up(self, failure: Failure) -> None:
        """No model can answer: deliver completed branches if any, else fail with the kind."""
        data, state = self.data, self.state
        message = settled(failure.message)
        if failure.transient and state.retries:
            times = "once" if state.retries == 1 else f"{state.retries} times"
            message = f"round {state.round} was retried {times} and failed each time: {message}"
        self._last_error = None
        joined = await store_call(
            SessionActivities.deterministic_join,
            JoinInput(task_id=data.task_id, session_id=data.session_id, reason=message),
        )
        if joined is not None:
            workflow.logger.warning(
                "task %s replied by deterministic join: %s", data.task_id, message
            )
            self._replied(joined, join_reason=message)
            return
        kind = "exhausted" if failure.kind == "no_decision" else failure.kind
        self._fail(kind, message)

    def _replied(self, text: str, *, join_reason: str | None = None) -> None:
        self._reply, self._join_reason = text, join_reason
        self._set_state("replied", "replied")

    def _fail(self, kind: str, message: str) -> None:
        self._error = TaskError(kind=kind, message=message)  # type: ignore[arg-type]
        self._set_state("failed", "failed")

    def _set_state(self, status: str, phase: str) -> None:
        self._status, self._phase = status, phase
        self._search.publish(
            state=status,
            round_=self.state.round,
            cost=cost_usd(self.state.ledger, self.data.prices),
        )
