"""Messages into a running task (issue 17): a steer joins the session and reaches the agent's
next step (a reply written without it is discarded), a queued message becomes the session's next
task, and a message to a finished task is refused with the command that starts a new one."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus

import errands
from errands.adapters.scripted import Gate, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.contracts import ids
from errands.contracts.workflows import RoundSettings, TaskResult
from errands.settings import Settings
from tests.conftest import StartTask, run_cli
from tests.helpers import delegate, eventually, final, keep_history, start_task

MODEL = "openai:gpt-steer"


def user_texts(request: RecordedRequest) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "user"]


async def test_a_steer_during_a_model_call_reaches_the_next_step_and_the_stale_reply_is_dropped(
    client: Client,
    store: SessionStore,
    scripted: ScriptedModelServer,
    cli_env: dict[str, str],
    start: StartTask,
) -> None:
    seen: list[RecordedRequest] = []
    first_call = Gate("the first model call")

    def main_agent(request: RecordedRequest) -> Reply:
        seen.append(request)
        if any("also cover cost" in t for t in user_texts(request)):
            return final("Plan, with its cost.")
        return final("Plan, no cost.", hold=first_call)

    scripted.script("gpt-steer", main_agent, main_agent)
    handle = await start("Plan the move.", model=MODEL)
    await first_call.reached()
    said = await run_cli(cli_env, "say", handle.id, "also cover cost", "--json")
    assert said.code == 0, said.stderr
    receipt = said.json()
    assert receipt["message_id"] == ids.steer_message_id(handle.id, 1)
    assert receipt["status"] == "accepted"
    first_call.release()
    result = await asyncio.wait_for(handle.result(), 60)

    assert result.reply == "Plan, with its cost."
    assert len(seen) == 2 and user_texts(seen[1])[-1].endswith("also cover cost")
    history = await run_cli(cli_env, "history", result.session_id, "--json")
    rows = history.json()["messages"]
    steer = [r for r in rows if r["id"] == ids.steer_message_id(handle.id, 1)]
    assert [(r["role"], r["text"]) for r in steer] == [("user", "also cover cost")]
    texts = [r["text"] for r in rows]
    assert texts.count("also cover cost") == 1
    assert "Plan, no cost." not in texts, "the reply written without the message was dropped"
    await keep_history(client, handle.id, "steer_during_a_model_call")
    log = [e.type for e in store.list_events(handle.id)]
    assert log.count("message_received") == 1 and log.count("message_delivered") == 1
    assert log.index("message_received") < log.index("message_delivered") < log.index("replied")


async def test_a_queued_message_becomes_the_sessions_next_task(
    client: Client,
    store: SessionStore,
    scripted: ScriptedModelServer,
    cli_env: dict[str, str],
    start: StartTask,
) -> None:
    first_call = Gate("the first task's model call")

    def main_agent(request: RecordedRequest) -> Reply:
        asked = user_texts(request)[-1].split("] ", 1)[-1]
        return final(f"answered: {asked}", hold=first_call)

    scripted.script("gpt-steer", main_agent, main_agent)
    handle = await start("First question.", model=MODEL)
    await first_call.reached()
    queued = await run_cli(cli_env, "say", handle.id, "Then this one.", "--queue", "--json")
    assert queued.code == 0, queued.stderr
    assert queued.json()["status"] == "queued"
    first_call.release()
    first = await asyncio.wait_for(handle.result(), 60)

    assert first.reply == "answered: First question."
    assert first.next_task == ids.queued_task_id(handle.id, 1)
    await keep_history(client, handle.id, "queued_message")
    second = await asyncio.wait_for(
        client.get_workflow_handle(first.next_task, result_type=TaskResult).result(), 60
    )
    assert second.session_id == first.session_id
    assert second.reply == "answered: Then this one."
    texts = [r.text for r in store.list_session(first.session_id)]
    assert texts.index("Then this one.") > texts.index(first.reply)


async def test_a_message_to_a_finished_task_is_refused_with_the_command_to_start_one(
    scripted: ScriptedModelServer, cli_env: dict[str, str], start: StartTask
) -> None:
    scripted.script("gpt-steer", final("done"))
    handle = await start("Quick one.", model=MODEL)
    result = await asyncio.wait_for(handle.result(), 60)
    refused = await run_cli(cli_env, "say", handle.id, "one more thing")
    assert refused.code == 2
    assert f"errands run --session {result.session_id} TEXT" in refused.stderr


async def test_a_message_queued_on_a_finished_task_starts_the_sessions_next_task_at_once(
    client: Client,
    store: SessionStore,
    scripted: ScriptedModelServer,
    cli_env: dict[str, str],
    start: StartTask,
) -> None:
    scripted.script("gpt-steer", final("done"), final("the follow-up, done"))
    handle = await start("Quick one.", model=MODEL)
    first = await asyncio.wait_for(handle.result(), 60)

    queued = await run_cli(cli_env, "say", handle.id, "And one more thing.", "--queue", "--json")

    assert queued.code == 0, queued.stderr
    receipt = queued.json()
    assert receipt["status"] == "started"
    assert receipt["task_id"] == ids.queued_after_end_task_id(handle.id)
    second = await asyncio.wait_for(
        client.get_workflow_handle(receipt["task_id"], result_type=TaskResult).result(), 60
    )
    assert second.session_id == first.session_id
    assert second.reply == "the follow-up, done"
    asked = scripted.requests_for("gpt-steer")[1]
    assert user_texts(asked)[-1].endswith("And one more thing.")
    texts = [r.text for r in store.list_session(first.session_id)]
    assert texts.index("And one more thing.") > texts.index("done")


async def test_a_second_message_queued_on_a_finished_task_waits_behind_the_first(
    client: Client, settings: Settings, scripted: ScriptedModelServer, start: StartTask
) -> None:
    follow_up = Gate("the first follow-up's model call")
    scripted.script(
        "gpt-steer", final("done"), final("first follow-up", hold=follow_up), final("second")
    )
    handle = await start("Quick one.", model=MODEL)
    await asyncio.wait_for(handle.result(), 60)
    tasks = errands.Client(client, settings)

    started = await tasks.task(handle.id).say("First follow-up.", mode="queue")
    await follow_up.reached()
    behind = await tasks.task(handle.id).say("Second follow-up.", mode="queue")
    follow_up.release()

    assert started.status == "started" and behind.status == "queued"
    first = await tasks.task(started.task_id or "").wait()
    assert first.reply == "first follow-up"
    assert first.next_task is not None
    assert (await tasks.task(first.next_task).wait()).reply == "second"


async def test_an_interrupt_cancels_the_running_branches_and_the_next_round_sees_the_message(
    client: Client,
    store: SessionStore,
    scripted: ScriptedModelServer,
    cli_env: dict[str, str],
    start: StartTask,
) -> None:
    rounds: list[RecordedRequest] = []
    branches: list[RecordedRequest] = []
    never = Gate("the branches, cancelled by the interrupt")

    def model(request: RecordedRequest) -> Reply:
        tools = [t["function"]["name"] for t in request.body.get("tools", [])]
        if "final_reply" not in tools:
            branches.append(request)
            return Reply(text="slow branch result", hold=never)
        rounds.append(request)
        if len(rounds) == 1:
            return delegate("Slow part 1", "Slow part 2", reply="Two slow parts.")
        return final("Changed course.")

    scripted.responder = model
    try:
        handle = await start("Do two slow parts.", model=MODEL)
        await never.reached(2)
        said = await run_cli(cli_env, "say", handle.id, "Stop, just summarise.", "--interrupt")
        assert said.code == 0, said.stderr
        result = await asyncio.wait_for(handle.result(), 60)
    finally:
        scripted.responder = None

    assert result.reply == "Changed course."
    assert result.rounds == 2
    await keep_history(client, handle.id, "interrupted_round")
    round1 = json.dumps(rounds[1].body["messages"])
    assert "Stop, just summarise." in round1
    assert "the user interrupted the round" in round1
    rows = [r for r in store.list_session(result.session_id) if r.kind == "branch"]
    assert sorted(r.meta["status"] for r in rows) == ["failed", "failed"]
    for k in (1, 2):
        child = client.get_workflow_handle(ids.child_workflow_id(handle.id, 0, k))
        assert (await child.describe()).status.name == "CANCELED"  # type: ignore[union-attr]


async def test_a_message_queued_as_the_task_ends_starts_the_sessions_next_task(
    client: Client,
    settings: Settings,
    scripted: ScriptedModelServer,
    worker: Any,
) -> None:
    """The task has replied but is still open, answering a side question: a queued message
    is refused by the task then, and the client makes it the next task once the task closes."""
    side_question = "btw, anything left?"
    round_call = Gate("the round's model call")
    side_calls = Gate("the side question's model calls, never answered")

    def model(request: RecordedRequest) -> Reply:
        if any(side_question in str(m.get("content")) for m in request.body["messages"]):
            return Reply(text="never sent", hold=side_calls)
        if user_texts(request)[-1].endswith("Then this."):
            return final("the follow-up, done")
        return final("done", hold=round_call)

    scripted.responder = model
    try:
        handle = await start_task(
            client,
            settings.task_queue,
            "Quick one.",
            model=MODEL,
            settings=RoundSettings(side_question_timeout_seconds=3),
        )
        tasks = errands.Client(client, settings)
        await round_call.reached()
        asking = asyncio.create_task(tasks.task(handle.id).btw(side_question))
        await side_calls.reached()
        round_call.release()

        async def ending() -> bool:
            status = await handle.query("status", result_type=TaskResult)
            running = (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
            return status.status == "replied" and running

        await eventually(ending, "the task to have replied and wait on its side question")
        receipt = await tasks.task(handle.id).say("Then this.", mode="queue")
        await asyncio.gather(asking, return_exceptions=True)
        follow_up = await tasks.task(receipt.task_id or "").wait(timeout=60)
    finally:
        scripted.responder = None

    assert (receipt.status, receipt.task_id) == ("started", ids.queued_after_end_task_id(handle.id))
    assert follow_up.reply == "the follow-up, done"
    assert (await handle.result()).reply == "done"
