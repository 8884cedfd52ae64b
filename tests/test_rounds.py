"""Rounds of delegation on the real dev server and the real SDK clients (SPEC §1)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import CancelledError

from errands.adapters.scripted import Call, Fail, Gate, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.contracts.messages import NewMessage
from errands.contracts.subtasks import SubtaskDraft
from errands.contracts.workflows import RoundSettings, TaskInput, TaskResult
from errands.settings import Settings
from tests.conftest import StartTask, run_cli
from tests.helpers import (
    ACTIVITY_SCHEDULED,
    CHILD_INITIATED,
    Conversation,
    delegate,
    events_of,
    final,
    general,
    history_bytes,
    history_events,
    keep_history,
    local_activities,
    start_task,
)

MODEL = "openai:gpt-main"


def branch_prompt(request: RecordedRequest) -> str:
    return next(m["content"] for m in request.body["messages"] if m["role"] == "user")


def answer_branch(request: RecordedRequest, **reply: Any) -> Reply:
    """A branch's answer naming its prompt (``reply``: other ``Reply`` fields, e.g. ``hold``)."""
    return Reply(text=f"result for: {branch_prompt(request).splitlines()[0]}", **reply)


def tool_messages(request: RecordedRequest) -> list[dict[str, Any]]:
    return [m for m in request.body["messages"] if m["role"] == "tool"]


async def test_a_delegating_round_runs_three_branches_in_parallel_and_replies(
    worker, cli_env, client: Client, scripted: ScriptedModelServer
) -> None:
    text = "Compare Lisbon, Porto and Madrid for a weekend trip."
    branches = Gate("the three branches' model calls")
    convo = Conversation(
        [
            delegate(
                general("About Lisbon", 1), general("About Porto", 1), general("About Madrid", 1)
            ),
            final("Lisbon wins."),
        ],
        lambda r: answer_branch(r, hold=branches),
        branches=3,
    ).install(scripted, "gpt-main")
    session = f"s-{uuid.uuid4().hex[:6]}"
    env = {**cli_env, "ERRANDS_MODEL": MODEL}
    running = asyncio.create_task(run_cli(env, "run", text, "--session", session, "--json"))
    await branches.reached(3)  # every branch was asked before any answered
    branches.release()
    run = await running
    assert run.code == 0, run.stderr
    state = run.json()
    assert state["status"] == "replied" and state["reply"] == "Lisbon wins."

    # The three children were started by one workflow task, and ran at the same time.
    events = await history_events(client.get_workflow_handle(state["task_id"]))
    starts = events_of(events, CHILD_INITIATED)
    assert len(starts) == 3
    assert (
        len(
            {
                e.start_child_workflow_execution_initiated_event_attributes.workflow_task_completed_event_id
                for e in starts
            }
        )
        == 1
    )
    assert [
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id for e in starts
    ] == [f"{state['task_id']}/r0/b{k}" for k in (1, 2, 3)]

    # Each branch saw the cited message verbatim and no catalog marker.
    for request in convo.branch_requests:
        raw = request.raw.decode()
        assert text in branch_prompt(request)
        assert "[ref" not in raw

    # Round 1 saw the real delegate call and a tool result with the three outputs.
    round1 = convo.main_requests[1]
    calls = [m for m in round1.body["messages"] if m.get("tool_calls")]
    assert calls[0]["tool_calls"][0]["function"]["name"] == "delegate"
    results = json.loads(tool_messages(round1)[0]["content"])
    assert [(r["subtask_id"], r["status"]) for r in results] == [
        ("r0-b1", "completed"),
        ("r0-b2", "completed"),
        ("r0-b3", "completed"),
    ]
    assert {r["output"] for r in results} == {
        f"result for: About {c}" for c in ("Lisbon", "Porto", "Madrid")
    }

    history = (await run_cli(env, "history", session, "--json")).json()["messages"]
    ids = [m["id"] for m in history]
    task = state["task_id"]
    for expected in (f"task:{task}:user", f"task:{task}:round:0:ack", f"task:{task}:reply"):
        assert ids.count(expected) == 1
    assert sorted(i for i in ids if ":branch:" in i) == [
        f"task:{task}:round:0:branch:{k}" for k in (1, 2, 3)
    ]
    assert len(ids) == len(set(ids))
    await keep_history(client, task, "delegate_three_branches")
    await keep_history(client, f"{task}/r0/b1", "subtask_branch")


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (
            delegate(general("x", 5)),
            "subtask 1: reference 5 is outside the catalog (catalog has 1 entries",
        ),
        (
            Reply(calls=[Call("delegate", {"reply": "a", "subtasks": [general("x")]})] * 2),
            "Delegate once",
        ),
        (delegate({"type": "astrology", "prompt": "x"}), "subtask 1: unknown type 'astrology'"),
        (final("   "), "`text` must be a non-blank string"),
    ],
    ids=["invalid-reference", "repeated-delegate", "unknown-type", "blank-text"],
)
async def test_a_rejected_control_call_comes_back_to_the_same_model_and_is_fixed(
    client: Client,
    store: SessionStore,
    scripted: ScriptedModelServer,
    bad: Reply,
    error: str,
    start: StartTask,
) -> None:
    scripted.script("gpt-main", bad, final("fixed"))
    handle = await start("question", model=MODEL)
    result = await handle.result()
    assert result.reply == "fixed"
    first, second = scripted.requests_for("gpt-main")
    rejected, result_msg = second.body["messages"][-2:]
    assert rejected["tool_calls"][0]["function"]["name"] in ("delegate", "final_reply")
    assert (
        result_msg["role"] == "tool"
        and result_msg["tool_call_id"] == rejected["tool_calls"][0]["id"]
    )
    assert error in result_msg["content"] and "nothing was started" in result_msg["content"]
    assert second.body["messages"][:-2] == first.body["messages"]
    kinds = [r.kind for r in store.list_session(result.session_id)]
    assert kinds == ["user", "reply"], "repairs never reach the session"
    await keep_history(client, handle.id, f"repair_{error.split()[0].strip('`:')}")


async def test_after_three_repairs_the_fallback_starts_from_clean_messages(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-main", *[final(" ")] * 4)
    scripted.script("gpt-fallback", final("from the fallback"))
    handle = await start("question", model=MODEL, fallback_model="openai:gpt-fallback")
    result = await handle.result()
    assert result.reply == "from the fallback"
    primary = scripted.requests_for("gpt-main")
    assert len(primary) == 4
    assert len(primary[-1].body["messages"]) == len(primary[0].body["messages"]) + 6
    assert scripted.requests_for("gpt-fallback")[0].body["messages"] == primary[0].body["messages"]
    assert result.steps == 5


async def test_a_final_round_offers_only_final_reply_and_says_why(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    Conversation([delegate(general("part", 1)), final("done")], answer_branch, branches=1).install(
        scripted, "gpt-main"
    )
    handle = await start("q", model=MODEL, settings=RoundSettings(step_budget=2))
    result = await handle.result()
    assert result.reply == "done" and result.steps == 2
    main = [r for r in scripted.requests if "final_reply" in json.dumps(r.body.get("tools", []))]
    assert [t["function"]["name"] for t in main[0].body["tools"]] == [
        "final_reply",
        "delegate",
        "ask_user",
        "advisor",
    ]
    assert [t["function"]["name"] for t in main[1].body["tools"]] == ["final_reply"]
    system = main[1].body["messages"][0]["content"]
    assert "final round" in system and "step budget is spent (1 of 2 steps used)" in system


async def test_every_step_is_charged_and_a_round_exceeds_the_budget_by_one_step_at_most(
    client: Client, worker, settings: Settings, scripted: ScriptedModelServer
) -> None:
    convo = Conversation(
        [delegate(general("part", 1)), final(" "), final(" "), Reply(text="narrating")],
        answer_branch,
        branches=1,
    )
    scripted.script("gpt-main", *[convo] * 4)
    scripted.script("gpt-fallback", *[convo] * 1)
    handle = await start_task(
        client,
        settings.task_queue,
        "q",
        model=MODEL,
        fallback_model="openai:gpt-fallback",
        settings=RoundSettings(step_budget=3),
    )
    result = await handle.result()
    # Round 1: two rejected calls spend the budget (3 of 3), so no further repair; the fallback
    # still gets its one-step floor: 4 steps, one over the allowance, never more.
    assert result.steps == 4
    assert len(convo.main_requests) == 4
    assert result.status == "replied", "the completed branch is delivered by the deterministic join"
    assert result.reply == "result for: part"
    assert result.usage.total().calls == 5


async def test_a_401_after_a_completed_branch_replies_with_the_deterministic_join(
    client: Client, store: SessionStore, scripted: ScriptedModelServer, start: StartTask
) -> None:
    convo = Conversation(
        [delegate(general("first", 1), general("second", 1)), Fail(401, "key revoked")],
        lambda r: (
            Reply(text="good result") if "first" in branch_prompt(r) else Fail(400, "bad request")
        ),
        branches=2,
    ).install(scripted, "gpt-main")
    handle = await start("q", model=MODEL, fallback_model="openai:gpt-fallback")
    result = await handle.result()
    assert result.status == "replied"
    assert result.reply is not None and result.reply.startswith("good result")
    assert "1 of 2 subtasks did not complete" in result.reply
    assert not scripted.requests_for("gpt-fallback"), "no fallback call on a dead credential"
    assert len(convo.main_requests) == 2
    reply_row = store.get(f"task:{result.task_id}:reply")
    assert reply_row is not None and reply_row.meta.get("deterministic_join") is True
    await keep_history(client, handle.id, "deterministic_join")


async def test_both_slots_failing_deterministically_with_no_branches_fails_as_exhausted(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-main", Reply(text="prose"))
    # The fallback, the last slot, is repaired after narrating: 1 + 3 repairs.
    scripted.script("gpt-fallback", *[Reply(text="more prose")] * 4)
    handle = await start("q", model=MODEL, fallback_model="openai:gpt-fallback")
    result = await handle.result()
    assert result.status == "failed" and result.error is not None
    assert result.error.kind == "exhausted"
    assert result.steps == 5
    assert (
        "primary (openai:gpt-main)" in result.error.message and "fallback" in result.error.message
    )


async def test_a_failing_branch_is_reported_with_its_reason_while_siblings_complete(
    client: Client, scripted: ScriptedModelServer, start: StartTask
) -> None:
    convo = Conversation(
        [
            delegate(general("ok one", 1), general("doomed", 1), general("ok two", 1)),
            final("partial"),
        ],
        lambda r: (
            Fail(400, "context too long") if "doomed" in branch_prompt(r) else Reply(text="fine")
        ),
        branches=3,
    ).install(scripted, "gpt-main")
    handle = await start("q", model=MODEL)
    assert (await handle.result()).reply == "partial"
    results = json.loads(tool_messages(convo.main_requests[1])[0]["content"])
    assert [r["status"] for r in results] == ["completed", "failed", "completed"]
    assert "invalid_request" in results[1]["output"] and "context too long" in results[1]["output"]
    assert "permanent" in results[1]["output"]
    await keep_history(client, handle.id, "failing_branch")


async def test_a_round_costs_its_model_calls_alone_the_store_work_rides_on_its_steps(
    client: Client, scripted: ScriptedModelServer, start: StartTask, store: SessionStore
) -> None:
    Conversation(
        [delegate(general("one", 1), general("two", 1)), final("done")],
        lambda r: Reply(text="fine"),
        branches=2,
    ).install(scripted, "gpt-main")
    handle = await start("q", model=MODEL)
    assert (await handle.result()).reply == "done"

    events = await history_events(handle)
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events_of(events, ACTIVITY_SCHEDULED)
    ]
    assert scheduled == ["round_step", "round_step"]
    # Round 0's step opened the task and prepared the round, and wrote the acknowledgement it
    # decided; round 1's prepared its round and wrote the reply: no store call of their own.
    assert local_activities(events) == []
    rows = store.list_by_prefix((await handle.result()).session_id, f"task:{handle.id}:")
    assert [(r.kind, r.text) for r in rows if r.kind in ("user", "ack", "reply")] == [
        ("user", "q"),
        ("ack", "On it."),
        ("reply", "done"),
    ]
    logged = [e.type for e in store.list_events(handle.id)]
    for expected in ("task_started", "round_started", "delegated", "replied"):
        assert expected in logged, logged
    assert logged.count("round_started") == 2
    await keep_history(client, handle.id, "round_records_on_steps")
    branch = await history_events(client.get_workflow_handle(f"{handle.id}/r0/b1"))
    assert [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events_of(branch, ACTIVITY_SCHEDULED)
    ] == ["branch_step"]


async def test_a_branch_runs_its_types_work_tools(
    client: Client, scripted: ScriptedModelServer, start: StartTask
) -> None:
    def research(request: RecordedRequest) -> Reply:
        tools = tool_messages(request)
        if not tools:
            return Reply(calls=[Call("lookup", {"term": "answer"})])
        return Reply(text=f"found: {tools[0]['content']}")

    convo = Conversation(
        [
            delegate({"type": "research", "prompt": "look it up", "params": {"depth": 2}}),
            final("ok"),
        ],
        research,
        branches=2,
    ).install(scripted, "gpt-main")
    handle = await start("q", model=MODEL)
    assert (await handle.result()).reply == "ok"
    first, second = convo.branch_requests
    assert [t["function"]["name"] for t in first.body["tools"]] == ["lookup"]
    results = json.loads(tool_messages(convo.main_requests[1])[0]["content"])
    assert results[0]["output"] == "found: lookup result for 'answer': 42"
    await keep_history(client, f"{handle.id}/r0/b1", "branch_work_tool")


async def test_cancelling_a_task_cancels_its_branches(
    client: Client, scripted: ScriptedModelServer, start: StartTask
) -> None:
    never = Gate("the branches' model calls, never answered")
    Conversation(
        [delegate(general("slow", 1), general("slower", 1))],
        lambda r: Reply(text="too late", hold=never),
        branches=2,
    ).install(scripted, "gpt-main")
    handle = await start("q", model=MODEL)
    await never.reached(2)
    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert isinstance(failure.value.cause, CancelledError)
    for k in (1, 2):
        child = await client.get_workflow_handle(f"{handle.id}/r0/b{k}").describe()
        assert child.status == WorkflowExecutionStatus.CANCELED
    await keep_history(client, handle.id, "canceled")


async def test_history_of_three_rounds_of_eight_branches_is_small_and_flat(
    store: SessionStore, scripted: ScriptedModelServer, start: StartTask
) -> None:
    sizes = {}
    for prior in (0, 500):
        session = f"big-{prior}-{uuid.uuid4().hex[:6]}"
        for i in range(prior):
            store.append_once(
                NewMessage(
                    id=f"seed:{session}:{i}",
                    session_id=session,
                    role="user",
                    kind="user",
                    text=f"{i:05d} " + "y" * 2042,
                )
            )
        eight = [general(f"part {k}", 1) for k in range(8)]
        convo = Conversation(
            [delegate(*eight), delegate(*eight), delegate(*eight), final("all done")],
            lambda r: Reply(text="branch output " * 50),
            branches=24,
        ).install(scripted, "gpt-main")
        # 500 prior messages (1 MB) outgrow the default 32,000-token window: the summary calls
        # of the compaction come on top of the scripted steps.
        scripted.responder = convo
        try:
            handle = await start("big job", model=MODEL, session=session)
            assert (await handle.result()).reply == "all done"
        finally:
            scripted.responder = None
        assert bool(convo.summary_requests) == (prior > 0)
        sizes[prior] = await history_bytes(handle)
    assert sizes[0] < 300_000, sizes
    assert sizes[500] <= sizes[0] * 1.10, sizes


async def test_a_round_that_finds_its_stored_reply_returns_it_without_inference(
    client: Client, worker, settings: Settings, store: SessionStore, scripted: ScriptedModelServer
) -> None:
    session = f"s-{uuid.uuid4().hex[:6]}"
    task = f"task-{session}-1"
    store.append_once(
        NewMessage(
            id=f"task:{task}:reply",
            session_id=session,
            role="assistant",
            kind="reply",
            text="already answered",
            task_id=task,
        )
    )
    handle = await client.start_workflow(
        "TaskWorkflow",
        TaskInput(task_id=task, session_id=session, text="q", model=MODEL),
        id=task,
        task_queue=settings.task_queue,
        result_type=TaskResult,
    )
    result = await handle.result()
    assert result.reply == "already answered"
    assert scripted.requests == []


async def test_a_round_that_finds_its_branches_started_reuses_its_acknowledgement(
    client: Client, worker, settings: Settings, store: SessionStore, scripted: ScriptedModelServer
) -> None:
    session = f"s-{uuid.uuid4().hex[:6]}"
    task = f"task-{session}-1"
    subtasks = [SubtaskDraft(type="general", prompt=f"part {k}", references=[1]) for k in (1, 2, 3)]
    store.append_once(
        NewMessage(
            id=f"task:{task}:user",
            session_id=session,
            role="user",
            kind="user",
            text="q",
            task_id=task,
        )
    )
    store.append_once(
        NewMessage(
            id=f"task:{task}:round:0:ack",
            session_id=session,
            role="assistant",
            kind="ack",
            text="On it (stored).",
            task_id=task,
            round=0,
            meta={"upto_seq": 1, "subtasks": [s.model_dump() for s in subtasks]},
        )
    )
    store.append_once(
        NewMessage(
            id=f"task:{task}:round:0:branch:2",
            session_id=session,
            role="tool",
            kind="branch",
            text="stored result of part 2",
            task_id=task,
            round=0,
            meta={"ordinal": 2, "status": "completed", **subtasks[1].model_dump()},
        )
    )
    convo = Conversation([final("joined up")], answer_branch, branches=2).install(
        scripted, "gpt-main"
    )
    handle = await client.start_workflow(
        "TaskWorkflow",
        TaskInput(task_id=task, session_id=session, text="q", model=MODEL),
        id=task,
        task_queue=settings.task_queue,
        result_type=TaskResult,
    )
    assert (await handle.result()).reply == "joined up"
    assert sorted(branch_prompt(r).splitlines()[0] for r in convo.branch_requests) == [
        "part 1",
        "part 3",
    ]
    round1 = convo.main_requests[0]
    assert (
        json.loads(round1.body["messages"][2]["tool_calls"][0]["function"]["arguments"])["reply"]
        == "On it (stored)."
    )
    outputs = [r["output"] for r in json.loads(tool_messages(round1)[0]["content"])]
    assert outputs == ["result for: part 1", "stored result of part 2", "result for: part 3"]


async def test_rounds_whose_branches_all_fail_the_same_way_lead_to_a_final_round(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    convo = Conversation(
        [delegate(general("try", 1))] * 3 + [final("giving up honestly")],
        lambda r: Fail(403, "no access to the archive"),
        branches=3,
    ).install(scripted, "gpt-main")
    handle = await start("q", model=MODEL)
    assert (await handle.result()).reply == "giving up honestly"
    last = convo.main_requests[-1]
    assert [t["function"]["name"] for t in last.body["tools"]] == ["final_reply"]
    assert "all failed the same way" in last.body["messages"][0]["content"]
    assert all("delegate" in json.dumps(r.body["tools"]) for r in convo.main_requests[:3])


async def test_a_task_past_its_deadline_gets_a_final_round(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    Conversation(
        [delegate(general("slow part", 1)), final("out of time")],
        lambda r: Reply(text="slow", delay=1.5),  # the behaviour under test: time passes
        branches=1,
    ).install(scripted, "gpt-main")
    handle = await start("q", model=MODEL, settings=RoundSettings(deadline_seconds=1))
    assert (await handle.result()).reply == "out of time"
    system = scripted.requests_for("gpt-main")[-1].body["messages"][0]["content"]
    assert "time limit (1 s) has passed" in system
