"""TaskWorkflow: one user request, worked in rounds until a reply (SPEC §1).

Each round one model decides: ``final_reply`` ends the task, ``delegate`` starts subtasks as
child workflows and the next round decides again with their results; ``ask_user`` waits for the
user inside the round. The workflow passes ids, positions and small decisions; the conversation
stays in the session store. A long task continues as new, carrying only ``TaskState``.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from activities import ConsultActivities, SessionActivities
    from errands import ids
    from errands.activity_io import (
        AppendAckInput,
        AppendReplyInput,
        BranchOutcome,
        JoinInput,
        OpenTaskInput,
        PrepareRoundInput,
        RecordBranchInput,
        RoundState,
        SideAnswer,
        SideQuestionInput,
    )
    from errands.asking import (
        Answer,
        AnswerError,
        QuestionSet,
        clean_answer,
        pending_view,
        validate_answer,
    )
    from errands.contracts import ToolCall
    from errands.control import DelegateDecision, ReplyDecision, SubtaskDraft
    from errands.pricing import cost_usd
    from errands.workflow_io import (
        AnswerReceipt,
        SideQuestion,
        SlotResume,
        SubtaskInput,
        TaskError,
        TaskInput,
        TaskResult,
        TaskState,
        TaskStatus,
    )
    from workflows._failures import Failure, describe
    from workflows._options import model_retry, run_is_long, store_call
    from workflows._round import RoundDecider, Slot
    from workflows._search import Publisher
    from workflows._subtask import SubtaskWorkflow

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
        self._error: TaskError | None = None
        # A question pending when the previous run handed over is answerable at once.
        resume = self.state.resume
        self._pending: QuestionSet | None = resume.questions if resume else None
        self._answer: Answer | None = None
        self._side_in_flight = False
        self._rounds_this_run = 0
        self._first_round: RoundState | None = None
        self._search = Publisher(enabled=data.search_attributes, session_id=data.session_id)

    # -- queries ---------------------------------------------------------------------------

    @workflow.query(name="status")
    def status(self) -> TaskStatus:
        return TaskStatus(
            **self._result().model_dump(),
            round=self.state.round,
            phase=self._phase,
            pending_question=self.pending_question(),
            answer_errors=self.state.answer_errors[-5:],
        )

    @workflow.query(name="pending_question")
    def pending_question(self) -> dict[str, Any] | None:
        return pending_view(self._pending)["pending_question"] if self._pending else None

    # -- answers: an update that validates, a signal that records what it cannot use ----------

    @workflow.update(name="answer_question")
    def answer_question(self, payload: Any) -> AnswerReceipt:
        assert self._pending is not None  # guaranteed by the validator
        self._answer = clean_answer(self._pending, payload)
        return AnswerReceipt(question_set_id=self._pending.id, status=self._answer.status)

    @answer_question.validator
    def _validate_answer(self, payload: Any) -> None:
        if self._pending is None or self._answer is not None:
            raise AnswerError(
                f"task {self.data.task_id} has no question waiting for an answer "
                f"(status: {self._status}); check `errands status {self.data.task_id}`"
            )
        validate_answer(self._pending, payload)

    @workflow.signal(name="submit_answer")
    def submit_answer(self, payload: Any) -> None:
        # Typed Any: a payload that is not even an object is still received and recorded.
        try:
            self._validate_answer(payload)
        except (AnswerError, ValueError) as error:
            self.state.answer_errors = [*self.state.answer_errors[-19:], str(error)]
            workflow.logger.warning("ignored an invalid answer signal: %s", error)
            return
        assert self._pending is not None
        self._answer = clean_answer(self._pending, payload)

    # -- side questions: answered beside the task, never touching it ---------------------------

    @workflow.update(name="ask_side_question")
    async def ask_side_question(self, request: SideQuestion) -> SideAnswer:
        data = self.data
        self._side_in_flight = True
        try:
            answer = await workflow.execute_activity_method(
                ConsultActivities.answer_side_question,
                SideQuestionInput(
                    task_id=data.task_id,
                    session_id=data.session_id,
                    question=request.question,
                    model=data.side_question_model or data.model,
                    round=self.state.last_round,
                ),
                start_to_close_timeout=timedelta(
                    seconds=data.settings.side_question_timeout_seconds
                ),
                retry_policy=model_retry(3),
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
            raise
        except Exception as error:  # noqa: BLE001 - nothing escapes as a stuck workflow task
            if is_cancelled_exception(error):
                self._set_state("canceled", "canceled")
                raise asyncio.CancelledError(str(error)) from error
            workflow.logger.exception("task %s failed outside a round", data.task_id)
            self._fail("internal", f"{type(error).__name__}: {error}")
        # A side question in flight is answered before the task closes.
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self._result()

    def _result(self) -> TaskResult:
        data, state = self.data, self.state
        return TaskResult(
            task_id=data.task_id,
            session_id=data.session_id,
            status=self._status,  # type: ignore[arg-type]
            reply=self._reply,
            error=self._error,
            rounds=state.rounds,
            steps=state.steps,
            usage=state.ledger,
            cost_usd=cost_usd(state.ledger, data.prices),
            last_round=state.last_round,
            side_question_model=data.side_question_model or data.model,
            side_question_timeout_seconds=data.settings.side_question_timeout_seconds,
        )

    async def _round_loop(self) -> None:
        data, settings, state = self.data, self.data.settings, self.state
        decider = RoundDecider(self)
        while True:
            resume, state.resume = state.resume, None
            if resume is None:
                await self._continue_as_new_if_due()
            self._set_state("running", f"round {state.round}: deciding")
            round_ = state.round
            # Round 0 is usually prepared already, by the call that opened the task.
            prepared, self._first_round = self._first_round, None
            if prepared is None:
                prepared = await store_call(
                    SessionActivities.prepare_round,
                    PrepareRoundInput(
                        task_id=data.task_id, session_id=data.session_id, round=round_
                    ),
                )
            if prepared.reply is not None:
                # A previous attempt already replied: return it, no inference.
                self._replied(prepared.reply)
                return
            if prepared.ack is not None:
                # This round already delegated: reuse its acknowledgement, run what is missing.
                decision = DelegateDecision(reply=prepared.ack, subtasks=prepared.ack_subtasks)
                upto = prepared.ack_upto_seq or prepared.upto_seq
                done = {b.ordinal: b for b in prepared.branches}
            else:
                upto = resume.upto if resume else prepared.upto_seq
                reason = resume.final_reason if resume else self._final_reason()
                outcome = await decider.decide(round_, upto, reason, resume)
                state.rounds += 1
                self._rounds_this_run += 1
                if isinstance(outcome, Failure):
                    if outcome.transient and state.retries < settings.round_retry_limit:
                        self._phase = f"round {round_}: models unavailable, retrying later"
                        await workflow.sleep(
                            timedelta(seconds=settings.round_retry_seconds * 2**state.retries)
                        )
                        state.retries += 1
                        continue
                    await self._give_up(outcome)
                    return
                state.retries = 0
                if isinstance(outcome, ReplyDecision):
                    stored = await store_call(
                        SessionActivities.append_reply,
                        AppendReplyInput(
                            task_id=data.task_id, session_id=data.session_id, text=outcome.text
                        ),
                    )
                    self._replied(stored)
                    return
                decision, done = outcome, {}
                await store_call(
                    SessionActivities.append_ack,
                    AppendAckInput(
                        task_id=data.task_id,
                        session_id=data.session_id,
                        round=round_,
                        upto_seq=upto,
                        reply=decision.reply,
                        subtasks=decision.subtasks,
                        thread_ids=[
                            self._thread_id(round_, k) for k in range(1, len(decision.subtasks) + 1)
                        ],
                    ),
                )
            outcomes = await self._run_branches(round_, upto, decision, done)
            signature = _failure_signature(outcomes)
            repeated = bool(signature) and signature == state.last_signature
            state.streak = state.streak + 1 if repeated else int(bool(signature))
            state.last_signature = signature
            state.round += 1

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

    # -- waiting for the user ---------------------------------------------------------------

    async def wait_for_answer(
        self, slot: Slot, call: ToolCall, questions: QuestionSet, deadline: datetime
    ) -> Answer | None:
        """Wait for an answer until ``deadline``; None when it passed first. If the run grows
        too long meanwhile (signals, updates), continue as new with the question still pending."""
        if self._pending is None or self._pending.id != questions.id:
            # A new question. An answer already accepted for this one (say, in the first
            # moments of a run after a handover) is kept.
            self._pending, self._answer = questions, None
        self._set_state("waiting_for_user", f"round {slot.round}: waiting for the user")
        try:
            while self._answer is None:
                remaining = deadline - workflow.now()
                if remaining <= timedelta(0):
                    return None
                try:
                    await workflow.wait_condition(
                        lambda: self._answer is not None or self._run_is_long(),
                        timeout=remaining,
                        timeout_summary="question timeout",
                    )
                except TimeoutError:
                    if self._answer is None:
                        return None
                    break
                if self._answer is None:
                    # Handlers in flight, an answer among them, finish before any handover.
                    await workflow.wait_condition(workflow.all_handlers_finished)
                if self._answer is None:
                    self.state.resume = SlotResume(
                        round=slot.round,
                        upto=slot.upto,
                        final_reason=slot.final_reason,
                        slot_index=slot.index,
                        repair=slot.repair,
                        extra=slot.extra,
                        steps_left=slot.steps_left,
                        reason=slot.reason,
                        call=call,
                        questions=questions,
                        deadline=deadline,
                    )
                    await self._continue_as_new()
        finally:
            self._pending = None
        self._set_state("running", f"round {slot.round}: deciding")
        answer, self._answer = self._answer, None
        return answer

    # -- continue-as-new --------------------------------------------------------------------

    def _run_is_long(self) -> bool:
        settings = self.data.settings
        return run_is_long(
            continue_as_new=settings.continue_as_new,
            max_history_events=settings.max_history_events,
        )

    async def _continue_as_new_if_due(self) -> None:
        per_run = self.data.settings.rounds_per_run
        due = per_run is not None and self._rounds_this_run >= per_run
        if self._run_is_long() or (due and self.data.settings.continue_as_new):
            await self._continue_as_new()

    async def _continue_as_new(self) -> None:
        """Hand over to a fresh run under the same workflow id: ids, counters, ledger and any
        pending question travel; the transcript never does. Handlers in flight finish first."""
        await workflow.wait_condition(workflow.all_handlers_finished)
        self.state.runs += 1
        workflow.continue_as_new(self.data.model_copy(update={"carry": self.state}))

    # -- branches ---------------------------------------------------------------------------

    async def _run_branches(
        self, round_: int, upto: int, decision: DelegateDecision, done: dict[int, BranchOutcome]
    ) -> list[BranchOutcome]:
        todo = [(k, d) for k, d in enumerate(decision.subtasks, 1) if k not in done]
        self._phase = f"round {round_}: {len(todo)} subtasks running"
        # Started together: one workflow task emits every child's start command.
        started = await asyncio.gather(*(self._branch(round_, upto, k, d) for k, d in todo))
        return sorted([*done.values(), *started], key=lambda b: b.ordinal)

    async def _branch(
        self, round_: int, upto: int, ordinal: int, draft: SubtaskDraft
    ) -> BranchOutcome:
        data, settings = self.data, self.data.settings
        type_info = next(t for t in self.state.types if t.key == draft.type)
        try:
            result = await workflow.execute_child_workflow(
                SubtaskWorkflow.run,
                SubtaskInput(
                    task_id=data.task_id,
                    session_id=data.session_id,
                    round=round_,
                    ordinal=ordinal,
                    subtask_type=draft.type,
                    prompt=draft.prompt,
                    references=draft.references,
                    catalog_upto_seq=upto,
                    params=draft.params,
                    model=type_info.model or data.model,
                    step_limit=settings.branch_step_limit,
                    max_history_events=settings.max_history_events,
                    continue_as_new=settings.continue_as_new,
                    model_timeout_seconds=settings.model_timeout_seconds,
                    model_max_attempts=settings.model_max_attempts,
                    max_output_tokens=settings.max_output_tokens,
                ),
                id=self._thread_id(round_, ordinal),
                static_summary=f"round {round_} · subtask {ordinal} · {draft.type}",
            )
        except ChildWorkflowError as error:
            failure = describe(error)
            reason = f"the subtask's workflow failed ({failure.kind}): {failure.message}"
            await store_call(
                SessionActivities.record_branch,
                RecordBranchInput(
                    task_id=data.task_id,
                    session_id=data.session_id,
                    round=round_,
                    ordinal=ordinal,
                    thread_id=self._thread_id(round_, ordinal),
                    draft=draft,
                    status="failed",
                    error=reason,
                ),
            )
            return BranchOutcome(ordinal=ordinal, type=draft.type, status="failed", error=reason)
        self.state.ledger.merge("branches", result.usage)
        return BranchOutcome(
            ordinal=ordinal, type=draft.type, status=result.status, error=result.error
        )

    @staticmethod
    def _thread_id(round_: int, ordinal: int) -> str:
        """A branch's child workflow id, which is also its thread's id in the store."""
        return ids.child_workflow_id(workflow.info().workflow_id, round_, ordinal)

    # -- endings ----------------------------------------------------------------------------

    async def _give_up(self, failure: Failure) -> None:
        """No model can answer: deliver completed branches if any, else fail with the kind."""
        data = self.data
        joined = await store_call(
            SessionActivities.deterministic_join,
            JoinInput(task_id=data.task_id, session_id=data.session_id),
        )
        if joined is not None:
            workflow.logger.warning(
                "task %s replied by deterministic join: %s", data.task_id, failure.message
            )
            self._replied(joined)
            return
        kind = "exhausted" if failure.kind == "no_decision" else failure.kind
        self._fail(kind, failure.message)

    def _replied(self, text: str) -> None:
        self._reply = text
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


def _failure_signature(outcomes: list[BranchOutcome]) -> str:
    """Non-empty when every branch failed, and equal between rounds that failed the same way."""
    if not outcomes or any(o.status == "completed" for o in outcomes):
        return ""
    return "|".join(sorted({o.error or "" for o in outcomes}))
