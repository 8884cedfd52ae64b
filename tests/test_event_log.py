"""The event log (issue 17): activities write every event of a task to the store, in order and
once each; `errands watch` and `TaskHandle.events()` read it, live, adding nothing to the
task's history."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from temporalio.client import Client, WorkflowFailureError

from errands.adapters.scripted import Call, Gate, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.client import Client as ErrandsClient
from errands.contracts.events import StoredEvent
from errands.contracts.workflows import RoundSettings
from errands.settings import Settings
from tests.conftest import StartTask, read_stderr_until, run_cli, running_cli
from tests.helpers import Conversation, keep_history, start_task
from tests.mcp_notes import Servers

MODEL = "openai:gpt-events"


def three_branches() -> list[Reply]:
    subtasks = [{"type": "general", "prompt": f"Part {k}"} for k in (1, 2, 3)]
    return [
        Reply(calls=[Call("delegate", {"reply": "Three parts.", "subtasks": subtasks})]),
        Reply(calls=[Call("final_reply", {"text": "All three parts are done."})]),
    ]


def branch(request: RecordedRequest) -> Reply:
    return Reply(text="part done")


async def test_a_delegating_tasks_log_holds_each_event_once_in_order(
    scripted: ScriptedModelServer, cli_env: dict[str, str], start: StartTask
) -> None:
    Conversation(three_branches(), branch, branches=3).install(scripted, "gpt-events")
    handle = await start("Do it in three parts.", model=MODEL)
    watching = asyncio.create_task(run_cli(cli_env, "watch", handle.id, "--json"))
    result = await asyncio.wait_for(handle.result(), 60)
    watched = await asyncio.wait_for(watching, 60)

    assert result.status == "replied"
    assert watched.code == 0, watched.stderr
    events = [json.loads(line) for line in watched.stdout.splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert types[0] == "task_started" and types[-1] == "replied"
    main_calls = [e for e in events if e["type"] == "model_call_finished" and e["where"] == "main"]
    counts = Counter(types)
    assert counts["round_started"] == 2
    assert len(main_calls) == 2
    assert [e["subtasks"] for e in events if e["type"] == "delegated"] == [3]
    assert counts["branch_started"] == counts["branch_finished"] == 3, " ".join(types)
    assert counts["model_call_finished"] == 5  # two rounds, three branches
    assert counts["replied"] == 1
    # In order: a round starts before its call, delegates before its branches start, and
    # each branch's model call comes between its start and its end.
    assert types.index("delegated") < types.index("branch_started")
    for k in (1, 2, 3):
        where = f"r0/b{k}"
        started = next(
            i for i, e in enumerate(events) if e["type"] == "branch_started" and e["ordinal"] == k
        )
        called = next(
            i
            for i, e in enumerate(events)
            if e.get("where") == where and e["type"] == "model_call_finished"
        )
        finished = next(
            i for i, e in enumerate(events) if e["type"] == "branch_finished" and e["ordinal"] == k
        )
        assert started < called < finished
    assert all(e["task_id"] == result.task_id and e["at"] for e in events)

    after = await run_cli(cli_env, "watch", handle.id, "--json", "--after", "5")
    assert [json.loads(line)["seq"] for line in after.stdout.splitlines()] == list(
        range(6, len(events) + 1)
    )
    plain = await run_cli(cli_env, "watch", handle.id)
    assert plain.stdout.splitlines()[0].split()[:2] == ["1", "task_started"]


async def test_errands_run_prints_a_delegating_tasks_branches_from_its_event_log(
    scripted: ScriptedModelServer, worker: Any, cli_env: dict[str, str], store: SessionStore
) -> None:
    Conversation(three_branches(), branch, branches=3).install(scripted, "gpt-events")
    ran = await run_cli({**cli_env, "ERRANDS_MODEL": MODEL}, "run", "Do it in three parts.")

    assert ran.code == 0, ran.stderr
    assert ran.stdout.strip().endswith("All three parts are done.")
    lines = [line.strip() for line in ran.stderr.splitlines()]
    task_id = next(line for line in lines if line.startswith("errands: task ")).split()[2]
    types = [e.type for e in store.list_events(task_id, after_seq=0)]
    assert types[-1] == "replied", "the run printed a task whose log is complete"
    # What it printed of the log, in the log's own order.
    assert lines.index("round 0") < lines.index("round 0: 3 subtasks: Three parts.")
    for k in (1, 2, 3):
        started = lines.index(f"round 0 · subtask {k} (general) started")
        finished = lines.index(f"round 0 · subtask {k} (general) completed")
        assert lines.index("round 0: 3 subtasks: Three parts.") < started < finished
        assert finished < lines.index("round 1")
    shown = [line for line in lines if line.startswith(("round", "your message"))]
    assert len(shown) == 2 + 1 + 3 + 3, ran.stderr


async def test_errands_run_shows_a_tool_call_waiting_for_approval_from_the_log_once(
    scripted: ScriptedModelServer,
    asking_worker: Settings,
    servers: Servers,
    cli_env: dict[str, str],
) -> None:
    def main_agent(request: RecordedRequest) -> Reply:
        if not [m for m in request.body["messages"] if m["role"] == "tool"]:
            return Reply(
                text="I will note this down.",
                calls=[Call("mcp__web__write", {"name": "cli-run", "text": "from the CLI"})],
            )
        return Reply(calls=[Call("final_reply", {"text": "Noted."})])

    scripted.script("gpt-tools", main_agent, main_agent)
    env = {
        **cli_env,
        "ERRANDS_MODEL": "openai:gpt-tools",
        "ERRANDS_TASK_QUEUE": asking_worker.task_queue,
    }
    async with running_cli(env, "run", "Note this down", stdout=asyncio.subprocess.PIPE) as proc:
        assert proc.stderr is not None and proc.stdout is not None
        seen = await read_stderr_until(proc, "approve with:")
        task_id = seen.split("errands: task ", 1)[1].split()[0]
        assert "mcp__web__write (main) waits for your approval." in seen
        assert "  │ I will note this down." in seen
        assert "from the CLI" in seen
        assert f"approve with: errands approve {task_id} --sha256 " in seen
        assert "[--always]" in seen
        digest = seen.split("--sha256 ", 1)[1].split()[0]
        approved = await run_cli(env, "approve", task_id, "--sha256", digest)
        assert approved.code == 0, approved.stderr
        rest = (await asyncio.wait_for(proc.stderr.read(), 60)).decode()
        out = (await asyncio.wait_for(proc.stdout.read(), 60)).decode()
        assert await proc.wait() == 0, seen + rest
    assert out.strip().endswith("Noted.")
    assert "waits for your approval" not in rest, "the approval is shown once"
    assert "main: mcp__web__write" in seen + rest
    assert (servers.web / "cli-run.txt").read_text() == "from the CLI"


async def test_events_arrive_while_the_task_runs_and_a_failed_task_ends_its_log(
    client: Client,
    settings: Settings,
    store: SessionStore,
    scripted: ScriptedModelServer,
    worker: Any,
) -> None:
    parts = Gate("the three branches' model calls")
    Conversation(
        three_branches(), lambda r: Reply(text="slow part", hold=parts), branches=3
    ).install(scripted, "gpt-events")
    handle = await start_task(client, settings.task_queue, "Slowly, in three parts.", model=MODEL)
    task = ErrandsClient(client, settings, store=store).task(handle.id)
    seen: list[StoredEvent] = []
    ran_while_seen: list[bool] = []
    async for event in task.events():
        seen.append(event)
        if event.type == "branch_started":
            ran_while_seen.append((await task.status()).status == "running")
            if len(ran_while_seen) == 3:
                parts.release()  # the branches answer only once all three were seen
    assert seen[-1].type == "replied"
    assert ran_while_seen and all(ran_while_seen), "events were read live, not after the end"

    # A task that fails ends its log with `failed`, saying why.
    scripted.script("gpt-events", Reply(text="I will just talk."), Reply(text="Still talking."))
    failing = await start_task(
        client,
        settings.task_queue,
        "Fail, please.",
        model=MODEL,
        settings=RoundSettings(step_budget=2, round_retry_limit=1),
    )
    failed = await asyncio.wait_for(failing.result(), 60)
    assert failed.status == "failed"
    log = [e async for e in ErrandsClient(client, settings, store=store).task(failing.id).events()]
    await keep_history(client, failing.id, "event_log_failed")
    assert log[-1].type == "failed"
    assert log[-1].data["kind"] == failed.error.kind if failed.error else False


async def test_a_canceled_task_ends_its_log_with_canceled(
    client: Client,
    settings: Settings,
    store: SessionStore,
    scripted: ScriptedModelServer,
    start: StartTask,
) -> None:
    never = Gate("the model call, canceled")
    scripted.script("gpt-events", Reply(calls=[Call("final_reply", {"text": "late"})], hold=never))
    handle = await start("Take your time.", model=MODEL)
    task = ErrandsClient(client, settings, store=store).task(handle.id)
    async for event in task.events():
        if event.type == "model_call_started":
            await handle.cancel()
        if event.type == "canceled":
            break
    try:
        await handle.result()
    except WorkflowFailureError:
        pass
    await keep_history(client, handle.id, "event_log_canceled")
    log = [e.type for e in await asyncio.to_thread(store.list_events, handle.id)]
    assert log[-1] == "canceled"
    assert "replied" not in log


async def test_a_side_question_is_logged_asked_and_answered(
    client: Client,
    settings: Settings,
    store: SessionStore,
    scripted: ScriptedModelServer,
    start: StartTask,
) -> None:
    scripted.script(
        "gpt-events",
        Reply(calls=[Call("final_reply", {"text": "done"})]),
        Reply(text="I replied that it is done."),
    )
    handle = await start("Finish quickly.", model=MODEL)
    await asyncio.wait_for(handle.result(), 60)
    answer = await ErrandsClient(client, settings, store=store).task(handle.id).btw("What now?")

    log = await asyncio.to_thread(store.list_events, handle.id)
    asked, answered = [e for e in log if e.type.startswith("side_question")]
    assert (asked.type, asked.data["question"]) == ("side_question_asked", "What now?")
    assert answered.type == "side_question_answered"
    assert answered.data["answer"] == answer.answer and answered.cause == asked.cause
