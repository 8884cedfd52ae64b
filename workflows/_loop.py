"""A task's round loop (SPEC §1): prepare a round, decide it (waiting for the user as often as
the model asks), then reply, or acknowledge and run the round's branches and go again.

``RoundLoop`` acts on what the task shares with its handlers (``TaskState``, ``TaskStatus``, the
pending question and approvals); the handlers steer it through ``interrupted``. A run grown long
hands over to a fresh one, carrying only ``TaskState``; so does a run whose worker version is no
longer the current one, onto the new version (upgrade on continue-as-new): between rounds, or
at once while it waits on a question. A call waiting for approval stays until its verdict, and
running branches until they end: the run moves at the round boundary after them.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.workflow import ContinueAsNewVersioningBehavior

with workflow.unsafe.imports_passed_through():
    from activities import SessionActivities
    from errands.agent import approvals, prompts
    from errands.contracts import ids
    from errands.contracts.activities import JoinInput
    from errands.contracts.approvals import ApprovalNeed
    from errands.contracts.asking import Answer
    from errands.contracts.principals import Principal
    from errands.contracts.rounds import (
        AppendAckInput,
        AppendReplyInput,
        BranchOutcome,
        OpenTaskInput,
        PrepareRoundInput,
        RoundState,
        StoredDecision,
    )
    from errands.contracts.subtasks import DelegateDecision, ReplyDecision, RoundDecision
    from errands.contracts.workflows import TaskError, TaskInput, TaskState
    from workflows._approvals import PendingApprovals, log_answered, log_requested, request_for
    from workflows._branches import (
        failure_signature,
        record_failed_branch,
        run_branches,
        thread_id,
        to_start,
    )
    from workflows._failures import Failure, settled
    from workflows._notices import question_summary
    from workflows._options import run_is_long, store_call, target_version_changed
    from workflows._patches import RunPatches
    from workflows._round import RoundDecider, Waiting
    from workflows._status import TaskStatus
    from workflows._waiting import HandOver, PendingQuestion


def task_opening(data: TaskInput) -> OpenTaskInput:
    """What opening the task takes: its message, its owner, round 0 prepared with it."""
    return OpenTaskInput(
        task_id=data.task_id,
        session_id=data.session_id,
        text=data.text,
        prepare_first_round=True,
        owner=data.owner,
        owner_role=data.owner_role,
        queued_as=data.queued_as,
    )


class RoundLoop:
    """The rounds of one task, from the round its state is at until a reply or a failure."""

    def __init__(
        self,
        data: TaskInput,
        state: TaskState,
        status: TaskStatus,
        question: PendingQuestion,
        approvals: PendingApprovals,
    ) -> None:
        self._data, self._state, self._status = data, state, status
        self._question, self._approvals = question, approvals
        self._patches = RunPatches()
        self.first_round: RoundState | None = None
        """Round 0 as prepared by the call that opened the task."""
        self.interrupted = False
        """Set by a message that interrupts the round: its branches are cancelled."""
        self._rounds_this_run = 0
        self._over_quota: str | None = None
        """Why the owner may not spend more today, as the round's preparation found."""

    async def run(self, patches: RunPatches) -> None:
        self._patches = patches
        state = self._state
        decider = RoundDecider(
            self._data,
            state,
            self.approve,
            writes=patches.records_on_steps,
        )
        decider.opening = task_opening(self._data) if state.unopened else None
        while True:
            # A round that waited on the user when the previous run handed over goes on waiting.
            parked = Waiting(state.resume) if state.resume is not None else None
            state.resume = None
            if parked is None:
                await self._continue_as_new_if_due()
            self._status.set("running", f"round {state.round}: deciding")
            round_ = state.round
            state.rounds = max(state.rounds, round_ + 1)
            prepared = await self._prepare(round_, parked)
            self._over_quota = prepared.over_quota if prepared is not None else None
            if prepared is None or not prepared.settled:
                if parked is not None:
                    upto_seq = parked.slot.upto_seq
                elif prepared is not None:
                    upto_seq = prepared.upto_seq
                else:  # the round's first step finds where the session ends
                    upto_seq = state.seen_upto_seq
                prepares = self._preparing(round_) if prepared is None else None
                outcome = await self._decide(decider, round_, upto_seq, parked, prepares)
                upto_seq = max(upto_seq, state.seen_upto_seq)  # the messages its steps showed
                if isinstance(outcome, Failure):
                    if await self._retried_later(round_, outcome):
                        continue
                    await self._give_up(outcome)
                    return
                state.retries, self._status.last_error = 0, None
                if isinstance(outcome, ReplyDecision):
                    await self._reply_with(outcome, decider.stored)
                    return
                if isinstance(outcome, DelegateDecision):
                    await self._acknowledge(round_, upto_seq, outcome, decider.stored)
                    await self._run_branches(round_, upto_seq, outcome, {})
                    state.round += 1
                    continue
                prepared = outcome  # a step found the round settled
            if prepared.reply is not None:
                # A previous attempt already replied: return it, no inference.
                self._status.replied(prepared.reply, join_reason=prepared.join_reason)
                return
            # This round already delegated: reuse its acknowledgement, run what is missing.
            assert prepared.ack is not None, "a settled round without a reply has its ack"
            decision = DelegateDecision(reply=prepared.ack, subtasks=prepared.ack_subtasks)
            done = {b.ordinal: b for b in prepared.branches}
            upto_seq = prepared.ack_upto_seq or prepared.upto_seq
            await self._run_branches(round_, upto_seq, decision, done)
            state.round += 1

    async def _prepare(self, round_: int, parked: Waiting | None) -> RoundState | None:
        """What the store already holds for the round. Round 0 is usually prepared already, by
        the call that opened the task; since 0.3.0 a round's first step prepares it (None)."""
        prepared, self.first_round = self.first_round, None
        if prepared is not None:
            return prepared
        if self._patches.records_on_steps and parked is None:
            return None
        return await store_call(SessionActivities.prepare_round, self._preparing(round_))

    def _preparing(self, round_: int) -> PrepareRoundInput:
        data = self._data
        return PrepareRoundInput(
            task_id=data.task_id,
            session_id=data.session_id,
            round=round_,
            owner=data.owner,
            owner_role=data.owner_role,
        )

    async def _decide(
        self,
        decider: RoundDecider,
        round_: int,
        upto_seq: int,
        parked: Waiting | None,
        prepares: PrepareRoundInput | None,
    ) -> RoundDecision | Failure | RoundState:
        """The round's decision, waiting for the user as often as the model asks."""
        if parked is None:
            # Counted as it starts: a round that waits across runs is carried, not counted again.
            self._state.attempts += 1
        outcome = parked or await decider.decide(round_, upto_seq, self._final_reason(), prepares)
        while isinstance(outcome, Waiting):
            outcome = await decider.resume(outcome, await self._wait_for_answer(outcome))
        self._rounds_this_run += 1
        return outcome

    async def _retried_later(self, round_: int, failure: Failure) -> bool:
        """Whether a round that failed as transient waits (longer each time) and goes again."""
        settings, state = self._data.settings, self._state
        if not failure.transient or state.retries >= settings.round_retry_limit:
            return False
        wait = settings.round_retry_seconds * 2**state.retries
        # Shown by the status query while the round waits: no history event for it.
        self._status.last_error = TaskError(kind="transient", message=settled(failure.message))
        self._status.phase = (
            f"round {round_}: models unavailable, retry {state.retries + 1} of "
            f"{settings.round_retry_limit} in {wait:.0f} s"
        )
        await workflow.sleep(timedelta(seconds=wait))
        state.retries += 1
        return True

    def _final_reason(self) -> str | None:
        """Why this round must be the task's last (only ``final_reply`` is offered), or None."""
        if self._over_quota is not None:
            return self._over_quota
        settings, state = self._data.settings, self._state
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

    async def _acknowledge(
        self,
        round_: int,
        upto_seq: int,
        decision: DelegateDecision,
        stored: StoredDecision | None,
    ) -> None:
        """The acknowledgement the user sees while the branches run, written before any starts
        (by the step that delegated, since 0.3.0)."""
        if stored is not None and stored.kind == "ack":
            return
        data = self._data
        await store_call(
            SessionActivities.append_ack,
            AppendAckInput(
                task_id=data.task_id,
                session_id=data.session_id,
                round=round_,
                upto_seq=upto_seq,
                reply=decision.reply,
                subtasks=decision.subtasks,
                thread_ids=[thread_id(round_, k) for k in range(1, len(decision.subtasks) + 1)],
                view=self._state.last_round.view if self._state.last_round else None,
            ),
        )

    # -- branches ---------------------------------------------------------------------------

    async def _run_branches(
        self, round_: int, upto_seq: int, decision: DelegateDecision, done: dict[int, BranchOutcome]
    ) -> None:
        """Run the round's missing branches; rounds whose branches all fail the same way in a
        row make a streak, and a long streak makes the next round final."""
        state, todo = self._state, to_start(decision, done)
        self._status.phase = f"round {round_}: {len(todo)} subtasks running"
        branches = run_branches(self._data, state, round_, upto_seq, todo, done, self._branch_ended)
        self.interrupted = False
        running = asyncio.ensure_future(branches)
        try:
            await workflow.wait_condition(lambda: running.done() or self.interrupted)
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
        self._status.phase = f"round {round_}: interrupted by your message"
        running.cancel()
        try:
            await running
        except asyncio.CancelledError:
            pass
        await asyncio.gather(
            *(
                record_failed_branch(self._data, round_, ordinal, draft, prompts.INTERRUPTED)
                for ordinal, draft in enumerate(decision.subtasks, 1)
            )
        )
        self.interrupted = False

    def _branch_ended(self, thread_id: str) -> None:
        """A branch that ended (completed, failed or canceled) waits for no approval."""
        if self._approvals.drop_requested_by(thread_id):
            self.show_approvals()

    # -- waiting for the user ---------------------------------------------------------------

    def show_approvals(self) -> None:
        self._status.show_approvals(self._approvals.waiting, self._question.open)

    async def approve(self, need: ApprovalNeed, step: int) -> tuple[str | None, list[Principal]]:
        """Put one of the main agent's calls to the user and wait: None when approved, else
        the text the model reads; and who approved or denied it."""
        if need.refusal is not None:  # too large to show a person: nobody is asked
            return need.refusal, []
        task_id, hours = self._data.task_id, self._data.settings.ask_timeout_hours
        if self._data.headless:
            own = workflow.info().workflow_id
            await log_answered(task_id, ids.approval_id(own, step, need.index), "headless")
            return approvals.headless(need.tool), []
        request = request_for(need, step, "main", hours)
        try:
            await log_requested(task_id, request)
            self._approvals.add(request)
            self.show_approvals()
            verdict = await self._approvals.verdicts.wait(request, hours)
        except asyncio.CancelledError:
            await log_answered(task_id, request.approval_id, "cancelled")
            raise
        finally:  # answered, timed out or canceled: it waits no more
            self._approvals.drop(request.approval_id)
            self.show_approvals()
        if verdict is None:
            await log_answered(task_id, request.approval_id, "timed_out")
            return approvals.timed_out(need.tool, hours), []
        return verdict.denial, verdict.by

    async def _wait_for_answer(self, waiting: Waiting) -> Answer | None:
        """The user's answer, or None when the question expired first. A run grown too long
        meanwhile hands over to a fresh one, the question still pending."""
        round_ = waiting.slot.round
        self._status.set(
            "waiting_for_user",
            f"round {round_}: waiting for the user",
            key=f"question:{waiting.questions.id}",
            summary=question_summary(waiting.questions),
        )
        ended = await self._question.wait(waiting.questions, waiting.deadline, self._data.settings)
        if isinstance(ended, HandOver):
            self._state.resume = waiting.slot
            await self.continue_as_new()
        self._status.set("running", f"round {round_}: deciding")
        return ended

    # -- continue-as-new --------------------------------------------------------------------

    async def _continue_as_new_if_due(self) -> None:
        settings = self._data.settings
        per_run = settings.rounds_per_run
        due = per_run is not None and self._rounds_this_run >= per_run
        long = run_is_long(
            continue_as_new=settings.continue_as_new,
            max_history_events=settings.max_history_events,
        )
        # An upgrade is not a matter of history length: it happens with continue-as-new off.
        if long or (due and settings.continue_as_new) or target_version_changed():
            await self.continue_as_new()

    async def continue_as_new(self) -> NoReturn:
        """Hand over to a fresh run under the same workflow id: ids, counters, ledger and any
        pending question travel; the transcript never does. Handlers in flight finish first.

        The new run stays on this run's worker version, unless a newer one is current: then it
        starts there (auto-upgrade for its first workflow task) and is pinned there from then on.
        """
        await self._status.notifier.started()
        await workflow.wait_condition(workflow.all_handlers_finished)
        await self._status.notifier.started()  # any a handler asked for meanwhile
        self._state.runs += 1
        # Read after the handlers finished: the flag is the latest workflow task's.
        upgrade = ContinueAsNewVersioningBehavior.AUTO_UPGRADE if target_version_changed() else None
        workflow.continue_as_new(
            self._data.model_copy(update={"carry": self._state}),
            initial_versioning_behavior=upgrade,
        )

    # -- endings ----------------------------------------------------------------------------

    async def _reply_with(self, decision: ReplyDecision, stored: StoredDecision | None) -> None:
        """The reply, stored once (by the step that decided it, since 0.3.0)."""
        if stored is not None and stored.kind == "reply":
            self._status.replied(stored.text)
            return
        data = self._data
        written = await store_call(
            SessionActivities.append_reply,
            AppendReplyInput(task_id=data.task_id, session_id=data.session_id, text=decision.text),
        )
        self._status.replied(written.text)

    async def _give_up(self, failure: Failure) -> None:
        """No model can answer: deliver completed branches if any, else fail with the kind."""
        data, state = self._data, self._state
        message = settled(failure.message)
        if failure.transient and state.retries:
            times = "once" if state.retries == 1 else f"{state.retries} times"
            message = f"round {state.round} was retried {times} and failed each time: {message}"
        self._status.last_error = None
        joined = await store_call(
            SessionActivities.deterministic_join,
            JoinInput(task_id=data.task_id, session_id=data.session_id, reason=message),
        )
        # 0.1.0 recorded "nothing completed" as a bare null (out of the support window; still
        # read as None).
        text = joined.text if joined is not None else None
        if text is not None:
            workflow.logger.warning(
                "task %s replied by deterministic join: %s", data.task_id, message
            )
            self._status.replied(text, join_reason=message)
            return
        kind = "exhausted" if failure.kind == "no_decision" else failure.kind
        self._status.fail(kind, message)
