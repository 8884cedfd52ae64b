"""B1's floor: a minimal hand-written Temporal workflow with no-op activities and children.

It does the hops errands does (sequential activities, children started together, sequential
activities again) and nothing else, so the difference to an errands task is what errands adds.
Local activities (errands runs its session-store calls that way) are optional: the floor the
issue names has only the model-call activities and the children.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow

_TIMEOUT = timedelta(seconds=30)


@dataclass
class FloorPlan:
    before: int
    """Sequential activities before the children start (errands: the round's model call)."""
    children: int
    child_activities: int
    """Sequential activities in each child (errands: the branch's model step)."""
    after: int
    """Sequential activities after the children complete (errands: the next model call)."""
    local_before: int = 0
    """Local activities run before the children start (errands: open, prepare, acknowledge)."""
    local_after: int = 0
    """Local activities run after the children complete (errands: prepare, reply)."""


@activity.defn(name="floor_noop")
async def floor_noop(step: int) -> int:
    return step


@workflow.defn(name="FloorChild")
class FloorChild:
    @workflow.run
    async def run(self, activities: int) -> int:
        for step in range(activities):
            await workflow.execute_activity(floor_noop, step, start_to_close_timeout=_TIMEOUT)
        return activities


@workflow.defn(name="FloorTask")
class FloorTask:
    @workflow.run
    async def run(self, plan: FloorPlan) -> int:
        hops = await _local_noops(plan.local_before)
        for step in range(plan.before):
            hops += await workflow.execute_activity(
                floor_noop, step, start_to_close_timeout=_TIMEOUT
            )
        parent = workflow.info().workflow_id
        done = await asyncio.gather(
            *(
                workflow.execute_child_workflow(
                    FloorChild.run, plan.child_activities, id=f"{parent}/b{k}"
                )
                for k in range(1, plan.children + 1)
            )
        )
        hops += await _local_noops(plan.local_after)
        for step in range(plan.after):
            hops += await workflow.execute_activity(
                floor_noop, step, start_to_close_timeout=_TIMEOUT
            )
        return hops + sum(done)


async def _local_noops(count: int) -> int:
    for step in range(count):
        await workflow.execute_local_activity(floor_noop, step, start_to_close_timeout=_TIMEOUT)
    return count
