"""SubtaskWorkflow: one branch of a delegating round, its own step loop ending in plain text.

The branch's conversation is its own thread in the session store (keyed by this workflow's id),
so nothing but counters crosses this workflow's history. A long step loop continues as new.

On a versioned worker a branch is pinned to its task's version (a child on its parent's queue
starts there) and stays on it, across its own continue-as-new too: it never moves mid-branch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities import ModelActivities, SessionActivities, ToolActivities
    from errands.agent import approvals, prompts
    from errands.contracts import ids
    from errands.contracts.activities import (
        BranchStepInput,
        BranchStepOutput,
        McpHolder,
        OpenBranchInput,
        RecordBranchInput,
        RunToolInput,
        RunToolOutput,
        SessionRouting,
    )
    from errands.contracts.approvals import ApprovalNeed, Verdict
    from errands.contracts.messages import UsageLedger
    from errands.contracts.principals import Principal
    from errands.contracts.subtasks import SubtaskDraft
    from errands.contracts.workflows import SubtaskInput, SubtaskResult, model_queue
    from workflows._approvals import (
        REQUEST_SIGNAL,
        VERDICT_SIGNAL,
        WITHDRAW_SIGNAL,
        Verdicts,
        log_answered,
        log_requested,
        request_for,
    )
    from workflows._failures import attempts_failed, describe, settled
    from workflows._options import model_step, run_is_long, store_call, tool_run
    from workflows._patches import RunPatches
    from workflows._sessions import MCP_HOLDER_SIGNAL, SessionHolders


@workflow.defn(name="SubtaskWorkflow")
class SubtaskWorkflow:
    def __init__(self) -> None:
        self._verdicts = Verdicts()
        self._holders = SessionHolders([])
        self._task_id = ""

    @workflow.signal(name=VERDICT_SIGNAL)
    def approval_verdict(self, verdict: Verdict) -> None:
        """The user's answer to a call of this branch that waits for approval (via the task)."""
        self._verdicts.put(verdict)

    @workflow.run
    async def run(self, data: SubtaskInput) -> SubtaskResult:
        self._holders = SessionHolders(data.mcp_holders)
        own = workflow.info().workflow_id
        try:
            result = await self._steps(data)
        except asyncio.CancelledError:
            await self._holders.close(lambda holder: holder.scope == own)
            raise
        await self._holders.close(lambda holder: holder.scope == own)
        return result

    async def _tell_task(self, holder: McpHolder) -> None:
        """A session of the task's own (``"session": "task"``) this branch reached: the task
        closes it when it ends, so it must know it."""
        if holder.scope != self._task_id:
            return
        parent = workflow.info().parent
        assert parent is not None, "a branch runs as a child of its task"
        await workflow.get_external_workflow_handle(parent.workflow_id).signal(
            MCP_HOLDER_SIGNAL, holder
        )

    async def _steps(self, data: SubtaskInput) -> SubtaskResult:
        self._task_id = data.task_id
        RunPatches.of_branch(data)
        thread_id = workflow.info().workflow_id
        ledger = UsageLedger()
        ledger.merge("branches", data.usage)
        ledger.merge("compaction", data.compaction)
        opening = self._opening(data, thread_id) if data.first_step == 0 else None
        record = self._record(data, thread_id, "completed", None)
        status, error, steps = "failed", "", data.first_step
        for step in range(data.first_step, data.settings.branch_step_limit):
            if step > data.first_step:
                await self._hand_over_if_long(data, step, ledger)
            steps += 1
            step_input = BranchStepInput(
                thread_id=thread_id,
                step=step,
                task_id=data.task_id,
                session_id=data.session_id,
                model=data.model,
                subtask_type=data.subtask_type,
                last_step=step == data.settings.branch_step_limit - 1,
                max_output_tokens=data.settings.max_output_tokens,
                open=opening if step == data.first_step else None,
                record=record,
            )
            out = await self._step(data, step_input, ledger)
            if isinstance(out, str):
                error = out
                break
            if out.tool_calls == 0:
                status, error = "completed", ""
                break
            await self._tool_calls(data, step, out)
        else:
            error = f"ran out of steps ({data.settings.branch_step_limit}) without a final answer"
        if status != "completed":
            # A completed branch's row was written by its last step.
            await store_call(
                SessionActivities.record_branch,
                self._record(data, thread_id, status, error or None),
            )
        return SubtaskResult(
            status=status,  # type: ignore[arg-type]
            error=error or None,
            steps=steps,
            usage=ledger.parts.get("branches", {}),
            compaction=ledger.parts.get("compaction", {}),
        )

    async def _hand_over_if_long(self, data: SubtaskInput, step: int, ledger: UsageLedger) -> None:
        """A long step loop hands over to a fresh run; its thread is already in the store."""
        if not run_is_long(
            continue_as_new=data.settings.continue_as_new,
            max_history_events=data.settings.max_history_events,
        ):
            return
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(
            data.model_copy(
                update={
                    "first_step": step,
                    "usage": ledger.parts.get("branches", {}),
                    "compaction": ledger.parts.get("compaction", {}),
                    "mcp_holders": self._holders.all(),
                }
            )
        )

    @staticmethod
    async def _step(
        data: SubtaskInput, step: BranchStepInput, ledger: UsageLedger
    ) -> BranchStepOutput | str:
        """One model step, charged to ``ledger``; or why the branch stops (its model failed)."""
        try:
            out = await model_step(
                ModelActivities.branch_step,
                step,
                timeout_seconds=data.settings.model_timeout_seconds,
                heartbeat_seconds=data.settings.heartbeat_timeout_seconds,
                max_attempts=data.settings.model_max_attempts,
                task_queue=model_queue(data.settings.model_task_queue, data.model),
                summary=f"branch r{data.round}/b{data.ordinal} · step {step.step} · {data.model}",
            )
        except ActivityError as exc:
            failure = describe(exc, data.settings.model_max_attempts)
            ledger.charge(
                "branches", data.model, calls=failure.attempts, failed_calls=failure.attempts
            )
            posture = (
                "a hiccup that may clear if retried later"
                if failure.transient
                else "a permanent error: retrying the same way will fail again"
            )
            return (
                f"model call failed at step {step.step} ({failure.kind}; {posture}): "
                f"{settled(failure.message)}"
            )
        # A replayed step was written by an attempt that died before reporting: its usage
        # was never charged, so it is charged now, from the stored step.
        ledger.charge(
            "branches", out.model, out.usage, calls=out.attempt, failed_calls=out.attempt - 1
        )
        if out.compaction is not None:
            ledger.merge("compaction", {out.model: out.compaction})
        return out

    async def _tool_calls(self, data: SubtaskInput, step: int, out: BranchStepOutput) -> None:
        """The step's tool calls, those that need it approved by the user first."""
        try:
            verdicts: dict[int, str | None] = {}
            deciders: dict[int, list[Principal]] = {}
            for need in out.approvals:
                verdicts[need.index], deciders[need.index] = await self._approval(data, step, need)
            await self._run_tools(data, step, out.tool_calls, verdicts, deciders, out.servers)
        except asyncio.CancelledError:
            # Every call of the step gets a result, so the thread never holds a call without
            # one; a call that already has its result keeps it.
            cancelled: dict[int, str | None] = dict.fromkeys(
                range(out.tool_calls), prompts.TOOL_CANCELLED
            )
            await self._run_tools(data, step, out.tool_calls, cancelled)
            raise

    async def _approval(
        self, data: SubtaskInput, step: int, need: ApprovalNeed
    ) -> tuple[str | None, list[Principal]]:
        """Put a call to the user through the task and wait: None when approved, else the text
        the model reads (denied, unanswered, or no one to ask); and who approved or denied it.
        The branch logs its call's wait and how it ended unanswered; the task logs the user's
        answer."""
        if need.refusal is not None:  # too large to show a person: nobody is asked
            return need.refusal, []
        hours = data.settings.ask_timeout_hours
        if data.headless:
            own = workflow.info().workflow_id
            await log_answered(data.task_id, ids.approval_id(own, step, need.index), "headless")
            return approvals.headless(need.tool), []
        request = request_for(need, step, f"round {data.round} · subtask {data.ordinal}", hours)
        parent = workflow.info().parent
        assert parent is not None, "a branch runs as a child of its task"
        task = workflow.get_external_workflow_handle(parent.workflow_id)
        try:
            await log_requested(data.task_id, request)
            await task.signal(REQUEST_SIGNAL, request)
            verdict = await self._verdicts.wait(request, hours)
        except asyncio.CancelledError:
            await log_answered(data.task_id, request.approval_id, "cancelled")
            raise
        if verdict is None:
            await log_answered(data.task_id, request.approval_id, "timed_out")
            await task.signal(WITHDRAW_SIGNAL, request.approval_id)
            return approvals.timed_out(need.tool, hours), []
        return verdict.denial, verdict.by

    async def _run_tools(
        self,
        data: SubtaskInput,
        step: int,
        calls: int,
        verdicts: dict[int, str | None],
        deciders: dict[int, list[Principal]] | None = None,
        servers: dict[int, str] | None = None,
    ) -> None:
        """The step's tool calls, all at once (a stateful MCP server's, ``servers``, on the
        worker holding its session); a call with a verdict stores it instead of running. A call
        whose every attempt failed (its worker kept dying) stores that as its result."""

        def run(i: int, verdict: str | None) -> Awaitable[RunToolOutput]:
            def scheduled(routing: SessionRouting) -> Awaitable[RunToolOutput]:
                return tool_run(
                    ToolActivities.run_branch_tool,
                    RunToolInput(
                        thread_id=workflow.info().workflow_id,
                        step=step,
                        call_index=i,
                        subtask_type=data.subtask_type,
                        task_id=data.task_id,
                        timeout_seconds=data.settings.tool_timeout_seconds,
                        max_attempts=data.settings.tool_max_attempts,
                        verdict=verdict,
                        approved=i in verdicts and verdict is None,
                        by=(deciders or {}).get(i, []),
                        routing=routing,
                    ),
                    timeout_seconds=data.settings.tool_timeout_seconds,
                    heartbeat_seconds=data.settings.heartbeat_timeout_seconds,
                    max_attempts=data.settings.tool_max_attempts,
                    summary=f"branch r{data.round}/b{data.ordinal} · step {step} · tool {i}",
                    holder=routing.holder,
                )

            server = (servers or {}).get(i) if verdict is None else None
            if server is None:  # not a stateful MCP server's call: the shared queue
                return scheduled(SessionRouting())
            return self._holders.run(server, scheduled, self._tell_task)

        outcomes = await asyncio.gather(
            *(run(i, verdicts.get(i)) for i in range(calls)), return_exceptions=True
        )
        failed = {i: o for i, o in enumerate(outcomes) if isinstance(o, BaseException)}
        for error in failed.values():
            if not isinstance(error, ActivityError):
                raise error
        reports = [
            run(
                i,
                prompts.tool_failed(
                    "this tool", attempts_failed(error, data.settings.tool_max_attempts)
                ),
            )
            for i, error in failed.items()
        ]
        await asyncio.gather(*reports)

    @staticmethod
    def _opening(data: SubtaskInput, thread_id: str) -> OpenBranchInput:
        return OpenBranchInput(
            thread_id=thread_id,
            task_id=data.task_id,
            session_id=data.session_id,
            catalog_upto_seq=data.catalog_upto_seq,
            prompt=data.prompt,
            references=data.references,
            view=data.catalog_view,
        )

    @staticmethod
    def _record(
        data: SubtaskInput, thread_id: str, status: str, error: str | None
    ) -> RecordBranchInput:
        return RecordBranchInput(
            task_id=data.task_id,
            session_id=data.session_id,
            round=data.round,
            ordinal=data.ordinal,
            thread_id=thread_id,
            draft=SubtaskDraft(
                type=data.subtask_type,
                prompt=data.prompt,
                references=data.references,
                params=data.params,
            ),
            status=status,
            error=error,
        )
