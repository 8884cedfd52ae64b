"""Two worker processes on one task queue, sharing the PostgreSQL session store, complete 50
concurrent delegating tasks with every message exactly once."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

from temporalio.client import Client

from errands.adapters.devserver import DevServer
from errands.adapters.scripted import Call, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import open_store
from tests.conftest import kill_worker, spawn_worker, worker_env
from tests.helpers import start_task, wait_for_pollers
from tests.test_store import pg_admin, pg_url_in

TASKS = 50


def two_branches_then_reply(request: RecordedRequest) -> Reply:
    tools = [t["function"]["name"] for t in request.body.get("tools", [])]
    if "final_reply" not in tools:
        return Reply(text="branch result")
    if any(m["role"] == "tool" for m in request.body["messages"]):
        return Reply(calls=[Call("final_reply", {"text": "joined"})])
    subtasks = [{"type": "general", "prompt": f"part {k}", "references": [1]} for k in (1, 2)]
    return Reply(calls=[Call("delegate", {"reply": "on it", "subtasks": subtasks})])


async def test_two_workers_on_postgres_complete_50_tasks_exactly_once(
    client: Client, dev_server: DevServer, model_server: ScriptedModelServer
) -> None:
    schema = f"errands_workers_{uuid.uuid4().hex[:10]}"
    with pg_admin() as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    url = pg_url_in(schema)
    queue = f"pg-{uuid.uuid4().hex[:6]}"
    env = worker_env(dev_server, queue, url, model_server)
    model_server.responder = two_branches_then_reply
    workers = [spawn_worker(env), spawn_worker(env)]
    store = open_store(url)
    try:
        await wait_for_pollers(client, queue, len(workers))
        handles = await asyncio.gather(
            *(start_task(client, queue, f"job {i}", model="openai:gpt-pg") for i in range(TASKS))
        )
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 300)
        assert [r.reply for r in results] == ["joined"] * TASKS
        for result in results:
            rows = store.list_session(result.session_id)
            ids = Counter(r.id for r in rows)
            task = result.task_id
            assert set(ids) == {
                f"task:{task}:user",
                f"task:{task}:round:0:ack",
                f"task:{task}:round:0:branch:1",
                f"task:{task}:round:0:branch:2",
                f"task:{task}:reply",
            }
            assert set(ids.values()) == {1}
            assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
        # Who ran each workflow task and activity, over the tasks and their branches.
        identities = set()
        for handle in handles:
            workflow_ids = [handle.id] + [f"{handle.id}/r0/b{k}" for k in (1, 2)]
            for workflow_id in workflow_ids:
                history = await client.get_workflow_handle(workflow_id).fetch_history()
                for event in history.events:
                    if event.HasField("workflow_task_started_event_attributes"):
                        identities.add(event.workflow_task_started_event_attributes.identity)
                    if event.HasField("activity_task_started_event_attributes"):
                        identities.add(event.activity_task_started_event_attributes.identity)
        assert len(identities) == 2, "both workers did work"
    finally:
        model_server.responder = None
        for proc in workers:
            kill_worker(proc)
        store.close()
        with pg_admin() as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
