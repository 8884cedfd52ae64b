"""TaskWorkflow: one user request, worked in rounds until a reply (SPEC §1).

Each round one model decides: ``final_reply`` ends the task, ``delegate`` starts subtasks as
child workflows and the next round decides again with their results. The workflow passes ids,
positions and small decisions; the conversation stays in the session store.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from activities import ConsultActivities, ModelActivities, SessionActivities
    from errands import ids, prompts
    from errands.activity_io import (
        AdvisorInput,
        AppendAckInput,
        AppendReplyInput,
        BranchOutcome,
        JoinInput,
        OpenTaskInput,
        PrepareRoundInput,
        RecordBranchInput,
        RememberInput,
        RoundStepInput,
        SessionRef,
        SideAnswer,
        SideQuestionInput,
    )
    from errands.advisor import ADVISOR_TOOL, error_result, limit_reached_result, parse_question
    from errands.asking import (
        Answer,
        AnswerError,
        QuestionSet,
        accepted_decision,
        check_citation,
        clean_answer,
        find_remembered,
        headless_result,
        is_dismissal,
        parse_ask_user,
        pending_view,
        remembered_result,
        result_for_answer,
        timed_out_result,
        validate_answer,
    )
    from errands.contracts import Message, ToolCall, UsageLedger
    from errands.control import (
        ASK_USER,
        DELEGATE,
        FINAL_REPLY,
        ControlCallError,
        Decision,
        DelegateDecision,
        Rejection,
        ReplyDecision,
        SubtaskDraft,
        parse_delegate,
        parse_final_reply,
        pick_control_call,
    )
    from errands.subtask_types import SubtaskTypeInfo
    from errands.workflow_io import (
        AnswerReceipt,
        SideQuestion,
        SubtaskInput,
        TaskError,
        TaskInput,
        TaskResult,
        TaskStatus,
    )
    from workflows._failures import Failure, describe
    from workflows._options import STORE_RETRY, STORE_TIMEOUT, model_retry
    from workflows._search import Publisher
    from workflows._subtask import SubtaskWorkflow


@workflow.defn(name="TaskWorkflow")
class TaskWorkflow:
    def __init__(self) -> None:
        self._input: TaskInput | None = None
        self._types: list[SubtaskTypeInfo] = []
        self._status: str = "running"
        self._phase = "starting"
        self._round = 0
        self._rounds = 0
        self._steps = 0
        self._ledger = UsageLedger()
        self._reply: str | None = None
        self._error: TaskError | None = None
        self._asks = 0
        self._pending: QuestionSet | None = None
        self._answer: Answer | None = None
        self._answer_errors: list[str] = []
        self._search = Publisher(enabled=False)
        self._advisor_uses = 0
        self._last_round: RoundStepInput | None = None
        self._side_in_flight = False

    # -- queries ---------------------------------------------------------------------------

    @workflow.query(name="status")
    def status(self) -> TaskStatus:
        data = self._data
        return TaskStatus(
            task_id=data.task_id,
            session_id=data.session_id,
            status=self._status,  # type: ignore[arg-type]
            reply=self._reply,
            error=self._error,
            rounds=self._rounds,
            steps=self._steps,
            usage=self._ledger,
            round=self._round,
            phase=self._phase,
            pending_question=pending_view(self._pending)["pending_question"]
            if self._pending
            else None,
            answer_errors=self._answer_errors[-5:],
        )

    @workflow.query(name="pending_question")
    def pending_question(self) -> dict[str, Any] | None:
        return pending_view(self._pending)["pending_question"] if self._pending else None

    # -- answers: an update that validates, a signal that records what it cannot use ----------

    @workflow.update(name="answer_question")
    def answer_question(self, payload: dict[str, Any]) -> AnswerReceipt:
        assert self._pending is not None  # guaranteed by the validator
        self._answer = clean_answer(self._pending, payload)
        return AnswerReceipt(question_set_id=self._pending.id, status=self._answer.status)

    @answer_question.validator
    def _validate_answer(self, payload: dict[str, Any]) -> None:
        if self._pending is None or self._answer is not None:
            raise AnswerError(
                f"task {self._data.task_id} has no question waiting for an answer "
                f"(status: {self._status}); check `errands status {self._data.task_id}`"
            )
        validate_answer(self._pending, payload)

    @workflow.signal(name="submit_answer")
    def submit_answer(self, payload: dict[str, Any]) -> None:
        try:
            self._validate_answer(payload)
        except (AnswerError, ValueError) as error:
            self._answer_errors.append(str(error))
            workflow.logger.warning("ignored an invalid answer signal: %s", error)
            return
        assert self._pending is not None
        self._answer = clean_answer(self._pending, payload)

    # -- side questions: answered beside the task, never touching it ---------------------------

    @workflow.update(name="ask_side_question")
    async def ask_side_question(self, request: SideQuestion) -> SideAnswer:
        data = self._data
        self._side_in_flight = True
        try:
            answer = await workflow.execute_activity_method(
                ConsultActivities.answer_side_question,
                SideQuestionInput(
                    task_id=data.task_id,
                    session_id=data.session_id,
                    question=request.question,
                    model=data.side_question_model or data.model,
                    round=self._last_round,
                ),
                start_to_close_timeout=timedelta(
                    seconds=data.settings.side_question_timeout_seconds
                ),
                retry_policy=model_retry(3),
                summary="side question",
            )
        finally:
            self._side_in_flight = False
        self._ledger.merge("side_questions", answer.usage)
        return answer

    @ask_side_question.validator
    def _validate_side_question(self, request: SideQuestion) -> None:
        if not request.question.strip():
            raise ValueError("the side question is empty; write what you want to know")
        if self._side_in_flight:
            raise ValueError(
                f"task {self._data.task_id} is already answering a side question; ask again "
                "when it has answered"
            )

    # -- the run ---------------------------------------------------------------------------

    @workflow.run
    async def run(self, data: TaskInput) -> TaskResult:
        self._input = data
        self._started = workflow.now()
        self._search = Publisher(enabled=data.search_attributes)
        try:
            opened = await self._store_call(
                SessionActivities.open_task,
                OpenTaskInput(task_id=data.task_id, session_id=data.session_id, text=data.text),
            )
            self._types = opened.types
            await self._round_loop()
        except asyncio.CancelledError:
            self._set_state("canceled", "canceled")
            raise
        except Exception as error:  # noqa: BLE001 - nothing escapes as a stuck workflow task
            workflow.logger.exception("task %s failed outside a round", data.task_id)
            self._fail("internal", f"{type(error).__name__}: {error}")
        # A side question in flight is answered before the task closes.
        await workflow.wait_condition(workflow.all_handlers_finished)
        return TaskResult(
            task_id=data.task_id,
            session_id=data.session_id,
            status=self._status,  # type: ignore[arg-type]
            reply=self._reply,
            error=self._error,
            rounds=self._rounds,
            steps=self._steps,
            usage=self._ledger,
            last_round=self._last_round,
            side_question_model=data.side_question_model or data.model,
        )

    @property
    def _data(self) -> TaskInput:
        assert self._input is not None
        return self._input

    async def _round_loop(self) -> None:
        data, settings = self._data, self._data.settings
        round_, retries, streak, last_signature = 0, 0, 0, ""
        while True:
            self._round = round_
            self._set_state("running", f"round {round_}: deciding")
            state = await self._store_call(
                SessionActivities.prepare_round,
                PrepareRoundInput(task_id=data.task_id, session_id=data.session_id, round=round_),
            )
            if state.reply is not None:
                # A previous attempt already replied: return it, no inference.
                self._replied(state.reply)
                return
            if state.ack is not None:
                # This round already delegated: reuse its acknowledgement, run what is missing.
                decision = DelegateDecision(reply=state.ack, subtasks=state.ack_subtasks)
                upto = state.ack_upto_seq or state.upto_seq
                done = {b.ordinal: b for b in state.branches}
            else:
                outcome = await self._decide(round_, state.upto_seq, self._final_reason(streak))
                self._rounds += 1
                if isinstance(outcome, Failure):
                    if outcome.transient and retries < settings.round_retry_limit:
                        self._phase = f"round {round_}: models unavailable, retrying later"
                        await workflow.sleep(
                            timedelta(seconds=settings.round_retry_seconds * 2**retries)
                        )
                        retries += 1
                        continue
                    await self._give_up(outcome)
                    return
                retries = 0
                if isinstance(outcome, ReplyDecision):
                    stored = await self._store_call(
                        SessionActivities.append_reply,
                        AppendReplyInput(
                            task_id=data.task_id, session_id=data.session_id, text=outcome.text
                        ),
                    )
                    self._replied(stored)
                    return
                decision, upto, done = outcome, state.upto_seq, {}
                await self._store_call(
                    SessionActivities.append_ack,
                    AppendAckInput(
                        task_id=data.task_id,
                        session_id=data.session_id,
                        round=round_,
                        upto_seq=upto,
                        reply=decision.reply,
                        subtasks=decision.subtasks,
                    ),
                )
            outcomes = await self._run_branches(round_, upto, decision, done)
            signature = _failure_signature(outcomes)
            streak = (
                streak + 1 if signature and signature == last_signature else int(bool(signature))
            )
            last_signature = signature
            round_ += 1

    def _final_reason(self, same_failure_streak: int) -> str | None:
        settings = self._data.settings
        left = settings.step_budget - self._steps
        if left < 2:
            return f"the step budget is spent ({self._steps} of {settings.step_budget} steps used)"
        elapsed = (workflow.now() - self._started).total_seconds()
        if elapsed >= settings.deadline_seconds:
            return f"the task's time limit ({settings.deadline_seconds:.0f} s) has passed"
        if same_failure_streak >= settings.same_failure_rounds:
            return (
                f"the subtasks of the last {same_failure_streak} rounds all failed the same way, "
                "so delegating again would not help"
            )
        return None

    # -- one round's decision: slots, repairs, budget ---------------------------------------

    async def _decide(self, round_: int, upto: int, final_reason: str | None) -> Decision | Failure:
        data, settings = self._data, self._data.settings
        slots = [("primary", data.model)]
        if data.fallback_model:
            slots.append(("fallback", data.fallback_model))
        diagnostics: list[str] = []
        any_transient = False
        for slot, model in slots:
            extra: list[Message] = []  # this slot's own view: repairs never reach the session
            for repair in range(settings.max_repairs + 1):
                result = await self._attempt(round_, upto, slot, model, final_reason, extra)
                if isinstance(result, (ReplyDecision, DelegateDecision)):
                    return result
                if isinstance(result, Failure):
                    if result.non_recoverable:
                        return result
                    any_transient = any_transient or result.transient
                    diagnostics.append(f"{slot} ({model}): {result.message}")
                    break
                diagnostics.append(f"{slot} ({model}, attempt {repair + 1}): {result.error}")
                if repair < settings.max_repairs and self._steps < settings.step_budget:
                    extra = extra + _repair_exchange(
                        ids.repair_call_id(data.task_id, round_, slot, repair), result
                    )
                    continue
                break
        if any_transient:
            return Failure("transient", "; ".join(diagnostics))
        return Failure(
            "exhausted", f"round {round_} found no usable decision: " + "; ".join(diagnostics)
        )

    async def _attempt(
        self,
        round_: int,
        upto: int,
        slot: str,
        model: str,
        final_reason: str | None,
        extra: list[Message],
    ) -> Decision | Rejection | Failure:
        """One try on one model: steps until a control call ends the round (or the steps run
        out). Every step is charged to the budget, failed ones included."""
        data, settings = self._data, self._data.settings
        reason = final_reason
        steps_left = 1 if reason else max(1, settings.step_budget - self._steps)
        dismissed = False
        while steps_left > 0:
            steps_left -= 1
            final = reason is not None
            # ask_user and work tools need a step after them, so the last step has neither.
            follow_up = not final and steps_left > 0
            offered = {FINAL_REPLY}
            if not final and self._types:
                offered.add(DELEGATE)
            if follow_up:
                offered.add(ASK_USER)
            self._steps += 1
            step_input = RoundStepInput(
                task_id=data.task_id,
                session_id=data.session_id,
                round=round_,
                upto_seq=upto,
                slot=slot,
                model=model,
                final_reason=reason,
                work_tools=follow_up,
                extra=list(extra),
                max_subtasks=settings.max_subtasks,
                max_output_tokens=settings.max_output_tokens,
            )
            self._last_round = step_input
            try:
                out = await workflow.execute_activity_method(
                    ModelActivities.round_step,
                    step_input,
                    start_to_close_timeout=timedelta(seconds=settings.model_timeout_seconds),
                    retry_policy=model_retry(settings.model_max_attempts),
                    summary=f"round {round_} · {slot} · {model}" + (" · final" if final else ""),
                )
            except ActivityError as error:
                failure = describe(error, settings.model_max_attempts)
                self._ledger.charge(
                    "rounds", model, calls=failure.attempts, failed_calls=failure.attempts
                )
                if dismissed:
                    return ReplyDecision(text=prompts.DISMISSED_REPLY)
                return failure
            response = out.response
            self._ledger.charge(
                "rounds", model, response.usage, calls=out.attempt, failed_calls=out.attempt - 1
            )
            work = {ADVISOR_TOOL} if follow_up else set()
            decision = self._read_step(response.tool_calls, offered, work, out.catalog_size)
            if dismissed:
                # The user declined to choose: whatever the model does now, the round ends
                # with a short reply and nothing is started.
                if isinstance(decision, ReplyDecision):
                    return decision
                return ReplyDecision(text=prompts.DISMISSED_REPLY)
            if isinstance(decision, ToolCall) and decision.name == ADVISOR_TOOL:
                await self._consult(step_input, decision, extra)
                continue
            if isinstance(decision, ToolCall):
                outcome = await self._ask(round_, decision, extra)
                if isinstance(outcome, Rejection):
                    return outcome
                if outcome == "dismissed":
                    dismissed, reason, steps_left = True, prompts.DISMISSED_REASON, 1
                continue
            if decision is not None:
                return decision
            return Failure(
                "no_decision", prompts.no_decision(response.finish_reason, response.text)
            )
        return Failure("no_decision", "the attempt ran out of steps without a control call")

    def _read_step(
        self, calls: list[ToolCall], offered: set[str], work: set[str], catalog_size: int
    ) -> Decision | Rejection | ToolCall | None:
        """What one step's tool calls amount to: a decision, a call to repair, an ``ask_user``
        or work-tool call to carry out, or None when the model called nothing (narration).

        A control call wins over work-tool calls in the same step: the round ends there."""
        picked = pick_control_call(calls, offered)
        if picked is None:
            if not calls:
                return None
            known = [c for c in calls if c.name in work]
            if known:
                return known[0]
            return Rejection(
                call=calls[0],
                error=f"There is no tool named {calls[0].name!r} in this round; the tools you "
                f"can call are {sorted(offered | work)}.",
            )
        name, chosen = picked
        if name == ASK_USER:
            return chosen[0]
        try:
            if name == FINAL_REPLY:
                return parse_final_reply(chosen)
            return parse_delegate(
                chosen,
                catalog_size=catalog_size,
                types=self._types,
                max_subtasks=self._data.settings.max_subtasks,
            )
        except ControlCallError as error:
            # A repeated final_reply is judged by its last call, everything else by its first.
            subject = chosen[-1] if name == FINAL_REPLY else chosen[0]
            return Rejection(call=subject, error=str(error))

    # -- the advisor ------------------------------------------------------------------------

    async def _consult(self, step: RoundStepInput, call: ToolCall, extra: list[Message]) -> None:
        """Ask the advisor and append its result as the call's tool result. Over the limit no
        model is called; a failed or empty consultation does not use up the limit."""
        data, settings = self._data, self._data.settings
        model = data.advisor_model or data.model
        if self._advisor_uses >= settings.advisor_limit:
            result = limit_reached_result(model, limit=settings.advisor_limit)
        else:
            try:
                out = await workflow.execute_activity_method(
                    ConsultActivities.consult_advisor,
                    AdvisorInput(
                        round=step,
                        question=parse_question(call.arguments),
                        model=model,
                        uses=self._advisor_uses,
                        limit=settings.advisor_limit,
                    ),
                    start_to_close_timeout=timedelta(seconds=settings.model_timeout_seconds),
                    retry_policy=model_retry(settings.model_max_attempts),
                    summary=f"round {step.round} · advisor · {model}",
                )
            except ActivityError as error:
                failure = describe(error, settings.model_max_attempts)
                self._ledger.charge(
                    "advisor", model, calls=failure.attempts, failed_calls=failure.attempts
                )
                result = error_result(
                    model, failure.message, uses=self._advisor_uses, limit=settings.advisor_limit
                )
            else:
                self._ledger.charge(
                    "advisor", model, out.usage, calls=out.attempt, failed_calls=out.attempt - 1
                )
                result = out.result
                if result.type == "advice":
                    self._advisor_uses += 1
        call_id = ids.provider_safe(call.id) or f"advisor_{self._steps}"
        extra += [
            Message(role="assistant", tool_calls=[call.model_copy(update={"id": call_id})]),
            Message(
                role="tool",
                tool_call_id=call_id,
                tool_name=ADVISOR_TOOL,
                # The JSON says whether it is an error; the result shape stays parseable.
                text=result.to_tool_text(),
            ),
        ]

    # -- asking the user ----------------------------------------------------------------------

    async def _ask(
        self, round_: int, call: ToolCall, extra: list[Message]
    ) -> Rejection | Literal["dismissed", "answered"]:
        """Put a question to the user, or answer it from memory, and append the exchange to
        this slot's messages (never to the session). A bad call comes back to be repaired."""
        data = self._data
        self._asks += 1
        try:
            questions = parse_ask_user(call, set_id=f"{data.task_id}-q{self._asks}")
            decisions = await self._store_call(
                SessionActivities.recall_decisions, SessionRef(session_id=data.session_id)
            )
            check_citation(questions, decisions)
        except ControlCallError as error:
            return Rejection(call=call, error=str(error))
        remembered = None if questions.reopens else find_remembered(questions, decisions)
        dismissed = False
        if remembered is not None:
            result = remembered_result(remembered)
        elif data.headless:
            result = headless_result(questions)
        else:
            answer = await self._wait_for_answer(round_, questions)
            if answer is None:
                result = timed_out_result(data.settings.ask_timeout_hours)
            else:
                result = result_for_answer(questions, answer)
                dismissed = answer.status == "answered" and is_dismissal(answer)
                accepted = accepted_decision(questions, answer)
                if accepted is not None:
                    await self._store_call(
                        SessionActivities.remember_decision,
                        RememberInput(
                            session_id=data.session_id,
                            decision_id=accepted.decision_id,
                            record=accepted.model_dump(mode="json"),
                        ),
                    )
        call_id = ids.provider_safe(call.id) or f"ask_{self._asks}"
        extra += [
            Message(role="assistant", tool_calls=[call.model_copy(update={"id": call_id})]),
            Message(role="tool", tool_call_id=call_id, tool_name=ASK_USER, text=result),
        ]
        return "dismissed" if dismissed else "answered"

    async def _wait_for_answer(self, round_: int, questions: QuestionSet) -> Answer | None:
        """Wait durably for an answer; None when the timer ran out first."""
        settings = self._data.settings
        self._pending, self._answer = questions, None
        self._set_state("waiting_for_user", f"round {round_}: waiting for the user")
        try:
            await workflow.wait_condition(
                lambda: self._answer is not None,
                timeout=timedelta(hours=settings.ask_timeout_hours),
                timeout_summary="question timeout",
            )
        except TimeoutError:
            return None
        finally:
            self._pending = None
            self._set_state("running", f"round {round_}: deciding")
        answer, self._answer = self._answer, None
        return answer

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
        data, settings = self._data, self._data.settings
        type_info = next(t for t in self._types if t.key == draft.type)
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
                    model_timeout_seconds=settings.model_timeout_seconds,
                    model_max_attempts=settings.model_max_attempts,
                    max_output_tokens=settings.max_output_tokens,
                ),
                id=ids.child_workflow_id(workflow.info().workflow_id, round_, ordinal),
                static_summary=f"round {round_} · subtask {ordinal} · {draft.type}",
            )
        except ChildWorkflowError as error:
            failure = describe(error)
            reason = f"the subtask's workflow failed ({failure.kind}): {failure.message}"
            await self._store_call(
                SessionActivities.record_branch,
                RecordBranchInput(
                    task_id=data.task_id,
                    session_id=data.session_id,
                    round=round_,
                    ordinal=ordinal,
                    thread_id=ids.child_workflow_id(workflow.info().workflow_id, round_, ordinal),
                    draft=draft,
                    status="failed",
                    error=reason,
                ),
            )
            return BranchOutcome(ordinal=ordinal, type=draft.type, status="failed", error=reason)
        self._ledger.merge("branches", result.usage)
        return BranchOutcome(
            ordinal=ordinal, type=draft.type, status=result.status, error=result.error
        )

    # -- endings ----------------------------------------------------------------------------

    async def _give_up(self, failure: Failure) -> None:
        """No model can answer: deliver completed branches if any, else fail with the kind."""
        data = self._data
        joined = await self._store_call(
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
        self._search.publish(state=status, round_=self._round)

    async def _store_call(self, method: Any, arg: Any) -> Any:
        return await workflow.execute_activity_method(
            method, arg, start_to_close_timeout=STORE_TIMEOUT, retry_policy=STORE_RETRY
        )


def _repair_exchange(call_id: str, rejection: Rejection) -> list[Message]:
    """The rejected call and its error, as a real tool exchange the model knows how to read."""
    return [
        Message(
            role="assistant",
            tool_calls=[
                ToolCall(id=call_id, name=rejection.call.name, arguments=rejection.call.arguments)
            ],
        ),
        Message(
            role="tool",
            tool_call_id=call_id,
            tool_name=rejection.call.name,
            is_error=True,
            text=prompts.repair_result(rejection.error, rejection.call.name),
        ),
    ]


def _failure_signature(outcomes: list[BranchOutcome]) -> str:
    """Non-empty when every branch failed, and equal between rounds that failed the same way."""
    if not outcomes or any(o.status == "completed" for o in outcomes):
        return ""
    return "|".join(sorted({o.error or "" for o in outcomes}))
