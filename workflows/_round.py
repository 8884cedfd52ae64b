"""One round's decision (SPEC §1): the primary and fallback slots, the repair ladder, the step
budget, and the tools a step may call on the way (``ask_user``, ``advisor``).

The decider says what happened and leaves the acting to the task: a decision, a failure, or
``Waiting`` for the user, with the slot to hand back (with the answer) to carry on. Deterministic
code; every model call and store access is an activity. The slot's own messages (repairs,
question and advisor exchanges) live only in the slot and in activity inputs, never in the
session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from activities import ModelActivities, SessionActivities
    from errands.agent import prompts
    from errands.agent.advisor import ADVISOR_TOOL
    from errands.agent.asking import (
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
    from errands.agent.control import (
        ASK_USER,
        DELEGATE,
        FINAL_REPLY,
        Rejection,
        parse_delegate,
        parse_final_reply,
        pick_control_call,
    )
    from errands.agent.reading import READ_MESSAGE
    from errands.contracts import ids
    from errands.contracts.activities import (
        ReadMessageInput,
        RememberInput,
        RoundStepInput,
        RunRoundToolInput,
        SessionRef,
    )
    from errands.contracts.approvals import ApprovalNeed
    from errands.contracts.asking import Answer, QuestionSet
    from errands.contracts.messages import ToolCall
    from errands.contracts.subtasks import DelegateDecision, ReplyDecision, RoundDecision
    from errands.contracts.workflows import Slot, TaskInput, TaskState, model_queue
    from errands.errors import ModelMistake
    from workflows._advisor import consult_advisor
    from workflows._failures import Failure, describe, settled
    from workflows._log import log_event
    from workflows._options import model_retry, store_call, tool_retry
    from workflows._patches import RunPatches
    from workflows._repairs import (
        Narration,
        append_exchange,
        cut_off,
        narration_exchange,
        repair_exchange,
    )

NARRATION_REPAIRED = "narration-repaired-on-slot"
"""Patch: a step in prose (or empty) on the last slot that could take the round is repaired on
that slot, like a rejected call, instead of ending the round. Runs from before fail the round."""

READ_MESSAGE_TOOL = "read-message-work-tool"
"""Patch: a round's ``read_message`` call shows the stored output it names. Runs from before
refused it as an unknown tool."""

OUTPUT_LIMIT_REPAIRED = "output-limit-is-its-own-repair"
"""Patch: a tool call the output-token limit cut off is rejected as such, whatever its tool,
instead of being read as if complete. Runs from before read it."""

CUT_OFF = frozenset({"length", "max_tokens"})
"""The finish reasons (OpenAI, Anthropic) of a response the output-token limit ended."""


@dataclass
class Trail:
    """What the round's earlier attempts left: their diagnostics, and whether any failed as
    transient. Held in memory only: a run that picks up a waiting slot starts a fresh one."""

    diagnostics: list[str] = field(default_factory=list)
    any_transient: bool = False


@dataclass(frozen=True)
class Waiting:
    """The round waits for the user. Hand it back to ``RoundDecider.resume`` with the answer;
    ``slot`` is what continue-as-new carries meanwhile."""

    slot: Slot
    trail: Trail = field(default_factory=Trail)

    @property
    def call(self) -> ToolCall:
        assert self.slot.call is not None, "a waiting slot holds its ask_user call"
        return self.slot.call

    @property
    def questions(self) -> QuestionSet:
        assert self.slot.questions is not None, "a waiting slot holds its questions"
        return self.slot.questions

    @property
    def deadline(self) -> datetime:
        assert self.slot.deadline is not None, "a waiting slot holds its deadline"
        return self.slot.deadline


RoundOutcome = ReplyDecision | DelegateDecision | Failure | Waiting
Attempt = RoundDecision | Rejection | Failure | Waiting | Narration


Approver = Callable[[ApprovalNeed, int], Awaitable[str | None]]
"""Puts one of the main agent's tool calls (and the step it is in) to the user: None when
approved, else the text the model reads instead of the tool's result."""


class RoundDecider:
    """Decides a task's rounds. It is given the task's input and the state whose counters it
    charges (steps, ledger, advisor uses, asks, the latest round request), never the workflow."""

    def __init__(
        self,
        data: TaskInput,
        state: TaskState,
        approve: Approver | None = None,
        patches: RunPatches | None = None,
    ) -> None:
        self._data = data
        self._state = state
        self._approve = approve
        self._patches = patches or RunPatches.none()
        self._models = [data.model] + ([data.fallback_model] if data.fallback_model else [])

    async def decide(self, round_: int, upto: int, final_reason: str | None) -> RoundOutcome:
        slot = Slot(round=round_, upto=upto, final_reason=final_reason)
        return await self._ladder(slot, Trail(), None)

    async def resume(self, waiting: Waiting, answer: Answer | None) -> RoundOutcome:
        """Carry on a waiting slot with the user's answer (None: nobody answered in time): the
        answer becomes the call's tool result, then the attempt steps on."""
        slot, call, questions = waiting.slot, waiting.call, waiting.questions
        slot.call, slot.questions, slot.deadline = None, None, None
        dismissed = await self._record_answer(slot, call, questions, answer)
        if dismissed:
            # One last step, and the round ends with a short reply.
            slot.reason, slot.steps_left = prompts.DISMISSED_REASON, 1
        result = await self._steps(slot, dismissed=dismissed)
        return await self._ladder(slot, waiting.trail, result)

    async def _ladder(self, slot: Slot, trail: Trail, result: Attempt | None) -> RoundOutcome:
        """The repair ladder on each slot in turn, from ``slot`` on. ``result`` is the attempt a
        resumed slot has just finished; otherwise each rung makes an attempt of its own."""
        data, settings, state = self._data, self._data.settings, self._state
        while True:
            model = self._models[slot.slot_index]
            while slot.repair <= settings.max_repairs:
                if result is None:
                    if state.steps > settings.step_budget:
                        # One step past the allowance is the most a round may take.
                        trail.diagnostics.append(f"{slot.name} ({model}): the step budget is spent")
                        break
                    result = await self._attempt(slot)
                outcome, result = result, None
                if isinstance(outcome, Waiting):
                    return Waiting(slot, trail)
                if isinstance(outcome, (ReplyDecision, DelegateDecision)):
                    return outcome
                if isinstance(outcome, Failure):
                    if outcome.non_recoverable:
                        return outcome
                    trail.any_transient = trail.any_transient or outcome.transient
                    trail.diagnostics.append(f"{slot.name} ({model}): {outcome.message}")
                    break
                if isinstance(outcome, Narration):
                    attempt = f", attempt {slot.repair + 1}" if slot.repair else ""
                    trail.diagnostics.append(f"{slot.name} ({model}{attempt}): {outcome.message}")
                    if slot.slot_index + 1 < len(self._models):
                        break  # another slot takes the round over first (SPEC §1)
                    repair = narration_exchange(outcome)
                else:
                    trail.diagnostics.append(
                        f"{slot.name} ({model}, attempt {slot.repair + 1}): {outcome.error}"
                    )
                    call_id = ids.repair_call_id(data.task_id, slot.round, slot.name, slot.repair)
                    repair = repair_exchange(call_id, outcome)
                if slot.repair == settings.max_repairs or state.steps >= settings.step_budget:
                    break
                if isinstance(outcome, Narration) and not workflow.patched(NARRATION_REPAIRED):
                    break
                slot.extra = slot.extra + repair
                slot.repair += 1
            if slot.slot_index + 1 == len(self._models):
                break
            slot = Slot(
                round=slot.round,
                upto=slot.upto,
                final_reason=slot.final_reason,
                slot_index=slot.slot_index + 1,
            )
        if trail.any_transient:
            return Failure("transient", "; ".join(trail.diagnostics))
        return Failure(
            "exhausted",
            f"round {slot.round} found no usable decision: " + "; ".join(trail.diagnostics),
        )

    async def _attempt(self, slot: Slot) -> Attempt:
        """A fresh try on the slot's model, with the steps the budget leaves it."""
        slot.reason = slot.final_reason
        slot.steps_left = (
            1 if slot.reason else max(1, self._data.settings.step_budget - self._state.steps)
        )
        return await self._steps(slot, dismissed=False)

    async def _steps(self, slot: Slot, *, dismissed: bool) -> Attempt:
        """Steps until a control call ends the round, a question waits for the user, or the
        steps run out. Every step is charged to the budget, failed ones included."""
        data, settings, state = self._data, self._data.settings, self._state
        model = self._models[slot.slot_index]
        while slot.steps_left > 0:
            slot.steps_left -= 1
            # Messages the user sent meanwhile are in the session: the step shows them.
            delivers = [m.message_id for m in state.steers if slot.upto < m.seq]
            slot.upto = max([slot.upto, *(m.seq for m in state.steers)])
            state.seen_upto = max(state.seen_upto, slot.upto)
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
                model=model,
                step=state.steps,
                delivers=delivers,
                final_reason=slot.reason,
                work_tools=follow_up,
                # Withdrawn once its uses are spent: refused calls would only burn steps.
                advisor=state.advisor_uses < settings.advisor_limit,
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
                    heartbeat_timeout=timedelta(seconds=settings.heartbeat_timeout_seconds),
                    task_queue=model_queue(settings.model_task_queue, model),
                    retry_policy=model_retry(settings.model_max_attempts),
                    summary=f"round {slot.round} · {slot.name} · {model}"
                    + (" · final" if final else ""),
                )
            except ActivityError as error:
                failure = describe(error, settings.model_max_attempts)
                state.ledger.charge(
                    "rounds", model, calls=failure.attempts, failed_calls=failure.attempts
                )
                if dismissed:
                    return ReplyDecision(text=prompts.DISMISSED_REPLY)
                return failure
            response = out.response
            state.ledger.charge(
                "rounds",
                model,
                response.usage,
                calls=out.attempt,
                failed_calls=out.attempt - 1,
            )
            if out.compaction is not None:
                state.ledger.merge("compaction", {model: out.compaction})
            if out.view is not None:
                # Pinned: the round's side questions and advisor render what its model saw.
                step = step.model_copy(update={"view": out.view})
                state.last_round = step
            step_tools = set(out.work_tools) if follow_up else set()
            work = {ADVISOR_TOOL, READ_MESSAGE, *step_tools} if follow_up else set()
            decision = self._read_step(response.tool_calls, offered, work, out.catalog_size)
            if (
                isinstance(decision, ToolCall)
                and decision.name == READ_MESSAGE
                and not workflow.patched(READ_MESSAGE_TOOL)
            ):
                # Runs from before knew no such tool: the call is refused, as it was then.
                work.discard(READ_MESSAGE)
                decision = self._read_step(response.tool_calls, offered, work, out.catalog_size)
            if (
                response.tool_calls
                and response.finish_reason in CUT_OFF
                and workflow.patched(OUTPUT_LIMIT_REPAIRED)
            ):
                decision = cut_off(response.tool_calls[-1], settings.max_output_tokens)
            if dismissed:
                # The user declined to choose: whatever the model does now, the round ends with
                # a short reply and nothing is started.
                if isinstance(decision, ReplyDecision):
                    return decision
                return ReplyDecision(text=prompts.DISMISSED_REPLY)
            if isinstance(decision, ToolCall) and decision.name == ADVISOR_TOOL:
                result = await consult_advisor(data, state, step, decision)
                append_exchange(slot, decision, ADVISOR_TOOL, result)
                continue
            if isinstance(decision, ToolCall) and decision.name == READ_MESSAGE:
                # The page is stored and read back by the next step: never through history.
                result_id = ids.read_result_id(
                    data.task_id, slot.round, slot.name, state.steps, decision.arguments
                )
                is_error = await store_call(
                    SessionActivities.read_message,
                    ReadMessageInput(
                        session_id=data.session_id,
                        task_id=data.task_id,
                        arguments=decision.arguments,
                        result_id=result_id,
                    ),
                )
                append_exchange(slot, decision, READ_MESSAGE, "", stored=result_id)
                slot.extra[-1].is_error = is_error
                continue
            if isinstance(decision, ToolCall) and decision.name in step_tools:
                calls = {i: c for i, c in enumerate(response.tool_calls) if c.name in step_tools}
                await self._run_tools(slot, calls, [n for n in out.approvals if n.index in calls])
                continue
            if isinstance(decision, ToolCall):
                asked = await self._ask(slot, decision)
                if asked is not None:
                    return asked
                continue
            if isinstance(decision, ReplyDecision) and self._steered_since(slot.upto):
                # Written without the message the user sent meanwhile: never stored; the agent
                # decides again with it in front of it.
                slot.steps_left = max(slot.steps_left, 1)
                continue
            if decision is not None:
                return decision
            return Narration(text=response.text, finish_reason=response.finish_reason)
        return Failure("no_decision", "the attempt ran out of steps without a control call")

    def _steered_since(self, upto: int) -> bool:
        """Whether the user sent a message the step that rendered up to ``upto`` did not show."""
        return any(m.seq > upto for m in self._state.steers)

    def _read_step(
        self, calls: list[ToolCall], offered: set[str], work: set[str], catalog_size: int
    ) -> RoundDecision | Rejection | ToolCall | None:
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
        except ModelMistake as error:
            # A repeated final_reply is judged by its last call, everything else by its first.
            subject = chosen[-1] if name == FINAL_REPLY else chosen[0]
            return Rejection(call=subject, error=str(error))

    # -- MCP tools --------------------------------------------------------------------------

    async def _run_tools(
        self, slot: Slot, by_index: dict[int, ToolCall], needs: list[ApprovalNeed]
    ) -> None:
        """A step's MCP calls (by their place among the step's calls), those that need it
        approved by the user first, then all at once. Each result is stored and reaches the
        next step by reference; a call whose every attempt failed (its worker kept dying) is
        told to the model as an error."""
        data, settings, step = self._data, self._data.settings, self._state.steps
        verdicts: dict[int, str | None] = {}
        for need in needs:
            assert self._approve is not None, "a task that offers such tools can approve them"
            verdicts[need.index] = await self._approve(need, step)
        calls = list(by_index.values())
        result_ids = [
            ids.round_tool_result_id(
                data.task_id, slot.round, slot.name, step, i, f"{call.name}:{call.arguments}"
            )
            for i, call in enumerate(calls)
        ]
        verdict_of = [verdicts.get(i) for i in by_index]
        outcomes = await asyncio.gather(
            *(
                workflow.execute_activity_method(
                    ModelActivities.run_round_tool,
                    RunRoundToolInput(
                        task_id=data.task_id,
                        result_id=result_id,
                        call=call,
                        timeout_seconds=settings.tool_timeout_seconds,
                        max_attempts=settings.tool_max_attempts,
                        verdict=verdict,
                        approved=index in verdicts and verdict is None,
                    ),
                    start_to_close_timeout=timedelta(seconds=settings.tool_timeout_seconds + 30),
                    heartbeat_timeout=timedelta(seconds=settings.heartbeat_timeout_seconds),
                    retry_policy=tool_retry(settings.tool_max_attempts),
                    # A cancelled task waits for the call to store its cancelled result.
                    cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                    summary=f"round {slot.round} · {slot.name} · {call.name}",
                )
                for index, call, result_id, verdict in zip(
                    by_index, calls, result_ids, verdict_of, strict=True
                )
            ),
            return_exceptions=True,
        )
        for call, result_id, outcome in zip(calls, result_ids, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, ActivityError):
                    raise outcome
                failure = describe(outcome, settings.tool_max_attempts)  # a cancel raises
                tries = "attempt" if failure.attempts == 1 else "attempts"
                detail = f"{failure.attempts} {tries} failed: {settled(failure.message)}"
                append_exchange(slot, call, call.name, prompts.tool_failed(call.name, detail))
                slot.extra[-1].is_error = True
                continue
            append_exchange(slot, call, call.name, "", stored=result_id)
            slot.extra[-1].is_error = not outcome.ok

    # -- ask_user ---------------------------------------------------------------------------

    async def _ask(self, slot: Slot, call: ToolCall) -> Rejection | Waiting | None:
        """Put a question to the user (the slot then waits), or answer it from memory or
        headlessly and carry on (None). A bad call comes back to be repaired. Every exchange
        goes to the slot's messages, never to the session."""
        data = self._data
        self._state.asks += 1
        try:
            questions = parse_ask_user(call, set_id=f"{data.task_id}-q{self._state.asks}")
            decisions = await store_call(
                SessionActivities.recall_decisions, SessionRef(session_id=data.session_id)
            )
            check_citation(questions, decisions)
        except ModelMistake as error:
            return Rejection(call=call, error=str(error))
        remembered = None if questions.reopens else find_remembered(questions, decisions)
        if remembered is not None:
            append_exchange(slot, call, ASK_USER, remembered_result(remembered))
            return None
        if data.headless:
            append_exchange(slot, call, ASK_USER, headless_result(questions))
            return None
        slot.call, slot.questions = call, questions
        slot.deadline = workflow.now() + timedelta(hours=data.settings.ask_timeout_hours)
        if self._patches.questions_logged:
            await log_event(
                data.task_id,
                f"{questions.id}:asked",
                "question_asked",
                questions.id,
                round=slot.round,
                question_set_id=questions.id,
                headers=[q.header for q in questions.questions],
            )
        return Waiting(slot)

    async def _record_answer(
        self, slot: Slot, call: ToolCall, questions: QuestionSet, answer: Answer | None
    ) -> bool:
        """Remember an accepted decision and give the model what the user said; True when the
        user dismissed the question (chose nothing at all)."""
        data = self._data
        if self._patches.questions_logged:
            await log_event(
                data.task_id,
                f"{questions.id}:answered",
                "question_answered",
                questions.id,
                round=slot.round,
                question_set_id=questions.id,
                status="timed_out" if answer is None else answer.status,
            )
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
        append_exchange(slot, call, ASK_USER, result)
        return answer is not None and answer.status == "answered" and is_dismissal(answer)
