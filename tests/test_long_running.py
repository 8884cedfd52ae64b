"""Long-running tasks: continue-as-new keeps every run small, and nothing notices the handover."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import CancelledError

from errands.adapters.scripted import Call, Fail, RecordedRequest, Reply, ScriptedModelServer
from errands.contracts.messages import Usage
from errands.contracts.workflows import RoundSettings
from errands.settings import Settings
from tests.conftest import run_cli
from tests.helpers import DATABASE, ask, delegate, final, general, start_task, until_waiting
from tests.test_ask_user import last_tool_result

ROUNDS = 500
USAGE = Usage(input_tokens=100, output_tokens=10, cached_tokens=40)


def long_task(request: RecordedRequest) -> Reply:
    """Delegates one branch per round until round ROUNDS, then replies; fixed usage per call."""
    tools = [t["function"]["name"] for t in request.body.get("tools", [])]
    if "final_reply" not in tools:
        return Reply(text="branch result", usage=USAGE)
    rounds_done = sum(1 for m in request.body["messages"] if m["role"] == "tool")
    if rounds_done >= ROUNDS:
        return final(f"done after {rounds_done} rounds", usage=USAGE)
    return delegate(general(f"step {rounds_done}", 1), reply="next", usage=USAGE)


async def runs_of(client: Client, workflow_id: str) -> list[tuple[int, int]]:
    """(history bytes, events) of every run of a workflow id."""
    sizes = []
    async for execution in client.list_workflows(f'WorkflowId = "{workflow_id}"'):
        handle = client.get_workflow_handle(workflow_id, run_id=execution.run_id)
        history = await handle.fetch_history()
        sizes.append((len(history.to_json().encode()), len(history.events)))
    return sizes


async def test_a_500_round_task_continues_as_new_and_matches_the_task_without(
    client: Client, worker, settings: Settings, model_server: ScriptedModelServer
) -> None:
    model_server.responder = long_task
    try:
        # Both at once: the machine has two cores and each task mostly waits on the server.
        handles = {
            label: await start_task(
                client,
                settings.task_queue,
                "a very long job",
                model="openai:gpt-long",
                settings=RoundSettings(step_budget=2000, continue_as_new=can),
            )
            for label, can in (("with", True), ("without", False))
        }
        done = await asyncio.gather(*(h.result() for h in handles.values()))
        results = {label: (handles[label].id, r) for label, r in zip(handles, done, strict=True)}
    finally:
        model_server.responder = None
    (with_id, with_can), (_, without) = results["with"], results["without"]
    assert with_can.reply == f"done after {ROUNDS} rounds"
    assert with_can.reply == without.reply
    assert with_can.usage == without.usage
    assert (
        (with_can.rounds, with_can.steps)
        == (without.rounds, without.steps)
        == (ROUNDS + 1, ROUNDS + 1)
    )
    runs = await runs_of(client, with_id)
    assert len(runs) > 5, "the task continued as new"
    assert all(size < 2_000_000 and events < 2000 for size, events in runs), runs


async def test_a_question_pending_across_continue_as_new_is_answered_through_the_cli(
    client: Client, worker, cli_env, settings: Settings, scripted: ScriptedModelServer
) -> None:
    scripted.script(
        "gpt-can", ask(DATABASE), Reply(text="Still deciding."), final("PostgreSQL then.")
    )
    handle = await start_task(
        client,
        settings.task_queue,
        "set it up",
        model="openai:gpt-can",
        settings=RoundSettings(max_history_events=40),
    )
    await until_waiting(handle)
    first_run = (await handle.describe()).run_id
    side = asyncio.create_task(run_cli(cli_env, "btw", handle.id, "btw, anything yet?", "--json"))
    for _ in range(40):
        await handle.signal("submit_answer", {"question_set_id": "stale", "answers": {}})
        if (await handle.describe()).run_id != first_run:
            break
    assert (await handle.describe()).run_id != first_run, "the task continued as new"
    answered_side = await side
    assert answered_side.code == 0, answered_side.stderr
    status = await until_waiting(client.get_workflow_handle(handle.id))
    assert (
        status.pending_question is not None
        and status.pending_question["questions"][0]["header"] == "Database"
    )
    accepted = await run_cli(cli_env, "answer", handle.id, "q1=PostgreSQL")
    assert accepted.code == 0, accepted.stderr
    done = (await run_cli(cli_env, "wait", handle.id, "--json", "--timeout", "60")).json()
    assert done["reply"] == "PostgreSQL then."
    assert "Database: PostgreSQL" in last_tool_result(scripted.requests_for("gpt-can")[-1])


async def test_cancelling_after_the_boundary_ends_the_task(
    client: Client, worker, settings: Settings, scripted: ScriptedModelServer
) -> None:
    scripted.script(
        "gpt-can",
        Reply(
            calls=[
                Call(
                    "delegate", {"reply": "on it", "subtasks": [{"type": "general", "prompt": "p"}]}
                )
            ]
        ),
        Reply(text="branch done"),
        ask(DATABASE),
    )
    handle = await start_task(
        client,
        settings.task_queue,
        "q",
        model="openai:gpt-can",
        settings=RoundSettings(rounds_per_run=1),
    )
    await until_waiting(handle)
    runs = [e.run_id async for e in client.list_workflows(f'WorkflowId = "{handle.id}"')]
    assert len(runs) == 2, "round 1 runs in a second run"
    await client.get_workflow_handle(handle.id).cancel()
    with pytest.raises(WorkflowFailureError) as failure:
        await client.get_workflow_handle(handle.id).result()
    assert isinstance(failure.value.cause, CancelledError)
    status: Any = await client.get_workflow_handle(handle.id).describe()
    assert status.status.name == "CANCELED"


async def test_a_task_handed_over_before_its_first_step_succeeded_still_opens(
    client: Client, worker, settings: Settings, model_server: ScriptedModelServer, store
) -> None:
    """Round 0 fails as transient and the run hands over (one round a run) before any step
    succeeded: the next run's first step carries the task's opening, so the task records its
    subtask types (``delegate`` is offered) and its message is in the session once."""
    requests: list[RecordedRequest] = []

    def answer(request: RecordedRequest) -> Any:
        requests.append(request)
        return Fail(503, "overloaded") if len(requests) == 1 else final("opened after all")

    model_server.script("gpt-open", answer, answer)
    handle = await start_task(
        client,
        settings.task_queue,
        "open me once",
        model="openai:gpt-open",
        settings=RoundSettings(rounds_per_run=1, model_max_attempts=1, round_retry_seconds=0.2),
    )
    result = await handle.result()
    assert result.reply == "opened after all"
    runs = [e.run_id async for e in client.list_workflows(f'WorkflowId = "{handle.id}"')]
    assert len(runs) == 2, "the failed round handed over to a second run"
    offered = [t["function"]["name"] for t in requests[-1].body["tools"]]
    assert "delegate" in offered, offered
    rows = store.list_session(result.session_id)
    assert [(r.kind, r.text) for r in rows if r.kind == "user"] == [("user", "open me once")]
