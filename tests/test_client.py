"""``errands.Client`` against the real dev server, worker and scripted model: every operation a
frontend needs, its typed refusals, and one result shape whether a task runs or has ended."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from temporalio.client import Client as TemporalClient

from errands import errors
from errands.adapters.scripted import Fail, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.client import Client, TaskHandle, new_task_id
from errands.settings import Settings
from tests.conftest import run_cli
from tests.helpers import DATABASE, Conversation, ask, delegate, eventually, final, general
from tests.test_rounds import answer_branch, branch_prompt


def session() -> str:
    return f"c-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def errands_client(
    client: TemporalClient, worker: object, settings: Settings, store: SessionStore
) -> Client:
    return Client(client, settings, store=store)


async def asked(task: TaskHandle) -> dict[str, Any]:
    """The task's pending question, once it asks."""

    async def pending() -> dict[str, Any] | None:
        return (await task.status()).pending_question

    return await eventually(pending, f"task {task.task_id} to ask its question")


async def test_run_replies_and_says_the_model_wrote_it(
    errands_client: Client, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-client", final("Hello from the model."))
    result = await errands_client.run("Say hello", model="openai:gpt-client")
    assert result.status == "replied" and result.reply == "Hello from the model."
    assert result.replied_by == "model" and result.join_reason is None
    assert (result.rounds, result.attempts, result.steps) == (1, 1, 1)
    assert result.raise_for_status() is result


async def test_a_live_status_and_a_closed_result_have_one_shape(
    errands_client: Client, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-client", ask(DATABASE), final("PostgreSQL it is."))
    task = await errands_client.start("Set it up", session=session(), model="openai:gpt-client")
    await asked(task)
    live = (await task.status()).public()
    assert live["status"] == "waiting_for_user" and live["pending_question"]
    await task.answer({"q1": ["PostgreSQL"]})
    closed = (await task.wait(timeout=60)).public()
    assert closed["status"] == "replied" and closed["reply"] == "PostgreSQL it is."
    assert set(live) == set(closed), "one shape, running or ended"
    assert closed["rounds"] == 1, "the answered question resumed the same round"


async def test_a_task_id_already_used_is_refused_and_the_first_task_is_untouched(
    errands_client: Client, store: SessionStore, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-client", final("first"))
    sid = session()
    task_id = new_task_id(sid)
    model = "openai:gpt-client"
    first = await errands_client.start("one", session=sid, model=model, task_id=task_id)
    assert (await first.wait(timeout=60)).reply == "first"
    with pytest.raises(errors.Conflict, match="exists already"):
        await errands_client.start("two", session=sid, model=model, task_id=task_id)
    texts = [row.text for row in store.list_session(sid) if row.kind == "user"]
    assert texts == ["one"], "the refused start wrote nothing"


@pytest.mark.fast
def test_task_ids_carry_64_random_bits() -> None:
    ids = {new_task_id("s1") for _ in range(1000)}
    assert len(ids) == 1000
    assert all(len(i.rsplit("-", 1)[1]) == 16 for i in ids)


async def test_bad_input_is_refused_before_anything_starts(errands_client: Client) -> None:
    sid = session()
    with pytest.raises(errors.InvalidRequest, match="blank"):
        await errands_client.start("   ", session=sid)
    with pytest.raises(errors.InvalidRequest, match="session id") as bad_session:
        await errands_client.start("hi", session="bad id")
    assert bad_session.value.field is None
    with pytest.raises(errors.InvalidRequest, match="provider:model") as bad_model:
        await errands_client.start("hi", session=sid, model="gpt")
    assert bad_model.value.field == "model"
    assert await errands_client.history(sid) == []


async def test_unknown_and_ended_tasks_are_refused_with_their_own_errors(
    errands_client: Client, scripted: ScriptedModelServer
) -> None:
    with pytest.raises(errors.TaskNotFound, match="no task 'task-nope-1'"):
        await errands_client.task("task-nope-1").status()
    scripted.script("gpt-client", final("done"))
    result = await errands_client.run("quick", model="openai:gpt-client")
    ended = errands_client.task(result.task_id)
    with pytest.raises(errors.TaskEnded) as cancel:
        await ended.cancel()
    assert (cancel.value.ended, cancel.value.task_id) == ("completed", result.task_id)
    with pytest.raises(errors.TaskEnded):
        await ended.answer({"q1": ["x"]})


async def test_answers_are_validated_and_a_stale_question_set_is_a_conflict(
    errands_client: Client, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-client", ask(DATABASE), final("SQLite, then."))
    task = await errands_client.start("Set it up", model="openai:gpt-client")
    pending = await asked(task)
    with pytest.raises(errors.AnswerRejected, match="PostgreSQL"):
        await task.answer({"q1": ["MongoDB"]})
    with pytest.raises(errors.Conflict, match="read it again"):
        await task.answer({"q1": ["SQLite"]}, question_set_id="not-it")
    receipt = await task.answer({"q1": ["SQLite"]}, question_set_id=pending["id"])
    assert receipt.question_set_id == pending["id"] and receipt.status == "answered"
    assert (await task.wait(timeout=60)).reply == "SQLite, then."


async def test_events_follow_a_delegating_task_from_its_log_to_its_result(
    errands_client: Client, scripted: ScriptedModelServer
) -> None:
    Conversation(
        [delegate(general("one", 1), general("two", 1)), final("both done")],
        answer_branch,
        branches=2,
    ).install(scripted, "gpt-client")
    task = await errands_client.start("split it", model="openai:gpt-client")
    events = [e async for e in task.events()]
    steps = [e.type for e in events if e.type in ("round_started", "delegated", "replied")]
    assert steps == ["round_started", "delegated", "round_started", "replied"]
    delegated = next(e for e in events if e.type == "delegated")
    assert (delegated.data["subtasks"], delegated.data["types"]) == (2, ["general", "general"])
    branches = [(e.type, e.data["ordinal"]) for e in events if e.type.startswith("branch_")]
    assert sorted(branches) == [
        ("branch_finished", 1),
        ("branch_finished", 2),
        ("branch_started", 1),
        ("branch_started", 2),
    ]
    result = await task.wait()
    assert result.reply == "both done" and events[-1].data["chars"] == len("both done")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_a_join_reply_says_it_was_a_join_and_why(
    errands_client: Client, scripted: ScriptedModelServer
) -> None:
    Conversation(
        [delegate(general("first", 1)), Fail(401, "key revoked")],
        lambda r: Reply(text=f"good result for {branch_prompt(r).splitlines()[0]}"),
        branches=1,
    ).install(scripted, "gpt-client")
    result = await errands_client.run("q", model="openai:gpt-client")
    assert result.status == "replied" and result.replied_by == "join"
    assert result.join_reason is not None and "credential" in result.join_reason.lower()


async def test_a_round_retried_after_an_outage_counts_once_in_rounds(
    errands_client: Client, settings: Settings, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-flaky", Fail(503, "down"), final("back"))
    quick = settings.model_copy(
        update={"model_max_attempts": 1, "round_retry_seconds": 0.1, "model": "openai:gpt-flaky"}
    )
    result = await Client(errands_client.temporal, quick).run("q")
    assert result.reply == "back"
    assert (result.rounds, result.attempts) == (1, 2)


async def test_a_failed_task_raises_on_request_with_its_kind(
    errands_client: Client, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-client", Fail(401, "key revoked"))
    result = await errands_client.run("q", model="openai:gpt-client")
    assert result.status == "failed"
    with pytest.raises(errors.TaskFailed) as failed:
        result.raise_for_status()
    assert failed.value.kind == "credential" and failed.value.result is result


async def test_a_side_question_about_a_finished_task_is_answered(
    errands_client: Client, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-client", final("The answer is 42."), Reply(text="It said 42."))
    result = await errands_client.run("q", model="openai:gpt-client")
    answer = await errands_client.task(result.task_id).btw("what did it say?")
    assert answer.answer == "It said 42."


async def test_a_task_nobody_serves_is_a_no_worker_error_naming_the_queue(
    client: TemporalClient, settings: Settings, store: SessionStore
) -> None:
    queue = f"nobody-{uuid.uuid4().hex[:6]}"
    lonely = Client(client, settings.model_copy(update={"task_queue": queue}), store=store)
    task = await lonely.start("anyone?", model="openai:gpt-lonely")
    try:
        with pytest.raises(errors.NoWorker, match=f"no worker is polling task queue {queue}"):
            await task.status()
        with pytest.raises(errors.NoWorker) as btw:
            await task.btw("status?")
        assert btw.value.task_queue == queue
        with pytest.raises(TimeoutError):
            await task.wait(timeout=0.5)
    finally:
        await client.get_workflow_handle(task.task_id).terminate("test cleanup")


async def test_a_spec_constant_set_in_the_environment_reaches_the_task(
    cli_env: dict[str, str], worker: object, scripted: ScriptedModelServer
) -> None:
    """ERRANDS_STEP_BUDGET=3: two delegating rounds spend 2 steps, so the third is final."""
    convo = Conversation(
        [delegate(general("a", 1)), delegate(general("b", 1)), final("done")],
        answer_branch,
        branches=2,
    ).install(scripted, "gpt-budget")
    env = {**cli_env, "ERRANDS_MODEL": "openai:gpt-budget", "ERRANDS_STEP_BUDGET": "3"}
    done = await run_cli(env, "run", "do it in parts", "--json")
    assert done.code == 0, done.stderr
    assert done.json()["steps"] == 3
    third = convo.main_requests[2].body
    assert [t["function"]["name"] for t in third["tools"]] == ["final_reply"]
    assert "step budget is spent (2 of 3 steps used)" in third["messages"][0]["content"]
    second = convo.main_requests[1].body
    assert "delegate" in json.dumps(second["tools"]), "with 2 steps left a round may delegate"
