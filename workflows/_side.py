"""Side questions (SPEC §3) as workflow code: the activities that answer one, and
SideQuestionWorkflow, for a side question about a task that has already finished.

A running task answers side questions through its ``ask_side_question`` update. A finished one
cannot take updates, so a frontend starts this short-lived workflow instead, with the finished
task's latest round request (from its result). Both run ``answer_side_question`` and write
nothing.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities import ConsultActivities
    from errands.contracts.activities import SideAnswer, SideQuestionInput
    from errands.contracts.messages import UsageLedger
    from errands.contracts.workflows import model_queue
    from workflows._failures import describe
    from workflows._options import model_retry

ONE_TRY = RetryPolicy(maximum_attempts=1)
"""The preferred path is not retried: when it fails, the fallback is the retry."""


async def answer_side_question(data: SideQuestionInput, *, summary: str) -> SideAnswer:
    """The answer to ``data``: the preferred path when it applies, else (or when it gives no
    answer) the fallback. A non-recoverable failure of the preferred path (a dead credential)
    is raised, since the fallback would meet the same."""
    spent = UsageLedger()
    if data.round is not None and data.model == data.round.model:
        try:
            preferred = await _run(data.model_copy(update={"path": "preferred"}), summary, ONE_TRY)
        except ActivityError as error:
            failure = describe(error)
            if failure.non_recoverable and failure.kind != "invalid_request":
                raise
            workflow.logger.warning("side question: the preferred path failed: %s", failure)
        else:
            if preferred.answer:
                return preferred
            spent.merge("side_questions", preferred.usage)
    answer = await _run(
        data.model_copy(update={"path": "fallback"}), f"{summary} · fallback", model_retry(3)
    )
    spent.merge("side_questions", answer.usage)
    return answer.model_copy(update={"usage": spent.parts.get("side_questions", {})})


async def _run(data: SideQuestionInput, summary: str, retry: RetryPolicy) -> SideAnswer:
    return await workflow.execute_activity_method(
        ConsultActivities.answer_side_question,
        data,
        start_to_close_timeout=timedelta(seconds=data.timeout_seconds),
        heartbeat_timeout=timedelta(seconds=data.heartbeat_timeout_seconds),
        task_queue=model_queue(data.model_task_queue, data.model),
        retry_policy=retry,
        summary=summary,
    )


@workflow.defn(name="SideQuestionWorkflow")
class SideQuestionWorkflow:
    @workflow.run
    async def run(self, data: SideQuestionInput) -> SideAnswer:
        return await answer_side_question(data, summary="side question about a finished task")
