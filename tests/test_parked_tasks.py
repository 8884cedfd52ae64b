"""Tasks parked on questions survive a worker restart: each resumes when its answer arrives.
(The idle cost of 200 and 1,000 parked tasks is measured by `make bench`, B6.)"""

from __future__ import annotations

import asyncio

from temporalio.client import Client

from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.client import Client as ErrandsClient
from errands.contracts.workflows import TaskResult
from errands.settings import Settings
from tests.conftest import ProcessWorkers, kill_worker, spawn_worker, worker_process
from tests.helpers import (
    DATABASE,
    ask,
    eventually,
    final,
    start_task,
)

PARKED = 30


async def test_parked_tasks_resume_after_a_worker_restart(
    client: Client,
    scripted: ScriptedModelServer,
    settings: Settings,
    store: SessionStore,
    process_workers: ProcessWorkers,
) -> None:
    queue, env = process_workers.queue, process_workers.env
    scripted.script("gpt-parked", *[ask(DATABASE)] * PARKED, *[final("resumed")] * PARKED)
    first = spawn_worker(env)
    handles = [
        await start_task(client, queue, f"job {i}", model="openai:gpt-parked")
        for i in range(PARKED)
    ]
    pending: dict[str, str] = {}

    async def all_parked() -> bool:
        for handle in handles:
            if handle.id not in pending:
                status = await handle.query("status", result_type=TaskResult)
                if status.pending_question:
                    pending[handle.id] = status.pending_question["id"]
        return len(pending) == PARKED

    await eventually(all_parked, f"all {PARKED} tasks to wait on their question", timeout=120)
    kill_worker(first)

    tasks = ErrandsClient(client, settings, store=store)
    with worker_process(env):
        # Answered at once, as a user would: a task whose workflow task is still failing over
        # from the dead worker is offered the answer again until the new worker has it.
        await asyncio.gather(
            *(
                tasks.task(h.id).answer({"q1": ["SQLite"]}, question_set_id=pending[h.id])
                for h in handles
            )
        )
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 180)
    assert [r.reply for r in results] == ["resumed"] * PARKED
