"""TaskWorkflow: one user request, worked in rounds until a reply (SPEC §1).

Each round one model decides: ``final_reply`` ends the task, ``delegate`` starts subtasks as
child workflows and the next round decides again with their results. The workflow passes ids,
positions and small decisions; the conversation stays in the session store.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from activities import ModelActivities, SessionActivities
    from errands import ids, prompts
    from errands.activity_io import (
        AppendAckInput,
        AppendReplyInput,
        BranchOutcome,
        JoinInput,
        OpenTaskInput,
        PrepareRoundInput,
        RecordBranchInput,
        RoundStepInput,
    )
    from errands.contracts import Message, ToolCall, UsageLedger
    from errands.control import (
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
        SubtaskInput,
        TaskError,
        TaskInput,
        TaskResult,
        TaskStatus,
    )
    from workflows._failures import Failure, describe
    from workflows._options import STORE_RETRY, STORE_TIMEOUT, model_retry
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
        )

    # -- the run ---------------------------------------------------------------------------

    @workflow.run
    async def run(self, data: TaskInput) -> TaskResult:
        self._input = data
        self._started = workflow.now()
        try:
            opened = await self._store_call(
                SessionActivities.open_task,
                OpenTaskInput(task_id=data.task_id, session_id=data.session_id, text=data.text),
            )
            self._types = opened.types
            await self._round_loop()
        except asyncio.CancelledError:
            self._status, self._phase = "canceled", "canceled"
            raise
        except Exception as error:  # noqa: BLE001 - nothing escapes as a stuck workflow task
            workflow.logger.exception("task %s failed outside a round", data.task_id)
            self._fail("internal", f"{type(error).__name__}: {error}")
        return TaskResult(
            task_id=data.task_id,
            session_id=data.session_id,
            status=self._status,  # type: ignore[arg-type]
            reply=self._reply,
            error=self._error,
            rounds=self._rounds,
            steps=self._steps,
            usage=self._ledger,
        )

    @property
    def _data(self) -> TaskInput:
        assert self._input is not None
        return self._input

    async def _round_loop(self) -> None:
        data, settings = self._data, self._data.settings
        round_, retries, streak, last_signature = 0, 0, 0, ""
        while True:
            self._round, self._phase = round_, f"round {round_}: deciding"
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
            streak = streak + 1 if signature and signature == last_signature else int(bool(signature))
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
        return Failure("exhausted", f"round {round_} found no usable decision: " + "; ".join(diagnostics))

    async def _attempt(
        self,
        round_: int,
        upto: int,
        slot: str,
        model: str,
        final_reason: str | None,
        extra: list[Message],
    ) -> Decision | Rejection | Failure:
        data, settings = self._data, self._data.settings
        final = final_reason is not None
        steps = 1 if final else max(1, settings.step_budget - self._steps)
        offered = {FINAL_REPLY} if final or not self._types else {FINAL_REPLY, DELEGATE}
        for step in range(steps):
            self._steps += 1
            try:
                out = await workflow.execute_activity_method(
                    ModelActivities.round_step,
                    RoundStepInput(
                        task_id=data.task_id,
                        session_id=data.session_id,
                        round=round_,
                        upto_seq=upto,
                        slot=slot,
                        model=model,
                        final_reason=final_reason,
                        work_tools=not final and steps - step > 1,
                        extra=extra,
                        max_subtasks=settings.max_subtasks,
                        max_output_tokens=settings.max_output_tokens,
                    ),
                    start_to_close_timeout=timedelta(seconds=settings.model_timeout_seconds),
                    retry_policy=model_retry(settings.model_max_attempts),
                    summary=f"round {round_} · {slot} · {model}" + (" · final" if final else ""),
                )
            except ActivityError as error:
                failure = describe(error, settings.model_max_attempts)
                self._ledger.charge("rounds", model, calls=failure.attempts, failed_calls=failure.attempts)
                return failure
            response = out.response
            self._ledger.charge(
                "rounds", model, response.usage, calls=out.attempt, failed_calls=out.attempt - 1
            )
            picked = pick_control_call(response.tool_calls, offered)
            if picked is not None:
                name, calls = picked
                try:
                    if name == FINAL_REPLY:
                        return parse_final_reply(calls)
                    return parse_delegate(
                        calls,
                        catalog_size=out.catalog_size,
                        types=self._types,
                        max_subtasks=settings.max_subtasks,
                    )
                except ControlCallError as error:
                    subject = calls[-1] if name == FINAL_REPLY else calls[0]
                    return Rejection(call=subject, error=str(error))
            if response.tool_calls:
                call = response.tool_calls[0]
                return Rejection(
                    call=call,
                    error=f"There is no tool named {call.name!r} in this round; the tools you can "
                    f"call are {sorted(offered)}.",
                )
            return Failure("no_decision", prompts.no_decision(response.finish_reason, response.text))
        return Failure("no_decision", "the attempt ran out of steps without a control call")

    # -- branches ---------------------------------------------------------------------------

    async def _run_branches(
        self, round_: int, upto: int, decision: DelegateDecision, done: dict[int, BranchOutcome]
    ) -> list[BranchOutcome]:
        todo = [(k, d) for k, d in enumerate(decision.subtasks, 1) if k not in done]
        self._phase = f"round {round_}: {len(todo)} subtasks running"
        # Started together: one workflow task emits every child's start command.
        started = await asyncio.gather(*(self._branch(round_, upto, k, d) for k, d in todo))
        return sorted([*done.values(), *started], key=lambda b: b.ordinal)

    async def _branch(self, round_: int, upto: int, ordinal: int, draft: SubtaskDraft) -> BranchOutcome:
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
        return BranchOutcome(ordinal=ordinal, type=draft.type, status=result.status, error=result.error)

    # -- endings ----------------------------------------------------------------------------

    async def _give_up(self, failure: Failure) -> None:
        """No model can answer: deliver completed branches if any, else fail with the kind."""
        data = self._data
        joined = await self._store_call(
            SessionActivities.deterministic_join,
            JoinInput(task_id=data.task_id, session_id=data.session_id),
        )
        if joined is not None:
            workflow.logger.warning("task %s replied by deterministic join: %s", data.task_id, failure.message)
            self._replied(joined)
            return
        kind = "exhausted" if failure.kind == "no_decision" else failure.kind
        self._fail(kind, failure.message)

    def _replied(self, text: str) -> None:
        self._status, self._phase, self._reply = "replied", "replied", text

    def _fail(self, kind: str, message: str) -> None:
        self._status, self._phase = "failed", "failed"
        self._error = TaskError(kind=kind, message=message)  # type: ignore[arg-type]

    async def _store_call(self, method: Any, arg: Any) -> Any:
        return await workflow.execute_activity_method(
            method, arg, start_to_close_timeout=STORE_TIMEOUT, retry_policy=STORE_RETRY
        )


def _repair_exchange(call_id: str, rejection: Rejection) -> list[Message]:
    """The rejected call and its error, as a real tool exchange the model knows how to read."""
    return [
        Message(
            role="assistant",
            tool_calls=[ToolCall(id=call_id, name=rejection.call.name, arguments=rejection.call.arguments)],
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
