"""One round's decision (SPEC §1): the primary and fallback slots, the repair ladder, the step
budget, and the tools a step may call on the way (``ask_user``, ``advisor``).

The decider says what happened and leaves the acting to the task: a decision, a failure, or
``Waiting`` for the user, with the slot to hand back (with the answer) to carry on. Deterministic
code; every model call and store access is an activity. The slot's own messages (repairs,
question and advisor exchanges) live only in the slot and in activity inputs, never in the
session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities import ModelActivities, SessionActivities
    from errands.agent import prompts
    from errands.agent.advisor import ADVISOR_TOOL
    from errands.agent.control import Rejection
    from errands.agent.reading import READ_MESSAGE
    from errands.agent.steps import Offer, Reading, Rules, read_step, types_digest
    from errands.contracts import ids
    from errands.contracts.activities import ReadMessageInput
    from errands.contracts.asking import Answer, QuestionSet
    from errands.contracts.messages import ModelResponse, ToolCall
    from errands.contracts.rounds import (
        OpenTaskInput,
        PrepareRoundInput,
        RoundState,
        RoundStepInput,
        RoundStepOutput,
        StepWrites,
        StoredDecision,
    )
    from errands.contracts.subtasks import DelegateDecision, ReplyDecision, RoundDecision
    from errands.contracts.workflows import Slot, TaskInput, TaskState, model_queue
    from workflows._advisor import consult_advisor
    from workflows._asking import ask, record_answer
    from workflows._failures import Failure, describe
    from workflows._options import model_step, store_call
    from workflows._repairs import Narration, append_exchange, narration_exchange, repair_exchange
    from workflows._round_tools import Approver, run_round_tools
    from workflows._sessions import SessionHolders


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


RoundOutcome = ReplyDecision | DelegateDecision | Failure | Waiting | RoundState
"""``RoundState``: a step found the round settled already (its reply or acknowledgement)."""
Attempt = RoundDecision | Rejection | Failure | Waiting | Narration | RoundState


class RoundDecider:
    """Decides a task's rounds. It is given the task's input and the state whose counters it
    charges (steps, ledger, advisor uses, asks, the latest round request), never the workflow."""

    def __init__(
        self,
        data: TaskInput,
        state: TaskState,
        approve: Approver | None = None,
        *,
        writes: bool = False,
    ) -> None:
        self._data = data
        self._state = state
        self._approve = approve
        self._writes = writes
        """Whether the deciding step writes the acknowledgement or the reply (a run since
        0.3.0: ``RunPatches.records_on_steps``)."""
        self._models = [data.model] + ([data.fallback_model] if data.fallback_model else [])
        self.opening: OpenTaskInput | None = None
        """A new task's opening, which its first step carries (until one succeeds)."""
        self._prepares: PrepareRoundInput | None = None
        self.stored: StoredDecision | None = None
        """What the latest step wrote of its decision: the task need not write it again."""

    async def decide(
        self,
        round_: int,
        upto_seq: int,
        final_reason: str | None,
        prepares: PrepareRoundInput | None = None,
    ) -> RoundOutcome:
        """``prepares``: the round's first step prepares it (``upto_seq`` is then where the task
        last knew the session to end; the step renders up to where it does)."""
        self._prepares = prepares
        slot = Slot(round=round_, upto_seq=upto_seq, final_reason=final_reason)
        return await self._ladder(slot, Trail(), None)

    async def resume(self, waiting: Waiting, answer: Answer | None) -> RoundOutcome:
        """Carry on a waiting slot with the user's answer (None: nobody answered in time): the
        answer becomes the call's tool result, then the attempt steps on."""
        slot, call, questions = waiting.slot, waiting.call, waiting.questions
        slot.call, slot.questions, slot.deadline = None, None, None
        dismissed = await record_answer(self._data, slot, call, questions, answer)
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
                if isinstance(outcome, (ReplyDecision, DelegateDecision, RoundState)):
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
                slot.extra = slot.extra + repair
                slot.repair += 1
            if slot.slot_index + 1 == len(self._models):
                break
            slot = Slot(
                round=slot.round,
                upto_seq=slot.upto_seq,
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
        while slot.steps_left > 0:
            slot.steps_left -= 1
            stepped = await self._step(slot, writes=self._writes and not dismissed)
            if isinstance(stepped, Failure):
                return ReplyDecision(text=prompts.DISMISSED_REPLY) if dismissed else stepped
            step, out = stepped
            if out.settled:
                assert out.prepared is not None, "a settled step reports what it found"
                return out.prepared
            decision = self._decision(step, out)
            if dismissed:
                # The user declined to choose: whatever the model does now, the round ends with
                # a short reply and nothing is started.
                if isinstance(decision, ReplyDecision):
                    return decision
                return ReplyDecision(text=prompts.DISMISSED_REPLY)
            ended = await self._act(slot, step, out, decision)
            if ended is not None:
                return ended
        return Failure("no_decision", "the attempt ran out of steps without a control call")

    async def _step(
        self, slot: Slot, *, writes: bool
    ) -> tuple[RoundStepInput, RoundStepOutput] | Failure:
        """One model step of the slot, charged to the budget and the ledger."""
        settings, state = self._data.settings, self._state
        model = self._models[slot.slot_index]
        step = self._next_step(slot, model, writes=writes)
        state.last_round = step
        self.stored = None
        try:
            out = await model_step(
                ModelActivities.round_step,
                step,
                timeout_seconds=settings.model_timeout_seconds,
                heartbeat_seconds=settings.heartbeat_timeout_seconds,
                max_attempts=settings.model_max_attempts,
                task_queue=model_queue(settings.model_task_queue, model),
                summary=f"round {slot.round} · {slot.name} · {model}"
                + (" · final" if step.final_reason is not None else ""),
            )
        except ActivityError as error:
            state.last_round = _unprepared(step)
            failure = describe(error, settings.model_max_attempts)
            state.ledger.charge(
                "rounds", model, calls=failure.attempts, failed_calls=failure.attempts
            )
            return failure
        response = out.response
        lost = out.attempt - 1  # earlier attempts: failed, or their results died with them
        calls = lost if out.settled else out.attempt  # a settled step asked no model
        # ...but the earlier attempt whose writes it found did, and what it spent was read back.
        answered = (
            out.settled and lost > 0 and out.prepared is not None and out.prepared.spent is not None
        )
        failed = lost - 1 if answered else lost
        state.ledger.charge("rounds", model, response.usage, calls=calls, failed_calls=failed)
        if step.opens is not None or step.prepares is not None:
            step = self._prepared(slot, step, out)
            state.last_round = step
        self.stored = out.stored
        if out.compaction is not None:
            state.ledger.merge("compaction", {model: out.compaction})
        if out.view is not None:
            # Pinned: the round's side questions and advisor render what its model saw.
            step = step.model_copy(update={"view": out.view})
            state.last_round = step
        return step, out

    def _next_step(self, slot: Slot, model: str, *, writes: bool) -> RoundStepInput:
        """The request of the slot's next step, which shows the messages the user sent
        meanwhile (they are in the session); the step is counted here. ``writes``: the step
        writes the decision it makes (the acknowledgement or the reply)."""
        data, settings, state = self._data, self._data.settings, self._state
        opens = self.opening
        prepares = None if opens is not None else self._prepares
        delivers = [m.message_id for m in state.steers if slot.upto_seq < m.seq]
        slot.upto_seq = max([slot.upto_seq, *(m.seq for m in state.steers)])
        state.seen_upto_seq = max(state.seen_upto_seq, slot.upto_seq)
        state.steps += 1
        return RoundStepInput(
            task_id=data.task_id,
            session_id=data.session_id,
            round=slot.round,
            upto_seq=slot.upto_seq,
            slot=slot.name,
            model=model,
            step=state.steps,
            delivers=delivers,
            final_reason=slot.reason,
            # ask_user and work tools need a step after them, so the last step has neither.
            work_tools=slot.reason is None and slot.steps_left > 0,
            # Withdrawn once its uses are spent: refused calls would only burn steps.
            advisor=state.advisor_uses < settings.advisor_limit,
            extra=list(slot.extra),
            max_subtasks=settings.max_subtasks,
            max_output_tokens=settings.max_output_tokens,
            opens=opens,
            prepares=prepares,
            writes=self._step_writes(opens) if writes else None,
        )

    def _step_writes(self, opens: OpenTaskInput | None) -> StepWrites:
        """A step that opens the task writes with the types it records; any other, with the
        types the task recorded."""
        return StepWrites(
            types_digest=None if opens is not None else types_digest(self._state.types),
            workflow_id=workflow.info().workflow_id,
        )

    def _prepared(self, slot: Slot, step: RoundStepInput, out: RoundStepOutput) -> RoundStepInput:
        """Take in what a step that opened the task or prepared the round found, as the step
        itself did (``activities._rounds.RoundRecords.before_step``): the types, the position
        it rendered up to, and a quota that made the round final. Returns the step as it ran."""
        state = self._state
        if step.opens is not None:
            self.opening, state.unopened = None, False
        self._prepares = None
        if out.types is not None:
            state.types = out.types
        prepared = out.prepared
        if prepared is None or out.settled:
            return _unprepared(step)
        slot.upto_seq = max(slot.upto_seq, prepared.upto_seq)
        state.seen_upto_seq = max(state.seen_upto_seq, slot.upto_seq)
        if prepared.over_quota is not None:
            slot.final_reason = slot.reason = prepared.over_quota
            slot.steps_left = 0  # the step that ran was the round's one final step
        final = {"work_tools": False} if slot.reason is not None else {}
        update = {"upto_seq": slot.upto_seq, "final_reason": slot.reason, **final}
        return _unprepared(step.model_copy(update=update))

    def _decision(self, step: RoundStepInput, out: RoundStepOutput) -> Reading:
        """What the step's calls amount to, with the tools it was offered."""
        response, settings = out.response, self._data.settings
        offer = Offer(
            final=step.final_reason is not None,
            follow_up=step.work_tools,
            work_tools=tuple(out.work_tools),
        )
        rules = Rules(self._state.types, settings.max_subtasks, settings.max_output_tokens)
        return read_step(response, offer, rules, out.catalog_size)

    async def _act(
        self, slot: Slot, step: RoundStepInput, out: RoundStepOutput, decision: Reading
    ) -> Attempt | None:
        """Carry out what the step decided; None when the slot steps on."""
        step_tools = set(out.work_tools) if step.work_tools else set()
        if isinstance(decision, ToolCall):
            if decision.name == ADVISOR_TOOL:
                await self._advise(slot, step, decision)
            elif decision.name == READ_MESSAGE:
                await self._read(slot, decision)
            elif decision.name in step_tools:
                await self._run_tools(slot, out, step_tools)
            else:
                return await self._ask(slot, decision)
            return None
        if (
            isinstance(decision, ReplyDecision)
            and self.stored is None  # a reply the step stored stands: later messages wait
            and self._steered_since(slot.upto_seq)
        ):
            self._steer(slot)
            return None
        if decision is not None:
            return decision
        return self._narration(out.response)

    # -- one method per outcome of a step ---------------------------------------------------

    async def _advise(self, slot: Slot, step: RoundStepInput, call: ToolCall) -> None:
        result = await consult_advisor(self._data, self._state, step, call)
        append_exchange(slot, call, ADVISOR_TOOL, result)

    async def _read(self, slot: Slot, call: ToolCall) -> None:
        """A ``read_message`` call: the page is stored and read back by the next step, never
        through history."""
        data = self._data
        result_id = ids.read_result_id(
            data.task_id, slot.round, slot.name, self._state.steps, call.arguments
        )
        read = await store_call(
            SessionActivities.read_message,
            ReadMessageInput(
                session_id=data.session_id,
                task_id=data.task_id,
                arguments=call.arguments,
                result_id=result_id,
            ),
        )
        append_exchange(slot, call, READ_MESSAGE, "", stored=result_id)
        slot.extra[-1].is_error = read.is_error

    async def _run_tools(self, slot: Slot, out: RoundStepOutput, step_tools: set[str]) -> None:
        calls = {i: c for i, c in enumerate(out.response.tool_calls) if c.name in step_tools}
        needs = [n for n in out.approvals if n.index in calls]
        holders = SessionHolders(self._state.mcp_holders)
        await run_round_tools(
            self._data, slot, self._state.steps, calls, needs, self._approve, holders, out.servers
        )

    async def _ask(self, slot: Slot, call: ToolCall) -> Rejection | Waiting | None:
        """Put a question to the user (the slot then waits), or carry on with it answered."""
        asked = await ask(self._data, self._state, slot, call)
        return Waiting(slot) if isinstance(asked, QuestionSet) else asked

    @staticmethod
    def _steer(slot: Slot) -> None:
        """A reply written without the message the user sent meanwhile: never stored; the
        agent decides again with it in front of it."""
        slot.steps_left = max(slot.steps_left, 1)

    @staticmethod
    def _narration(response: ModelResponse) -> Narration:
        """The step called nothing: prose (or nothing) where a control call was due."""
        return Narration(text=response.text, finish_reason=response.finish_reason)

    def _steered_since(self, upto_seq: int) -> bool:
        """Whether the user sent a message the step rendering up to ``upto_seq`` did not show."""
        return any(m.seq > upto_seq for m in self._state.steers)


def _unprepared(step: RoundStepInput) -> RoundStepInput:
    """The step as the round keeps it (``TaskState.last_round``, which side questions replay):
    as it ran, without the opening or preparation it carried (the user's text travels once)."""
    return step.model_copy(update={"opens": None, "prepares": None})
