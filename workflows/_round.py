"""One round's decision (SPEC §1): the primary and fallback slots, the repair ladder, the step
budget, and the tools a step may call on the way (``ask_user``, ``advisor``).

Deterministic code; every model call and store access is an activity. The slot's own messages
(repairs, question and advisor exchanges) live only here and in activity inputs, never in the
session.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities import ConsultActivities, ModelActivities, SessionActivities
    from errands import ids, prompts
    from errands.activity_io import AdvisorInput, RememberInput, RoundStepInput, SessionRef
    from errands.advisor import ADVISOR_TOOL, error_result, limit_reached_result, parse_question
    from errands.asking import (
        QuestionSet,
        accepted_decision,
        check_citation,
        find_remembered,
        headless_result,
        is_dismissal,
        parse_ask_user,
        remembered_result,
        result_for_answer,
        timed_out_result,
    )
    from errands.contracts import Message, ToolCall
    from errands.control import (
        ASK_USER,
        DELEGATE,
        FINAL_REPLY,
        ControlCallError,
        Decision,
        DelegateDecision,
        Rejection,
        ReplyDecision,
        parse_delegate,
        parse_final_reply,
        pick_control_call,
    )
    from errands.workflow_io import SlotResume, TaskInput, TaskState
    from workflows._failures import Failure, describe
    from workflows._options import model_retry, store_call

if TYPE_CHECKING:
    from workflows._task import TaskWorkflow


@dataclass
class Slot:
    """Where an attempt stands: enough to resume it in a new run while a question waits."""

    round: int
    upto: int
    final_reason: str | None
    index: int
    name: str
    model: str
    repair: int = 0
    extra: list[Message] = field(default_factory=list)
    steps_left: int = 0
    reason: str | None = None


class RoundDecider:
    def __init__(self, task: TaskWorkflow) -> None:
        self._task = task

    @property
    def _data(self) -> TaskInput:
        return self._task.data

    @property
    def _state(self) -> TaskState:
        return self._task.state

    async def decide(
        self, round_: int, upto: int, final_reason: str | None, resume: SlotResume | None = None
    ) -> Decision | Failure:
        data, settings = self._data, self._data.settings
        models = [data.model] + ([data.fallback_model] if data.fallback_model else [])
        diagnostics: list[str] = []
        any_transient = False
        for index, model in enumerate(models):
            if resume is not None and index < resume.slot_index:
                continue
            slot = Slot(round_, upto, final_reason, index, ("primary", "fallback")[index], model)
            if resume is not None:
                slot.repair, slot.extra = resume.repair, list(resume.extra)
            while slot.repair <= settings.max_repairs:
                if resume is None and self._state.steps > settings.step_budget:
                    # One step past the allowance is the most a round may take.
                    diagnostics.append(f"{slot.name} ({model}): the step budget is spent")
                    break
                result = await self._attempt(slot, resume)
                resume = None
                if isinstance(result, (ReplyDecision, DelegateDecision)):
                    return result
                if isinstance(result, Failure):
                    if result.non_recoverable:
                        return result
                    any_transient = any_transient or result.transient
                    diagnostics.append(f"{slot.name} ({model}): {result.message}")
                    break
                diagnostics.append(
                    f"{slot.name} ({model}, attempt {slot.repair + 1}): {result.error}"
                )
                if slot.repair == settings.max_repairs or self._state.steps >= settings.step_budget:
                    break
                slot.extra = slot.extra + _repair_exchange(
                    ids.repair_call_id(data.task_id, round_, slot.name, slot.repair), result
                )
                slot.repair += 1
        if any_transient:
            return Failure("transient", "; ".join(diagnostics))
        return Failure(
            "exhausted", f"round {round_} found no usable decision: " + "; ".join(diagnostics)
        )

    async def _attempt(
        self, slot: Slot, resume: SlotResume | None
    ) -> Decision | Rejection | Failure:
        """One try on one model: steps until a control call ends the round or the steps run
        out. Every step is charged to the budget, failed ones included."""
        data, settings, state = self._data, self._data.settings, self._state
        slot.reason = slot.final_reason
        slot.steps_left = 1 if slot.reason else max(1, settings.step_budget - state.steps)
        dismissed = False
        if resume is not None:
            # The previous run was waiting on this question: wait on, then carry on stepping.
            slot.reason, slot.steps_left = resume.reason, resume.steps_left
            resumed = await self._answered(slot, resume.call, resume.questions, resume.deadline)
            dismissed = resumed == "dismissed"
            if dismissed:
                slot.reason, slot.steps_left = prompts.DISMISSED_REASON, 1
        while slot.steps_left > 0:
            slot.steps_left -= 1
            final = slot.reason is not None
            # ask_user and work tools need a step after them, so the last step has neither.
            follow_up = not final and slot.steps_left > 0
            offered = {FINAL_REPLY}
            if not final and state.types:
                offered.add(DELEGATE)
            if follow_up:
                offered.add(ASK_USER)
            state.steps += 1
            step = RoundStepInput(
                task_id=data.task_id,
                session_id=data.session_id,
                round=slot.round,
                upto_seq=slot.upto,
                slot=slot.name,
                model=slot.model,
                final_reason=slot.reason,
                work_tools=follow_up,
                extra=list(slot.extra),
                max_subtasks=settings.max_subtasks,
                max_output_tokens=settings.max_output_tokens,
            )
            state.last_round = step
            try:
                out = await workflow.execute_activity_method(
                    ModelActivities.round_step,
                    step,
                    start_to_close_timeout=timedelta(seconds=settings.model_timeout_seconds),
                    retry_policy=model_retry(settings.model_max_attempts),
                    summary=f"round {slot.round} · {slot.name} · {slot.model}"
                    + (" · final" if final else ""),
                )
            except ActivityError as error:
                failure = describe(error, settings.model_max_attempts)
                state.ledger.charge(
                    "rounds", slot.model, calls=failure.attempts, failed_calls=failure.attempts
                )
                if dismissed:
                    return ReplyDecision(text=prompts.DISMISSED_REPLY)
                return failure
            response = out.response
            state.ledger.charge(
                "rounds",
                slot.model,
                response.usage,
                calls=out.attempt,
                failed_calls=out.attempt - 1,
            )
            work = {ADVISOR_TOOL} if follow_up else set()
            decision = self._read_step(response.tool_calls, offered, work, out.catalog_size)
            if dismissed:
                # The user declined to choose: whatever the model does now, the round ends with
                # a short reply and nothing is started.
                if isinstance(decision, ReplyDecision):
                    return decision
                return ReplyDecision(text=prompts.DISMISSED_REPLY)
            if isinstance(decision, ToolCall) and decision.name == ADVISOR_TOOL:
                await self._consult(step, decision, slot)
                continue
            if isinstance(decision, ToolCall):
                outcome = await self._ask(slot, decision)
                if isinstance(outcome, Rejection):
                    return outcome
                if outcome == "dismissed":
                    dismissed, slot.reason, slot.steps_left = True, prompts.DISMISSED_REASON, 1
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
                types=self._state.types,
                max_subtasks=self._data.settings.max_subtasks,
            )
        except ControlCallError as error:
            # A repeated final_reply is judged by its last call, everything else by its first.
            subject = chosen[-1] if name == FINAL_REPLY else chosen[0]
            return Rejection(call=subject, error=str(error))

    # -- ask_user ---------------------------------------------------------------------------

    async def _ask(
        self, slot: Slot, call: ToolCall
    ) -> Rejection | Literal["dismissed", "answered"]:
        """Put a question to the user, or answer it from memory, and append the exchange to
        the slot's messages (never to the session). A bad call comes back to be repaired."""
        data = self._data
        self._state.asks += 1
        try:
            questions = parse_ask_user(call, set_id=f"{data.task_id}-q{self._state.asks}")
            decisions = await store_call(
                SessionActivities.recall_decisions, SessionRef(session_id=data.session_id)
            )
            check_citation(questions, decisions)
        except ControlCallError as error:
            return Rejection(call=call, error=str(error))
        remembered = None if questions.reopens else find_remembered(questions, decisions)
        if remembered is not None:
            _append_exchange(slot, call, ASK_USER, remembered_result(remembered))
            return "answered"
        if data.headless:
            _append_exchange(slot, call, ASK_USER, headless_result(questions))
            return "answered"
        deadline = workflow.now() + timedelta(hours=data.settings.ask_timeout_hours)
        return await self._answered(slot, call, questions, deadline)

    async def _answered(
        self, slot: Slot, call: ToolCall, questions: QuestionSet, deadline: datetime
    ) -> Literal["dismissed", "answered"]:
        """Wait for the user (durably, across runs), then record what the model reads."""
        data = self._data
        answer = await self._task.wait_for_answer(slot, call, questions, deadline)
        if answer is None:
            result = timed_out_result(data.settings.ask_timeout_hours)
        else:
            result = result_for_answer(questions, answer)
            accepted = accepted_decision(questions, answer)
            if accepted is not None:
                await store_call(
                    SessionActivities.remember_decision,
                    RememberInput(
                        session_id=data.session_id,
                        decision_id=accepted.decision_id,
                        record=accepted.model_dump(mode="json"),
                    ),
                )
        _append_exchange(slot, call, ASK_USER, result)
        dismissed = answer is not None and answer.status == "answered" and is_dismissal(answer)
        return "dismissed" if dismissed else "answered"

    # -- the advisor ------------------------------------------------------------------------

    async def _consult(self, step: RoundStepInput, call: ToolCall, slot: Slot) -> None:
        """Ask the advisor and append its result as the call's tool result. Over the limit no
        model is called; a failed or empty consultation does not use up the limit."""
        data, settings, state = self._data, self._data.settings, self._state
        model = data.advisor_model or data.model
        if state.advisor_uses >= settings.advisor_limit:
            result = limit_reached_result(model, limit=settings.advisor_limit)
        else:
            try:
                out = await workflow.execute_activity_method(
                    ConsultActivities.consult_advisor,
                    AdvisorInput(
                        round=step,
                        question=parse_question(call.arguments),
                        model=model,
                        uses=state.advisor_uses,
                        limit=settings.advisor_limit,
                    ),
                    start_to_close_timeout=timedelta(seconds=settings.model_timeout_seconds),
                    retry_policy=model_retry(settings.model_max_attempts),
                    summary=f"round {step.round} · advisor · {model}",
                )
            except ActivityError as error:
                failure = describe(error, settings.model_max_attempts)
                state.ledger.charge(
                    "advisor", model, calls=failure.attempts, failed_calls=failure.attempts
                )
                result = error_result(
                    model, failure.message, uses=state.advisor_uses, limit=settings.advisor_limit
                )
            else:
                state.ledger.charge(
                    "advisor", model, out.usage, calls=out.attempt, failed_calls=out.attempt - 1
                )
                result = out.result
                if result.type == "advice":
                    state.advisor_uses += 1
        # The JSON says whether it is an error, so the result shape stays parseable.
        _append_exchange(slot, call, ADVISOR_TOOL, result.to_tool_text())


def _append_exchange(slot: Slot, call: ToolCall, tool: str, result: str) -> None:
    call_id = ids.provider_safe(call.id) or f"{tool}_{len(slot.extra)}"
    slot.extra.append(
        Message(role="assistant", tool_calls=[call.model_copy(update={"id": call_id})])
    )
    slot.extra.append(Message(role="tool", tool_call_id=call_id, tool_name=tool, text=result))


REJECTED_ARGUMENTS_MAX = 16_000
"""A rejected call is shown back to the model at most this long: the slot's messages travel in
the next activity input, and a few huge rejected calls must not outgrow Temporal's payload cap."""


def _repair_exchange(call_id: str, rejection: Rejection) -> list[Message]:
    """The rejected call and its error, as a real tool exchange the model knows how to read."""
    arguments = rejection.call.arguments
    if len(arguments) > REJECTED_ARGUMENTS_MAX:
        arguments = json.dumps(
            {"omitted": f"{len(arguments)} characters of arguments, too long to repeat here"}
        )
    return [
        Message(
            role="assistant",
            tool_calls=[ToolCall(id=call_id, name=rejection.call.name, arguments=arguments)],
        ),
        Message(
            role="tool",
            tool_call_id=call_id,
            tool_name=rejection.call.name,
            is_error=True,
            text=prompts.repair_result(rejection.error, rejection.call.name),
        ),
    ]
