"""SideQuestionWorkflow: a side question about a task that has already finished.

A running task answers side questions through its ``ask_side_question`` update. A finished one
cannot take updates, so a frontend starts this short-lived workflow instead, with the finished
task's latest round request (from its result). It runs the same activity and writes nothing.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities import ConsultActivities
    from errands.activity_io import SideAnswer, SideQuestionInput
    from workflows._options import model_retry


@workflow.defn(name="SideQuestionWorkflow")
class SideQuestionWorkflow:
    @workflow.run
    async def run(self, data: SideQuestionInput) -> SideAnswer:
        return await workflow.execute_activity_method(
            ConsultActivities.answer_side_question,
            data,
            start_to_close_timeout=timedelta(seconds=data.timeout_seconds),
            retry_policy=model_retry(3),
            summary="side question about a finished task",
        )
