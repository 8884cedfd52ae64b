"""Side questions (/btw) and the advisor on the real dev server (SPEC §3 and §4)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError

from errands.adapters.scripted import Fail, Gate, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.contracts.workflows import RoundSettings, TaskResult
from errands.settings import Settings
from tests.conftest import StartTask, run_cli
from tests.helpers import (
    ACTIVITY_SCHEDULED,
    DATABASE,
    advisor_call,
    ask,
    delegate,
    events_of,
    eventually,
    final,
    general,
    history_events,
    keep_history,
    start_task,
    until_waiting,
)

MODEL = "openai:gpt-side"
SIDE_Q = "btw, what have you found so far?"


def tool_names(request: RecordedRequest) -> list[str]:
    return [t["function"]["name"] for t in request.body.get("tools", [])]


def is_side(request: RecordedRequest) -> bool:
    return any(SIDE_Q in (m.get("content") or "") for m in request.body["messages"])


class Script:
    """Main rounds, branches and side questions of one model, told apart by their requests."""

    def __init__(self, main: list[Any], side: list[Any], branch: Any = None) -> None:
        self.main, self.side, self.branch = list(main), list(side), branch
        self.main_requests: list[RecordedRequest] = []
        self.side_requests: list[RecordedRequest] = []
        self.branch_requests: list[RecordedRequest] = []

    def __call__(self, request: RecordedRequest) -> Any:
        if is_side(request):
            self.side_requests.append(request)
            return self.side.pop(0)
        if "final_reply" not in tool_names(request):
            self.branch_requests.append(request)
            return self.branch(request)
        self.main_requests.append(request)
        return self.main.pop(0)


def snapshot(store: SessionStore, session_id: str) -> tuple[list[Any], dict[str, Any]]:
    rows = [r.model_dump() for r in store.list_session(session_id)]
    return rows, store.list_decisions(session_id)


async def side_question_workflow(client: Client, task_id: str) -> str:
    """The id of the workflow that answered a finished task's side question (visibility lags
    a moment behind the workflow itself)."""

    async def listed() -> str | None:
        async for w in client.list_workflows('WorkflowType = "SideQuestionWorkflow"'):
            if w.id.startswith(f"{task_id}/btw-"):
                return w.id
        return None

    return await eventually(listed, f"the side-question workflow of {task_id} in visibility")


async def test_btw_while_a_round_is_in_flight_replays_the_rounds_exact_prefix(
    client: Client, cli_env, store: SessionStore, scripted: ScriptedModelServer, start: StartTask
) -> None:
    held = Gate("the second round's model call")
    script = Script(
        main=[
            delegate(general("check the logs", 1), reply="Looking."),
            final("All good.", hold=held),
        ],
        side=[final("sneaky"), Reply(text="The logs are clean.")],
        branch=lambda r: Reply(text="logs are clean"),
    )
    scripted.script("gpt-side", *[script] * 5)
    handle = await start("Check the service", model=MODEL)
    await held.reached()
    session_id = (await handle.query("status", result_type=TaskResult)).session_id
    before = snapshot(store, session_id)

    answered = await run_cli(cli_env, "btw", handle.id, SIDE_Q, "--json")
    assert answered.code == 0, answered.stderr
    assert answered.json()["answer"] == "The logs are clean."
    assert answered.json()["path"] == "preferred"
    assert snapshot(store, session_id) == before, "nothing added, no decision touched"
    held.release()

    result = await handle.result()
    assert result.reply == "All good."
    assert snapshot(store, session_id)[1] == before[1]

    round1 = script.main_requests[1].body
    side = script.side_requests[0].body
    assert side["tools"] == round1["tools"], "same tools, byte for byte"
    assert json.dumps(side["tools"]) == json.dumps(round1["tools"])
    assert side["messages"][: len(round1["messages"])] == round1["messages"]
    refused = script.side_requests[1].body["messages"]
    assert refused[-1]["role"] == "tool" and "Refused" in refused[-1]["content"]

    activity_types = {
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in (await handle.fetch_history()).events
        if e.HasField("activity_task_scheduled_event_attributes")
    }
    assert "run_branch_tool" not in activity_types
    assert result.steps == 2, "the side question did not touch the budget"
    assert result.usage.parts["side_questions"]["openai:gpt-side"].calls == 2
    await keep_history(client, handle.id, "side_question_in_flight")


async def test_btw_while_the_task_waits_on_a_question(
    cli_env, store: SessionStore, scripted: ScriptedModelServer, start: StartTask
) -> None:
    script = Script(
        main=[ask(DATABASE), final("PostgreSQL it is.")], side=[Reply(text="Waiting on you.")]
    )
    scripted.script("gpt-side", *[script] * 3)
    handle = await start("Set it up", model=MODEL)
    status = await until_waiting(handle)
    before = snapshot(store, status.session_id)
    answered = await run_cli(cli_env, "btw", handle.id, SIDE_Q, "--json")
    assert answered.json()["answer"] == "Waiting on you."
    assert snapshot(store, status.session_id) == before
    assert (await handle.query("status", result_type=TaskResult)).status == "waiting_for_user"
    await handle.execute_update(
        "answer_question",
        {"question_set_id": status.pending_question["id"], "answers": {"q1": ["PostgreSQL"]}},  # type: ignore[index]
    )
    assert (await handle.result()).reply == "PostgreSQL it is."


async def test_btw_after_the_task_replied_answers_from_its_last_round(
    client: Client,
    worker,
    cli_env,
    settings: Settings,
    store: SessionStore,
    scripted: ScriptedModelServer,
) -> None:
    script = Script(main=[final("Done: 3 files changed.")], side=[Reply(text="Three files.")])
    scripted.script("gpt-side", *[script] * 2)
    handle = await start_task(
        client,
        settings.task_queue,
        "Fix it",
        model=MODEL,
        settings=RoundSettings(side_question_timeout_seconds=42),
    )
    result = await handle.result()
    before = snapshot(store, result.session_id)
    answered = await run_cli(cli_env, "btw", handle.id, SIDE_Q, "--json")
    assert answered.code == 0, answered.stderr
    assert answered.json()["answer"] == "Three files."
    assert snapshot(store, result.session_id) == before
    side = script.side_requests[0].body
    assert side["messages"][0] == script.main_requests[0].body["messages"][0]
    # Answered by a short-lived workflow, on the finished task's own side-question timeout.
    btw = await side_question_workflow(client, handle.id)
    scheduled = events_of(await history_events(client.get_workflow_handle(btw)), ACTIVITY_SCHEDULED)
    timeout = scheduled[0].activity_task_scheduled_event_attributes.start_to_close_timeout
    assert timeout.ToSeconds() == 42


@pytest.mark.parametrize("ending", ["cancel", "terminate"])
async def test_btw_after_the_task_was_stopped_answers_from_its_last_round(
    cli_env, store: SessionStore, scripted: ScriptedModelServer, ending: str, start: StartTask
) -> None:
    """A canceled or terminated task has no result; its last state still gives the side
    question the task's round, model and session."""
    script = Script(main=[ask(DATABASE)], side=[Reply(text="It was asking about the database.")])
    scripted.script("gpt-side", *[script] * 2)
    handle = await start("Set it up", model=MODEL)
    waiting = await until_waiting(handle)
    if ending == "cancel":
        await handle.cancel()
    else:
        await handle.terminate(reason="stuck in review")
    with pytest.raises(WorkflowFailureError):
        await handle.result()

    shown = await run_cli(cli_env, "status", handle.id, "--json")
    state = shown.json()
    assert state["session_id"] == waiting.session_id
    assert state["last_round"]["upto_seq"] == waiting.last_round.upto_seq
    if ending == "cancel":
        assert (state["status"], state["error"]["kind"]) == ("canceled", "canceled")
    else:
        assert (state["status"], state["error"]["kind"]) == ("failed", "terminated")
        assert "stuck in review" in state["error"]["message"]

    answered = await run_cli(cli_env, "btw", handle.id, SIDE_Q, "--json")
    assert answered.code == 0, answered.stderr
    assert answered.json()["answer"] == "It was asking about the database."
    side = script.side_requests[0].body
    assert side["messages"][0] == script.main_requests[0].body["messages"][0]
    assert side["tools"] == script.main_requests[0].body["tools"]


async def test_a_second_side_question_in_flight_is_refused(
    cli_env, scripted: ScriptedModelServer, start: StartTask
) -> None:
    held = Gate("the first side question's model call")
    script = Script(
        main=[ask(DATABASE), final("ok")],
        side=[Reply(text="slow answer", hold=held)],
    )
    scripted.script("gpt-side", *[script] * 3)
    handle = await start("Set it up", model=MODEL)
    status = await until_waiting(handle)
    first = asyncio.create_task(run_cli(cli_env, "btw", handle.id, SIDE_Q))
    await held.reached()
    second = await run_cli(cli_env, "btw", handle.id, SIDE_Q)
    assert second.code == 2 and "already answering a side question" in second.stderr
    held.release()
    assert (await first).code == 0
    empty = await run_cli(cli_env, "btw", handle.id, "   ")
    assert empty.code == 2 and "empty" in empty.stderr
    await handle.execute_update(
        "answer_question",
        {"question_set_id": status.pending_question["id"], "answers": {"q1": ["SQLite"]}},  # type: ignore[index]
    )
    await handle.result()


async def test_the_advisor_answers_the_agent_in_one_tool_less_step(
    client: Client, scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-main", advisor_call("Should I split this?"), final("Split it."))
    scripted.script("gpt-advisor", Reply(text="Yes: split by service."))
    handle = await start(
        "Plan the migration",
        model="openai:gpt-main",
        advisor_model="openai:gpt-advisor",
    )
    result = await handle.result()
    assert result.reply == "Split it."
    advisor = scripted.requests_for("gpt-advisor")[0].body
    assert "tools" not in advisor
    roles = [m["role"] for m in advisor["messages"]]
    assert roles == ["system", "user"], "one system message, then alternating turns"
    assert advisor["messages"][-1]["content"].endswith("\n\nShould I split this?")
    tool_result = json.loads(scripted.requests_for("gpt-main")[1].body["messages"][-1]["content"])
    assert tool_result == {
        "type": "advice",
        "advice": "Yes: split by service.",
        "advisor_model": "openai:gpt-advisor",
        "remaining_uses": 2,
    }
    assert set(result.usage.parts) == {"rounds", "advisor"}
    assert result.usage.parts["advisor"]["openai:gpt-advisor"].calls == 1
    await keep_history(client, handle.id, "advisor")


async def test_the_advisor_limit_and_refunds(
    client: Client, worker, settings: Settings, scripted: ScriptedModelServer
) -> None:
    scripted.script(
        "gpt-main",
        advisor_call("first"),
        advisor_call("second"),
        advisor_call("third"),
        final("done"),
    )
    scripted.script("gpt-advisor", Fail(400, "advisor broke"), Reply(text="advice"))
    handle = await start_task(
        client,
        settings.task_queue,
        "q",
        model="openai:gpt-main",
        advisor_model="openai:gpt-advisor",
        settings=RoundSettings(advisor_limit=1),
    )
    assert (await handle.result()).reply == "done"
    results = [
        json.loads(r.body["messages"][-1]["content"]) for r in scripted.requests_for("gpt-main")[1:]
    ]
    assert [r["type"] for r in results] == ["error", "advice", "limit_reached"]
    assert [r["remaining_uses"] for r in results] == [1, 0, 0], "a failed call is refunded"
    assert "advisor broke" in results[0]["error"]
    assert "own judgment" in results[2]["error"]
    assert len(scripted.requests_for("gpt-advisor")) == 2, "no model call over the limit"


async def test_the_advisor_is_never_offered_to_subtasks_nor_on_a_last_step(
    client: Client, worker, settings: Settings, scripted: ScriptedModelServer
) -> None:
    script = Script(
        main=[
            delegate(general("p", 1), reply="ok"),
            final("done"),
        ],
        side=[],
        branch=lambda r: Reply(text="branch done"),
    )
    scripted.script("gpt-main", *[script] * 3)
    handle = await start_task(
        client,
        settings.task_queue,
        "q",
        model="openai:gpt-main",
        settings=RoundSettings(step_budget=2),
    )
    assert (await handle.result()).reply == "done"
    assert "advisor" in tool_names(script.main_requests[0])
    assert "advisor" not in tool_names(script.branch_requests[0])
    assert tool_names(script.main_requests[1]) == ["final_reply"]
