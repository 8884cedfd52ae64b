"""A schedule's fire (SPEC §11): ``ScheduleFireWorkflow`` starts one task and waits for it.

Temporal's Schedule starts this workflow at each fire; it lives as long as its task, so the
schedule's overlap policy sees a fire as running while its task runs (skip, buffer one, cancel
the previous: the task is its child, cancelled with it). The task's id derives from the fire's
due time (``fire_task_id``) and is started with REJECT_DUPLICATE: a fire never runs twice.

The catch-up rule. Temporal's catch-up window covers the *server's* outages: a fire it could
not start in time is dropped by Temporal. A fire started while no worker polls waits in Temporal
until a worker returns; this workflow then checks the same window itself: when it first runs
more than ``catchup_seconds`` after the fire was due (or, for a fire Temporal held back behind
the previous one, after Temporal started it), the fire is ``missed``: no task, logged.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, WorkflowIDReusePolicy
from temporalio.exceptions import CancelledError, ChildWorkflowError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from activities._schedules import ScheduleActivities
    from errands.contracts import search
    from errands.contracts.schedules import (
        SCHEDULED_AT,
        FireResult,
        PrepareFire,
        ScheduledTask,
        fire_task_id,
    )
    from errands.contracts.workflows import TaskResult

TASK_WORKFLOW = "TaskWorkflow"
PREPARE_RETRY = RetryPolicy(maximum_attempts=10, maximum_interval=timedelta(seconds=30))
"""A store that does not answer is retried a while; a fire that cannot start fails for good."""


@workflow.defn(name="ScheduleFireWorkflow")
class ScheduleFireWorkflow:
    @workflow.run
    async def run(self, data: ScheduledTask) -> FireResult:
        info = workflow.info()
        now = workflow.now()
        fired_at = info.typed_search_attributes.get(SCHEDULED_AT) or now
        fired_at = fired_at.replace(microsecond=0)
        due = max(fired_at, info.workflow_start_time)
        late = max(0.0, (now - due).total_seconds())
        task_id = fire_task_id(data.name, fired_at)
        if late > data.catchup_seconds:
            workflow.logger.warning(
                "schedule %s: the fire due at %s first ran %.0f s late, past its catch-up "
                "window of %.0f s (no worker was polling); task %s was not started",
                data.name,
                fired_at.isoformat(),
                late,
                data.catchup_seconds,
                task_id,
            )
            return FireResult(
                task_id=task_id, status="missed", fired_at=fired_at, late_seconds=late
            )
        prepared = await workflow.execute_activity_method(
            ScheduleActivities.prepare_scheduled_task,
            PrepareFire(task=data, fired_at=fired_at, nonce=workflow.uuid4().hex[:8]),
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=PREPARE_RETRY,
            summary=f"prepare {task_id}",
        )
        task = prepared.task
        attributes = search.initial(prepared.session_tag, task.owner)
        attributes = attributes.updated(SearchAttributePair(search.SCHEDULE, data.name))
        result = FireResult(task_id=task_id, status="replied", fired_at=fired_at, late_seconds=late)
        try:
            handle = await workflow.start_child_workflow(
                TASK_WORKFLOW,
                task,
                id=task_id,
                result_type=TaskResult,
                parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                search_attributes=attributes,
                memo=prepared.memo,
                static_summary=task.text[:200],
            )
        except WorkflowAlreadyStartedError:
            workflow.logger.info("schedule %s: task %s exists already", data.name, task_id)
            return result.model_copy(update={"status": "duplicate"})
        try:
            ended = await handle
        except ChildWorkflowError as error:
            cancelled = isinstance(error.cause, CancelledError)
            return result.model_copy(update={"status": "canceled" if cancelled else "failed"})
        status = ended.status if ended.status in ("replied", "failed", "canceled") else "failed"
        return result.model_copy(update={"status": status})
