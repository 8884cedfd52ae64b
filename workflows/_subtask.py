"""SubtaskWorkflow: one branch of a delegating round, its own step loop ending in plain text.

The branch's conversation is its own thread in the session store (keyed by this workflow's id),
so nothing but counters crosses this workflow's history.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities import ModelActivities, SessionActivities
    from errands.activity_io import (
        BranchStepInput,
        OpenBranchInput,
        RecordBranchInput,
        RunToolInput,
    )
    from errands.contracts import ModelUsage, UsageLedger
    from errands.control import SubtaskDraft
    from errands.workflow_io import SubtaskInput, SubtaskResult
    from workflows._failures import describe
    from workflows._options import STORE_RETRY, STORE_TIMEOUT, model_retry


@workflow.defn(name="SubtaskWorkflow")
class SubtaskWorkflow:
    @workflow.run
    async def run(self, data: SubtaskInput) -> SubtaskResult:
        thread_id = workflow.info().workflow_id
        ledger = UsageLedger()
        await workflow.execute_activity_method(
            ModelActivities.open_branch,
            OpenBranchInput(
                thread_id=thread_id,
                task_id=data.task_id,
                session_id=data.session_id,
                catalog_upto_seq=data.catalog_upto_seq,
                prompt=data.prompt,
                references=data.references,
            ),
            start_to_close_timeout=STORE_TIMEOUT,
            retry_policy=STORE_RETRY,
        )
        status, error, steps = "failed", "", 0
        for step in range(data.step_limit):
            last = step == data.step_limit - 1
            steps += 1
            try:
                out = await workflow.execute_activity_method(
                    ModelActivities.branch_step,
                    BranchStepInput(
                        thread_id=thread_id,
                        step=step,
                        model=data.model,
                        subtask_type=data.subtask_type,
                        last_step=last,
                        max_output_tokens=data.max_output_tokens,
                    ),
                    start_to_close_timeout=timedelta(seconds=data.model_timeout_seconds),
                    retry_policy=model_retry(data.model_max_attempts),
                    summary=f"branch r{data.round}/b{data.ordinal} · step {step} · {data.model}",
                )
            except ActivityError as exc:
                failure = describe(exc, data.model_max_attempts)
                ledger.charge(
                    "branches", data.model, calls=failure.attempts, failed_calls=failure.attempts
                )
                posture = (
                    "a hiccup that may clear if retried later"
                    if failure.transient
                    else "a permanent error: retrying the same way will fail again"
                )
                error = (
                    f"model call failed at step {step} ({failure.kind}; {posture}): "
                    f"{failure.message}"
                )
                break
            if not out.replayed:
                ledger.charge(
                    "branches",
                    out.model,
                    out.usage,
                    calls=out.attempt,
                    failed_calls=out.attempt - 1,
                )
            if out.tool_calls == 0:
                status, error = "completed", ""
                break
            await asyncio.gather(
                *(
                    workflow.execute_activity_method(
                        ModelActivities.run_branch_tool,
                        RunToolInput(
                            thread_id=thread_id,
                            step=step,
                            call_index=i,
                            subtask_type=data.subtask_type,
                        ),
                        start_to_close_timeout=timedelta(minutes=10),
                        retry_policy=STORE_RETRY,
                        summary=f"branch r{data.round}/b{data.ordinal} · step {step} · tool {i}",
                    )
                    for i in range(out.tool_calls)
                )
            )
        else:
            error = f"ran out of steps ({data.step_limit}) without a final answer"
        await workflow.execute_activity_method(
            SessionActivities.record_branch,
            RecordBranchInput(
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
                error=error or None,
            ),
            start_to_close_timeout=STORE_TIMEOUT,
            retry_policy=STORE_RETRY,
        )
        usage: dict[str, ModelUsage] = ledger.parts.get("branches", {})
        return SubtaskResult(status=status, error=error or None, steps=steps, usage=usage)  # type: ignore[arg-type]
