"""Crashes of the infrastructure: the worker killed with SIGKILL, the dev server stopped and
started again on the same SQLite file, each while planned tasks run."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from temporalio.api.enums.v1 import PendingActivityState, PendingWorkflowTaskState

from chaos._planned import Size, run_planned
from chaos._report import Outcome
from chaos._roleplay import make_plan
from chaos._stack import Stack

KILL_FULL = Size(tasks=24, strikes=25, concurrency=8, timeout=1500)
KILL_SHORT = Size(tasks=3, strikes=2, concurrency=3, timeout=150, delay=0.5)
RESTART_FULL = Size(tasks=10, strikes=4, concurrency=10, timeout=900)
RESTART_SHORT = Size(tasks=2, strikes=1, concurrency=2, timeout=150, delay=0.5)


async def worker_kills(stack: Stack, rng: random.Random, size: Size) -> Outcome:
    """kill -9 of ``python worker.py`` at random points; a new worker after a random pause."""
    outcome = Outcome("kill", "Worker killed with SIGKILL at random points")
    queue = stack.queue("kill")
    worker = stack.worker_process(queue)
    plans = [make_plan(rng, f"k{n:02d}") for n in range(size.tasks)]
    downtimes: list[float] = []

    async def strike() -> None:
        worker.kill()
        await cut_off(stack, queue, outcome)
        downtimes.append(rng.uniform(0, 1.5))
        await asyncio.sleep(downtimes[-1])
        worker.start()

    worker.start()
    try:
        await run_planned(
            stack,
            outcome,
            queue=queue,
            model="chaos-kill",
            plans=plans,
            size=size,
            rng=rng,
            strike=strike,
            fault="worker kill -9",
        )
    finally:
        worker.stop()
    outcome.facts["worker processes started"] = worker.spawned
    if downtimes:
        outcome.facts["longest time without a worker (s)"] = max(downtimes)
    return outcome


async def cut_off(stack: Stack, queue: str, outcome: Outcome) -> None:
    """Count what the kill cut off: the activities and workflow tasks the dead worker had
    started and never reported (the server still shows them as started)."""
    seen = outcome.facts.setdefault("started and cut off by a kill", Counter())
    query = f"TaskQueue = '{queue}' AND ExecutionStatus = 'Running'"
    async for execution in stack.client.list_workflows(query):
        handle = stack.client.get_workflow_handle(execution.id, run_id=execution.run_id)
        raw = (await handle.describe()).raw_description
        for activity in raw.pending_activities:
            if activity.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
                seen[f"{activity.activity_type.name} activity"] += 1
        if (
            raw.pending_workflow_task.state
            == PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_STARTED
        ):
            seen["workflow task"] += 1


async def server_restarts(stack: Stack, rng: random.Random, size: Size) -> Outcome:
    """The dev server stopped and started again on the same port and SQLite file, down for a
    random few seconds each time; the worker process is left running throughout."""
    outcome = Outcome("restart", "Dev server stopped and restarted mid-task")
    queue = stack.queue("restart")
    worker = stack.worker_process(queue)
    plans = [make_plan(rng, f"r{n:02d}", channels=("update", "signal")) for n in range(size.tasks)]
    downtimes: list[float] = []
    respawned = 0

    async def strike() -> None:
        nonlocal respawned
        downtimes.append(rng.uniform(0.5, 4.0))
        await stack.restart_server(downtimes[-1])
        if not worker.alive:
            respawned += 1
            worker.stop()
            worker.start()

    worker.start()
    try:
        await run_planned(
            stack,
            outcome,
            queue=queue,
            model="chaos-restart",
            plans=plans,
            size=size,
            rng=rng,
            strike=strike,
            fault="dev server stop + start",
        )
    finally:
        worker.stop()
    outcome.facts["answers by signal"] = sum(1 for p in plans if p.channel == "signal")
    if downtimes:
        outcome.facts["server downtime per restart (s)"] = ", ".join(f"{d:.1f}" for d in downtimes)
    outcome.facts["worker processes that died with the server and were started again"] = respawned
    if respawned:
        outcome.notes.append(
            f"the worker process exited during {respawned} outage(s) and had to be started again"
        )
    return outcome
