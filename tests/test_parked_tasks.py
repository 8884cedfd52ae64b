"""Tasks parked on questions survive a worker restart: each resumes when its answer arrives.
(The idle cost of 200 and 1,000 parked tasks is measured by `make bench`, B6.)"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid

from temporalio.client import Client

from errands.adapters.devserver import DevServer
from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.client import Client as ErrandsClient
from errands.contracts.workflows import TaskResult
from errands.settings import Settings
from tests.helpers import ask, eventually, final, start_task
from tests.test_ask_user import DATABASE
from tests.test_worker_crash import spawn_worker, worker_env

PARKED = 30


async def test_parked_tasks_resume_after_a_worker_restart(
    client: Client,
    dev_server: DevServer,
    database_url: str,
    model_server: ScriptedModelServer,
    scripted: ScriptedModelServer,
    settings: Settings,
    store: SessionStore,
) -> None:
    queue = f"parked-{uuid.uuid4().hex[:6]}"
    env = worker_env(dev_server, queue, database_url, model_server)
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
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()

    second = spawn_worker(env)
    tasks = ErrandsClient(client, settings, store=store)
    try:
        # Answered at once, as a user would: a task whose workflow task is still failing over
        # from the dead worker is offered the answer again until the new worker has it.
        await asyncio.gather(
            *(
                tasks.task(h.id).answer({"q1": ["SQLite"]}, question_set_id=pending[h.id])
                for h in handles
            )
        )
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 180)
    finally:
        os.killpg(second.pid, signal.SIGKILL)
        second.wait()
    assert [r.reply for r in results] == ["resumed"] * PARKED
