"""Stateful MCP sessions end to end (issue 26): a server configured with ``"session": "task"`` or
``"branch"`` keeps one session per task or branch on the worker that opened it, its calls go to
that worker, a dead holder's session reopens elsewhere with the model told, and sessions close
when their task ends. Real dev server, scripted model through the real OpenAI client, the real
counter server (tests/mcp_counter_server.py) as a stdio process."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError

from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import Call, Gate, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.contracts import ids
from errands.contracts.workflows import RoundSettings, TaskResult
from errands.settings import Settings
from errands.workers import build_worker
from tests.conftest import ROOT, ProcessWorkers, kill_worker, spawn_worker
from tests.helpers import (
    Conversation,
    delegate,
    eventually,
    final,
    general,
    keep_history,
    start_task,
)
from tests.mcp_counter_server import events_in

SCRIPTED = "gpt-sessions"
MODEL = f"openai:{SCRIPTED}"
COUNT = "mcp__counter__count"
LOST = "the session with the MCP server 'counter' ended"


def counter(events: Path, session: str, **more: Any) -> dict[str, Any]:
    return {
        "command": [sys.executable, "-m", "tests.mcp_counter_server", "--events", str(events)],
        "cwd": str(ROOT),
        "session": session,
        "for": ["*"],
        **more,
    }


def parent_of(pid: int) -> int:
    """The parent process id of ``pid`` (Linux: /proc)."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return int(next(line for line in status if line.startswith("PPid:")).split()[1])


def results(request: RecordedRequest) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "tool"]


def counting(times: int, hold: Gate | None = None) -> Callable[[RecordedRequest], Reply]:
    """A branch that calls ``count`` ``times`` times, one step each, then answers with every
    result it got (a JSON list); its second call waits at ``hold`` when given."""

    def branch(request: RecordedRequest) -> Reply:
        got = results(request)
        if len(got) < times:
            return Reply(calls=[Call(COUNT, {})], hold=hold if len(got) == 1 else None)
        return Reply(text=json.dumps(got))

    return branch


def answers(store: SessionStore, result: TaskResult) -> list[list[str]]:
    """Each branch's answer, the results it saw, by ordinal."""
    rows = [r for r in store.list_session(result.session_id) if r.kind == "branch"]
    return [json.loads(r.text) for r in sorted(rows, key=lambda r: r.meta["ordinal"])]


def counted(lines: list[str]) -> list[tuple[int, int]]:
    """(pid, count) of each result line the counter server answered."""
    return [(found["pid"], found["count"]) for found in map(json.loads, lines)]


@pytest.fixture
async def sessions_worker(
    client: Client, settings: Settings, store: SessionStore, tmp_path: Path
) -> AsyncIterator[tuple[Settings, Path]]:
    """A worker of its own whose branches may call the counter server in a task-wide session
    (``counter``), in a per-branch one (``perbranch``, the same program) and in a per-branch one
    closed after a second unused (``idler``)."""
    events = tmp_path / "events.jsonl"
    own = settings.model_copy(
        update={
            "task_queue": f"sessions-{uuid.uuid4().hex[:6]}",
            "mcp_servers": json.dumps(
                {
                    "counter": counter(events, "task"),
                    "perbranch": counter(events, "branch"),
                    "idler": counter(events, "branch", idle_seconds=1),
                }
            ),
        }
    )
    router = ModelRouter(own)
    async with build_worker(client, own, store=store, router=router):
        yield own, events
    await router.aclose()


async def run(
    client: Client, own: Settings, text: str, **settings: Any
) -> tuple[WorkflowHandle[Any, TaskResult], TaskResult]:
    handle = await start_task(
        client, own.task_queue, text, model=MODEL, settings=RoundSettings(**settings)
    )
    return handle, await asyncio.wait_for(handle.result(), 120)


async def test_a_branch_calling_five_times_sees_one_process_counting_one_to_five(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    sessions_worker: tuple[Settings, Path],
) -> None:
    own, events = sessions_worker
    Conversation([delegate(general("count")), final("done")], counting(5), branches=6).install(
        scripted, SCRIPTED
    )

    handle, result = await run(client, own, "Count five times.")

    assert result.status == "replied", result.error
    [lines] = answers(store, result)
    seen = counted(lines)
    assert [count for _, count in seen] == [1, 2, 3, 4, 5]
    assert len({pid for pid, _ in seen}) == 1
    # The task ended: its session was closed, and the server saw it.
    [pid] = {pid for pid, _ in seen}
    await eventually(
        lambda: {"event": "closed", "pid": pid} in events_in(events), "the session to close"
    )
    await keep_history(client, handle.id, "task_mcp_session")
    await keep_history(client, ids.child_workflow_id(handle.id, 0, 1), "branch_mcp_session")


async def test_two_tasks_at_once_each_have_their_own_session(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    sessions_worker: tuple[Settings, Path],
) -> None:
    own, _ = sessions_worker
    Conversation(
        [delegate(general("count")), delegate(general("count")), final("one"), final("two")],
        counting(3),
        branches=8,
    ).install(scripted, SCRIPTED)

    finished = await asyncio.gather(
        run(client, own, "Count in the first task."), run(client, own, "Count in the second.")
    )

    seen = []
    for _, result in finished:
        assert result.status == "replied", result.error
        [lines] = answers(store, result)
        seen.append(counted(lines))
    for one in seen:
        assert [count for _, count in one] == [1, 2, 3]
        assert len({pid for pid, _ in one}) == 1
    assert seen[0][0][0] != seen[1][0][0], "two tasks shared one session"


async def test_branch_sessions_are_per_branch_and_task_sessions_are_shared_by_branches(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    sessions_worker: tuple[Settings, Path],
) -> None:
    own, events = sessions_worker

    def branch(request: RecordedRequest) -> Reply:
        prompt = next(m["content"] for m in request.body["messages"] if m["role"] == "user")
        server = "perbranch" if "per branch" in prompt else "counter"
        got = results(request)
        if len(got) < 2:
            return Reply(calls=[Call(f"mcp__{server}__count", {})])
        return Reply(text=json.dumps(got))

    Conversation(
        [delegate(*(general(p) for p in ["per branch", "per branch"])), final("done")],
        branch,
        branches=6,
    ).install(scripted, SCRIPTED)

    _, result = await run(client, own, "Count per branch.")

    assert result.status == "replied", result.error
    first, second = (counted(lines) for lines in answers(store, result))
    assert [count for _, count in first] == [1, 2]
    assert [count for _, count in second] == [1, 2]
    assert first[0][0] == first[1][0] and second[0][0] == second[1][0]
    assert first[0][0] != second[0][0], "two branches shared a per-branch session"
    # Each branch closed its own session when it ended.
    for pid in (first[0][0], second[0][0]):
        await eventually(
            lambda pid=pid: {"event": "closed", "pid": pid} in events_in(events),
            "each branch's session to close",
        )


async def test_a_session_idle_past_its_timeout_is_closed_and_the_next_call_says_so(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    sessions_worker: tuple[Settings, Path],
) -> None:
    own, events = sessions_worker
    idle = Gate("the branch's second call, until its session was closed for idling")

    def branch(request: RecordedRequest) -> Reply:
        got = results(request)
        if len(got) < 2:
            return Reply(calls=[Call("mcp__idler__count", {})], hold=idle if got else None)
        return Reply(text=json.dumps(got))

    Conversation([delegate(general("count")), final("done")], branch, branches=3).install(
        scripted, SCRIPTED
    )
    handle = await start_task(client, own.task_queue, "Count, idle, count.", model=MODEL)
    await idle.reached()
    [pid] = {e["pid"] for e in events_in(events) if e["event"] == "call"}
    await eventually(
        lambda: {"event": "closed", "pid": pid} in events_in(events), "the idle session to close"
    )
    idle.release()
    result = await asyncio.wait_for(handle.result(), 60)

    assert result.status == "replied", result.error
    [(first, second)] = answers(store, result)
    assert json.loads(first) == {"pid": pid, "count": 1}
    assert second.startswith("[Note: the session with the MCP server 'idler' ended (it was unused")
    again = json.loads(second.split("\n\n", 1)[1])
    assert again["count"] == 1 and again["pid"] != pid


async def test_a_canceled_task_closes_its_session(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    sessions_worker: tuple[Settings, Path],
) -> None:
    own, events = sessions_worker
    held = Gate("the branch's second step, never answered")
    Conversation([delegate(general("count"))], counting(2, hold=held), branches=2).install(
        scripted, SCRIPTED
    )
    handle = await start_task(client, own.task_queue, "Count, then wait.", model=MODEL)
    await held.reached()
    [pid] = {e["pid"] for e in events_in(events) if e["event"] == "call"}

    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as failure:
        await asyncio.wait_for(handle.result(), 60)

    assert isinstance(failure.value.cause, CancelledError)
    await eventually(
        lambda: {"event": "closed", "pid": pid} in events_in(events), "the session to close"
    )


async def test_kill_9_of_the_worker_holding_a_session_moves_it_and_tells_the_model(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    process_workers: ProcessWorkers,
    tmp_path: Path,
) -> None:
    events = tmp_path / "events.jsonl"
    env = {
        **process_workers.env,
        "ERRANDS_MCP_SERVERS": json.dumps({"counter": counter(events, "task")}),
    }
    between = Gate("the branch's second call, until the holder is killed")
    Conversation(
        [delegate(general("count")), final("done")], counting(3, hold=between), branches=5
    ).install(scripted, SCRIPTED)
    workers = [spawn_worker(env), spawn_worker(env)]
    try:
        handle = await start_task(
            client,
            process_workers.queue,
            "Count three times.",
            model=MODEL,
            settings=RoundSettings(heartbeat_timeout_seconds=3),
        )
        await between.reached()
        [first] = [e for e in events_in(events) if e["event"] == "call"]
        holder = parent_of(first["pid"])
        [dead] = [w for w in workers if w.pid == holder]
        kill_worker(dead)
        between.release()
        result = await asyncio.wait_for(handle.result(), 120)
    finally:
        for worker in workers:
            if worker.poll() is None:
                kill_worker(worker)

    assert result.status == "replied", result.error
    # The branch step held when the worker died ran again on the other worker if the dead one
    # had it: one scripted step is spare, and used or not.
    assert sum(scripted.pending().values()) <= 1
    scripted.reset()
    [lines] = answers(store, result)
    seen = (events_in(events), [(r.id, r.text) for r in store.list_session(f"mcp:{handle.id}")])
    # The second call ran in a new session on the other worker; the model was told.
    assert json.loads(lines[0]) == {"pid": first["pid"], "count": 1}
    assert lines[1].startswith("[Note: " + LOST), seen
    assert "the worker that held it stopped" in lines[1]
    moved = json.loads(lines[1].split("\n\n", 1)[1])
    assert moved["count"] == 1 and moved["pid"] != first["pid"]
    assert json.loads(lines[2]) == {"pid": moved["pid"], "count": 2}
    # Nothing ran twice: each call's idempotency key reached the server once.
    keys = [e["key"] for e in events_in(events) if e["event"] == "call"]
    thread = ids.child_workflow_id(handle.id, 0, 1)
    assert keys == [ids.thread_tool_result_id(thread, step, 0) for step in range(3)]
    await keep_history(client, thread, "branch_mcp_session_moved")
