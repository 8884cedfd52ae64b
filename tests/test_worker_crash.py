"""A worker killed with SIGKILL while branches run: a new worker finishes the task, and nothing is
lost, duplicated or asked of a model twice beyond the calls that were in flight."""

from __future__ import annotations

import asyncio
from collections import Counter

from temporalio.client import Client

from errands.adapters.scripted import Gate, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.contracts.workflows import RoundSettings
from tests.conftest import ProcessWorkers, kill_worker, spawn_worker, worker_process
from tests.helpers import (
    Conversation,
    delegate,
    eventually,
    final,
    general,
    start_task,
)


async def test_kill_9_of_the_worker_while_branches_run(
    client: Client,
    store: SessionStore,
    scripted: ScriptedModelServer,
    process_workers: ProcessWorkers,
) -> None:
    queue, env = process_workers.queue, process_workers.env

    in_flight = Gate("the three branch calls in flight when the worker dies")

    def branch(request: RecordedRequest) -> Reply:
        first_three = len(convo.branch_requests) <= 3
        return Reply(text="branch finished", hold=in_flight if first_three else None)

    convo = Conversation(
        [delegate(*(general(f"part {k}", 1) for k in (1, 2, 3))), final("survived")],
        branch,
        branches=6,  # three in flight when the worker dies, each asked once more
    ).install(scripted, "gpt-main")

    first = spawn_worker(env)
    handle = await start_task(
        client,
        queue,
        "long job",
        model="openai:gpt-main",
        settings=RoundSettings(model_timeout_seconds=4),
    )
    await in_flight.reached(3)
    # A step's model_call_started is written while its request runs: the kill must come after
    # the three are in the log, or the log would rightly lack an attempt that never logged.

    def started_in_branches() -> int:
        events = store.list_events(handle.id)
        return sum(
            1 for e in events if e.type == "model_call_started" and e.data["where"] != "main"
        )

    await eventually(lambda: started_in_branches() == 3, "the three branch calls' start logged")
    kill_worker(first)

    with worker_process(env):
        result = await asyncio.wait_for(handle.result(), 120)
    assert result.reply == "survived"
    assert len(convo.main_requests) == 2, "no finished round was asked again"
    assert len(convo.branch_requests) == 6

    ids = [r.id for r in store.list_session(result.session_id)]
    task = result.task_id
    assert ids.count(f"task:{task}:user") == 1
    assert ids.count(f"task:{task}:round:0:ack") == 1
    assert ids.count(f"task:{task}:reply") == 1
    assert sorted(i for i in ids if ":branch:" in i) == [
        f"task:{task}:round:0:branch:{k}" for k in (1, 2, 3)
    ]
    assert len(ids) == len(set(ids))
    for k in (1, 2, 3):
        steps = [r for r in store.list_session(f"{task}/r0/b{k}") if r.kind == "step"]
        assert len(steps) == 1, "each branch step stored once"

    # The event log: no gap, nothing written twice, and the calls the kill cut off are there
    # as attempts of their own (the first started, never finished; the second finished).
    events = store.list_events(task)
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "no gap"
    assert events[-1].type == "replied"
    written = [(e.type, e.cause, e.data.get("attempt")) for e in events if e.type != "reply_delta"]
    assert len(written) == len(set(written)), "no event twice"
    counts = Counter(e.type for e in events)
    assert (counts["task_started"], counts["round_started"], counts["delegated"]) == (1, 2, 1)
    assert (counts["branch_started"], counts["branch_finished"], counts["replied"]) == (3, 3, 1)
    for k in (1, 2, 3):
        calls = [e for e in events if e.data.get("where") == f"r0/b{k}"]
        started = [e.data["attempt"] for e in calls if e.type == "model_call_started"]
        finished = [e.data["attempt"] for e in calls if e.type == "model_call_finished"]
        assert (started, finished) == ([1, 2], [2]), (k, started, finished)
    main = [e for e in events if e.type == "model_call_finished" and e.data["where"] == "main"]
    assert [e.data["attempt"] for e in main] == [1, 1], "each round's call answered once"
