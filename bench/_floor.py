"""B1's floor: a minimal hand-written Temporal workflow with no-op activities and children.

It does the hops errands does (sequential activities, children started together, sequential
activities again) and nothing else, so the difference to an errands task is what errands adds.
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
    """Sequential activities before the children start (errands: open, prepare, model, ack)."""
    children: int
    child_activities: int
    """Sequential activities in each child (errands: open branch, model step, record)."""
    after: int
    """Sequential activities after the children complete (errands: prepare, model, reply)."""


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
        hops = 0
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
        for step in range(plan.after):
            hops += await workflow.execute_activity(
                floor_noop, step, start_to_close_timeout=_TIMEOUT
            )
        return hops + sum(done)
