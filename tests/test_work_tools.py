"""MCP work tools in branches (issue 16), against the notes server (tests/mcp_notes_server.py) as
real processes: one over stdio, one on Streamable HTTP behind a bearer token.

Each branch here is told, in its prompt, which tool to call with which arguments
(``call mcp__files__read {"name": "big"}``); the scripted model makes that call on the branch's
first step and, once the result is in front of it, answers with the start of what it read. So
what reaches the next round is what the tool returned.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.worker import Worker

import errands
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import Call, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.client import Client as ErrandsClient
from errands.contracts import ids
from errands.contracts.approvals import ApprovalAnswer, ApprovalReceipt
from errands.contracts.workflows import RoundSettings, TaskResult
from errands.errors import TaskEnded
from errands.gateway import create_app, serving
from errands.plugin import ErrandsPlugin
from errands.settings import Settings
from errands.workers import build_worker
from tests.conftest import ProcessWorkers, kill_worker, run_cli, spawn_worker, worker_process
from tests.helpers import (
    Conversation,
    delegate,
    eventually,
    final,
    keep_history,
    pin_tools,
    start_task,
)
from tests.mcp_notes import BIG, TOKEN, Servers

MODEL = "openai:gpt-tools"
CALL = re.compile(r"call (\S+) (\{.*\})", re.DOTALL)


def writes(notes: Path, log: Path | None = None) -> list[dict[str, Any]]:
    """The server's record of the writes it made (or, given ``log``, of that log)."""
    path = log or notes / "writes.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def tool_results(request: RecordedRequest) -> list[dict[str, Any]]:
    return [m for m in request.body["messages"] if m["role"] == "tool"]


def offered(request: RecordedRequest) -> list[str]:
    return [t["function"]["name"] for t in request.body.get("tools", [])]


def told_branch(request: RecordedRequest) -> Reply:
    """A branch that makes the call its prompt names, then reports what came back."""
    prompt = next(m["content"] for m in request.body["messages"] if m["role"] == "user")
    results = tool_results(request)
    if results:
        return Reply(text=f"tool said: {results[-1]['content'][:120]}")
    name, arguments = CALL.search(prompt).groups()  # type: ignore[union-attr]
    return Reply(calls=[Call(name, json.loads(arguments))])


def delegating(*prompts: str, reply: str = "done") -> list[Reply]:
    """A round that delegates one ``general`` subtask per prompt, then one that replies."""
    return [delegate(*prompts), final(reply)]


def call(tool: str, /, **arguments: Any) -> str:
    return f"call {tool} {json.dumps(arguments)}"


async def run_task(
    client: Client, own: Settings, text: str, task_id: str | None = None, **settings: Any
) -> tuple[WorkflowHandle[Any, TaskResult], TaskResult]:
    extra = {"task_id": task_id} if task_id else {}
    handle = await start_task(
        client, own.task_queue, text, model=MODEL, settings=RoundSettings(**settings), **extra
    )
    return handle, await asyncio.wait_for(handle.result(), 120)


async def histories(client: Client, handle: WorkflowHandle[Any, TaskResult], n: int) -> str:
    """The exported histories of the task and its first round's ``n`` branches, as JSON."""
    exported = []
    for workflow_id in [
        handle.id,
        *(ids.child_workflow_id(handle.id, 0, k) for k in range(1, n + 1)),
    ]:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        exported.append(history.to_json())
    return "\n".join(exported)


def branch_rows(store: SessionStore, result: TaskResult) -> list[str]:
    """The branches' answers, by subtask."""
    rows = [r for r in store.list_session(result.session_id) if r.kind == "branch"]
    return [r.text for r in sorted(rows, key=lambda r: r.meta["ordinal"])]


async def test_branches_call_tools_over_stdio_and_http_and_the_results_reach_the_next_round(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    tools_worker: Settings,
) -> None:
    convo = Conversation(
        delegating(
            call("mcp__files__read", name="big"),
            call("mcp__web__write", name="greeting", text="hello from a branch"),
        ),
        told_branch,
        branches=4,
    ).install(scripted, "gpt-tools")

    handle, result = await run_task(client, tools_worker, "Read the big note, write a greeting.")

    assert result.status == "replied", result.error
    first_steps = [r for r in convo.branch_requests if not tool_results(r)]
    for request in first_steps:
        names = offered(request)
        assert {"mcp__files__read", "mcp__web__write", "mcp__web__search"} <= set(names)
        assert not any(n.startswith("mcp__down__") for n in names)
        assert "down:" in request.body["messages"][0]["content"]  # told it is unavailable
    # The tools' results reached the branches, and the branches' answers the next round.
    round1 = json.dumps(convo.main_requests[1].body["messages"])
    assert "tool said: line 0000 of the big note" in round1
    assert "tool said: wrote note greeting" in round1
    assert (servers.web / "greeting.txt").read_text() == "hello from a branch"
    # The big result is whole in the branch's thread, and neither it nor the token in history.
    thread = ids.child_workflow_id(handle.id, 0, 1)
    stored = store.get(ids.thread_tool_result_id(thread, 0, 0))
    assert stored is not None and stored.text == BIG
    assert len(BIG) > 2048
    await keep_history(client, handle.id, "branches_mcp_tools")
    await keep_history(client, thread, "branch_mcp_tool")
    exported = await histories(client, handle, 2)
    assert "line 0030 of the big note" not in exported
    assert TOKEN not in exported


async def test_the_tool_list_is_pinned_for_the_task_when_first_listed(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    tools_worker: Settings,
) -> None:
    Conversation(
        delegating(call("mcp__files__search", query="big note")), told_branch, branches=2
    ).install(scripted, "gpt-tools")

    _, result = await run_task(client, tools_worker, "Find the big note.")

    pinned = store.get(ids.task_tools_id(result.task_id))
    assert pinned is not None
    servers_listed = json.loads(pinned.text)["servers"]
    assert [t["name"] for t in servers_listed["files"]["tools"]] == [
        "write",
        "read",
        "search",
        "fail",
        "sleep",
    ]
    down = servers_listed["down"]
    assert down["tools"] == [] and "cannot reach" in down["error"]
    assert TOKEN not in pinned.text
    assert branch_rows(store, result) == ["tool said: big"]


async def test_a_task_offers_the_tools_it_pinned_not_what_the_servers_list_now(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    tools_worker: Settings,
) -> None:
    # As if the task had listed the files server when it offered only `search` (and no other
    # server): a server that changes its tools mid-task changes nothing for that task.
    task_id = f"task-pinned-{uuid.uuid4().hex[:6]}"
    search = {"name": "search", "description": "Find notes.", "input_schema": {"type": "object"}}
    pin_tools(store, task_id, {"files": {"tools": [search], "for": ["*"], "error": None}})
    convo = Conversation(
        delegating(call("mcp__files__search", query="big note")), told_branch, branches=2
    ).install(scripted, "gpt-tools")

    _, result = await run_task(client, tools_worker, "Find the big note.", task_id=task_id)

    assert offered(convo.branch_requests[0]) == ["mcp__files__search"]
    assert "down:" not in convo.branch_requests[0].body["messages"][0]["content"]
    assert branch_rows(store, result) == ["tool said: big"]


async def test_tool_errors_bad_arguments_a_server_down_and_a_hung_tool_come_back_to_the_model(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    tools_worker: Settings,
) -> None:
    Conversation(
        delegating(
            call("mcp__files__fail"),
            call("mcp__web__write", name="no-text"),
            call("mcp__down__anything"),
            call("mcp__files__sleep", seconds=30),
        ),
        told_branch,
        branches=8,
    ).install(scripted, "gpt-tools")

    handle, result = await run_task(
        client, tools_worker, "Try every tool.", max_subtasks=4, tool_timeout_seconds=3
    )

    assert result.status == "replied", result.error
    failed, invalid, down, hung = branch_rows(store, result)
    assert "the fail tool always fails" in failed
    assert "text" in invalid and "required" in invalid.lower()
    assert "There is no tool named 'mcp__down__anything'" in down
    assert "mcp__files__sleep was stopped" in hung
    stopped = store.get(ids.thread_tool_result_id(ids.child_workflow_id(handle.id, 0, 4), 0, 0))
    assert stopped is not None and "did not answer within 3 s" in stopped.text
    assert not (servers.web / "no-text.txt").exists()


async def test_a_worker_killed_during_a_tool_call_retries_it_with_the_same_key_and_writes_once(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    process_workers: ProcessWorkers,
) -> None:
    env = {
        **process_workers.env,
        "ERRANDS_MCP_SERVERS": json.dumps({"web": servers.config["web"]}),
    }
    Conversation(
        delegating(call("mcp__web__write", name="once", text="exactly once", hold=True)),
        told_branch,
        branches=2,
    ).install(scripted, "gpt-tools")
    calls = servers.web / "calls.jsonl"

    def calls_for_once() -> list[dict[str, Any]]:
        return [c for c in writes(servers.web, calls) if c["name"] == "once"]

    first = spawn_worker(env)
    handle = await start_task(
        client,
        process_workers.queue,
        "Write the note once.",
        model=MODEL,
        settings=RoundSettings(heartbeat_timeout_seconds=3),
    )
    try:
        await eventually(lambda: len(calls_for_once()) == 1, "the tool call to reach the server")
    finally:
        kill_worker(first)
    # The server finishes the call the dead worker made; the retry then finds it done.
    (servers.web / "once.release").touch()
    await eventually(lambda: (servers.web / "once.txt").exists(), "the first call's write")
    with worker_process(env):
        result = await asyncio.wait_for(handle.result(), 120)

    assert result.status == "replied", result.error
    thread = ids.child_workflow_id(handle.id, 0, 1)
    key = ids.thread_tool_result_id(thread, 0, 0)
    assert calls_for_once() == [{"name": "once", "idempotency_key": key}] * 2
    assert [w for w in writes(servers.web) if w["name"] == "once"] == [
        {"name": "once", "idempotency_key": key}
    ]
    for session in (result.session_id, thread):
        row_ids = [r.id for r in store.list_session(session)]
        assert len(row_ids) == len(set(row_ids)), f"a row of {session} stored twice"
    assert [r.id for r in store.list_session(thread) if r.kind == "tool_result"] == [key]
    assert branch_rows(store, result) == ["tool said: wrote note once"]


async def test_cancelling_a_task_during_a_tool_call_stores_a_cancelled_result_and_stops_the_call(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    tools_worker: Settings,
) -> None:
    Conversation(
        delegating(call("mcp__web__write", name="never", text="cancelled first", hold=True))[:1],
        told_branch,
        branches=1,
    ).install(scripted, "gpt-tools")
    handle = await start_task(
        client,
        tools_worker.task_queue,
        "Write a note, slowly.",
        model=MODEL,
        settings=RoundSettings(heartbeat_timeout_seconds=3),
    )
    await eventually(
        lambda: any(c["name"] == "never" for c in writes(servers.web, servers.web / "calls.jsonl")),
        "the tool call to reach the server",
    )
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()

    thread = ids.child_workflow_id(handle.id, 0, 1)
    key = ids.thread_tool_result_id(thread, 0, 0)
    await eventually(lambda: store.get(key) is not None, "the cancelled call's result")
    row = store.get(key)
    assert row is not None and row.meta["is_error"]
    assert row.text.startswith("Cancelled: the work was stopped")
    kinds = [r.kind for r in store.list_session(thread)]
    assert kinds[-2:] == ["step", "tool_result"], "the thread ends with the call's result"
    stopped = servers.web / "stopped.jsonl"
    await eventually(
        lambda: any(c["name"] == "never" for c in writes(servers.web, stopped)),
        "the server to see the held call stopped",
    )
    assert not (servers.web / "never.txt").exists()


async def test_the_demo_models_facts_branch_calls_the_bundled_almanac_server(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    almanac = {"almanac": {"command": [sys.executable, "-m", "errands.adapters.demo_tools"]}}
    own = settings.model_copy(
        update={
            "task_queue": f"demo-tools-{uuid.uuid4().hex[:6]}",
            "mcp_servers": json.dumps(almanac),
        }
    )
    router = ModelRouter(own)
    async with build_worker(client, own, store=store, router=router):
        handle = await start_task(
            client, own.task_queue, "A weekend in Lisbon on a budget", model="demo"
        )
        result = await asyncio.wait_for(handle.result(), 120)
    await router.aclose()

    assert result.status == "replied", result.error
    assert result.reply is not None
    facts = next(line for line in result.reply.splitlines() if "[facts]" in line)
    assert "The almanac (mcp__almanac__lookup) says: Lisbon, capital of Portugal" in facts
    thread = ids.child_workflow_id(handle.id, 0, 1)
    looked_up = store.get(ids.thread_tool_result_id(thread, 0, 0))
    assert looked_up is not None and not looked_up.meta["is_error"]


async def test_the_main_agent_calls_tools_of_one_step_at_once_and_reads_their_results(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    tools_worker: Settings,
) -> None:
    main_requests: list[RecordedRequest] = []

    def main_agent(request: RecordedRequest) -> Reply:
        main_requests.append(request)
        results = tool_results(request)
        if not results:
            return Reply(
                calls=[
                    Call("mcp__files__read", {"name": "big"}),
                    Call("mcp__web__write", {"name": "main-note", "text": "from the main agent"}),
                ]
            )
        said = " | ".join(r["content"][:40] for r in results)
        return final(f"read: {said}")

    scripted.script("gpt-tools", main_agent, main_agent)

    handle, result = await run_task(client, tools_worker, "Read the big note and write one.")

    assert result.status == "replied", result.error
    first, second = main_requests
    names = offered(first)
    assert names[:2] == ["final_reply", "delegate"]
    assert {"mcp__files__read", "mcp__web__write"} <= set(names)
    assert names.index("mcp__files__read") > names.index("ask_user")  # after the built-ins
    assert result.reply == "read: line 0000 of the big note, kept in the s | wrote note main-note"
    assert (servers.web / "main-note.txt").read_text() == "from the main agent"
    assert [m["content"] for m in tool_results(second)][0] == BIG  # the whole text, read back
    (key,) = [w["idempotency_key"] for w in writes(servers.web) if w["name"] == "main-note"]
    assert key.startswith(f"task:{result.task_id}:round:0:primary:tool:1:1:")  # + the digest
    assert store.get(key) is not None and store.get(key).text == "wrote note main-note"  # type: ignore[union-attr]
    await keep_history(client, handle.id, "round_mcp_tools")
    exported = await histories(client, handle, 0)
    assert "line 0030 of the big note" not in exported
    assert TOKEN not in exported


# -- approvals ------------------------------------------------------------------------------


async def pending_approval(
    handle: WorkflowHandle[Any, TaskResult], *, other_than: str | None = None
) -> dict[str, Any]:
    """The tool call waiting for approval (one other than ``other_than``, when given)."""

    async def waiting() -> dict[str, Any] | None:
        status = await handle.query("status", result_type=TaskResult)
        pending = status.pending_approval
        if pending is None or pending["approval_id"] == other_than:
            return None
        assert status.status == "waiting_for_user"
        return pending

    return await eventually(waiting, f"a tool call of {handle.id} to wait for approval")


async def answer(handle: WorkflowHandle[Any, TaskResult], **fields: Any) -> ApprovalReceipt:
    return await handle.execute_update(
        "answer_approval", ApprovalAnswer(**fields), result_type=ApprovalReceipt
    )


def branch_writes(name: str, text: str) -> list[Reply]:
    return delegating(call("mcp__web__write", name=name, text=text))


async def start(
    own: Settings, client: Client, text: str, **kwargs: Any
) -> WorkflowHandle[Any, TaskResult]:
    return await start_task(client, own.task_queue, text, model=MODEL, **kwargs)


async def test_a_call_that_asks_waits_for_approval_and_runs_once_approved(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    asking_worker: Settings,
) -> None:
    Conversation(branch_writes("approved", "yes"), told_branch, branches=2).install(
        scripted, "gpt-tools"
    )
    handle = await start(asking_worker, client, "Write a note once I say so.")

    pending = await pending_approval(handle)
    assert pending["tool"] == "mcp__web__write"
    assert json.loads(pending["arguments"]) == {"name": "approved", "text": "yes"}
    assert pending["where"] == "round 0 · subtask 1"
    assert pending["can_approve_always"] is True
    assert not (servers.web / "approved.txt").exists(), "nothing runs before the approval"
    # An unknown approval id is refused, and changes nothing.
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await answer(handle, approval_id="no-such-approval", decision="approve")
    assert "no tool call waiting for approval 'no-such-approval'" in str(refused.value.cause)
    assert (await pending_approval(handle)) == pending

    receipt = await answer(handle, approval_id=pending["approval_id"], decision="approve")
    result = await asyncio.wait_for(handle.result(), 60)

    assert receipt.decision == "approve"
    assert result.status == "replied" and result.pending_approval is None
    assert (servers.web / "approved.txt").read_text() == "yes"
    assert branch_rows(store, result) == ["tool said: wrote note approved"]
    tools = [e.type for e in store.list_events(handle.id) if e.type.startswith("tool_")]
    assert tools == ["tool_approved", "tool_requested", "tool_finished"]
    await keep_history(client, handle.id, "approval_in_a_branch")
    await keep_history(client, ids.child_workflow_id(handle.id, 0, 1), "approval_branch_waits")


async def test_approve_always_lets_later_calls_of_the_tool_in_the_session_run_unasked(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    asking_worker: Settings,
) -> None:
    session = f"s-always-{uuid.uuid4().hex[:6]}"
    Conversation(branch_writes("first", "1"), told_branch, branches=2).install(
        scripted, "gpt-tools"
    )
    first = await start(asking_worker, client, "Write the first note.", session=session)
    pending = await pending_approval(first)
    await answer(first, approval_id=pending["approval_id"], decision="approve_always")
    assert (await asyncio.wait_for(first.result(), 60)).status == "replied"

    Conversation(branch_writes("second", "2"), told_branch, branches=2).install(
        scripted, "gpt-tools"
    )
    second = await start(asking_worker, client, "Write the second note.", session=session)
    result = await asyncio.wait_for(second.result(), 60)

    assert result.status == "replied"
    assert (servers.web / "second.txt").read_text() == "2", "ran without asking"
    history = await second.fetch_history()
    signals = [
        e for e in history.events if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    assert signals == [], "the second task never asked"


async def test_a_denial_reaches_the_model_with_the_users_reason(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    asking_worker: Settings,
) -> None:
    Conversation(branch_writes("denied", "no"), told_branch, branches=2).install(
        scripted, "gpt-tools"
    )
    handle = await start(asking_worker, client, "Write a note if allowed.")
    pending = await pending_approval(handle)
    await answer(
        handle,
        approval_id=pending["approval_id"],
        decision="deny",
        reason="that folder is shared",
    )
    result = await asyncio.wait_for(handle.result(), 60)

    assert result.status == "replied"
    (row,) = branch_rows(store, result)
    assert "Not approved: the user denied this call of mcp__web__write" in row
    thread = ids.child_workflow_id(handle.id, 0, 1)
    stored = store.get(ids.thread_tool_result_id(thread, 0, 0))
    assert stored is not None and "Their reason: that folder is shared" in stored.text
    assert not (servers.web / "denied.txt").exists()
    (denial,) = [e for e in store.list_events(handle.id) if e.type.startswith("tool_")]
    assert denial.type == "tool_denied" and "that folder is shared" in denial.data["reason"]


async def test_an_unanswered_approval_times_out_with_its_own_text(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    asking_worker: Settings,
) -> None:
    Conversation(branch_writes("late", "zzz"), told_branch, branches=2).install(
        scripted, "gpt-tools"
    )
    handle = await start(
        asking_worker,
        client,
        "Write a note, if anyone answers.",
        settings=RoundSettings(ask_timeout_hours=3 / 3600),
    )
    await pending_approval(handle)
    result = await asyncio.wait_for(handle.result(), 60)

    thread = ids.child_workflow_id(handle.id, 0, 1)
    stored = store.get(ids.thread_tool_result_id(thread, 0, 0))
    assert stored is not None
    assert stored.text.startswith("Not approved: nobody answered the request to run")
    assert "denied" not in stored.text
    assert result.status == "replied" and result.pending_approval is None
    assert not (servers.web / "late.txt").exists()


async def test_a_headless_task_does_not_run_a_call_that_asks(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    asking_worker: Settings,
) -> None:
    Conversation(branch_writes("headless", "x"), told_branch, branches=2).install(
        scripted, "gpt-tools"
    )
    handle = await start(asking_worker, client, "Write a note.", headless=True)
    result = await asyncio.wait_for(handle.result(), 60)

    (row,) = branch_rows(store, result)
    assert "this task runs headless, with nobody to ask" in row
    assert not (servers.web / "headless.txt").exists()


async def test_the_main_agents_call_that_asks_every_time_waits_and_can_be_denied(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    asking_worker: Settings,
) -> None:
    seen: list[RecordedRequest] = []

    def main_agent(request: RecordedRequest) -> Reply:
        seen.append(request)
        results = tool_results(request)
        if not results:
            return Reply(text="Let me search.", calls=[Call("mcp__web__search", {"query": "qqq"})])
        return final(results[-1]["content"][:80])

    scripted.script("gpt-tools", main_agent, main_agent)
    handle = await start(asking_worker, client, "Search the notes.")
    pending = await pending_approval(handle)
    assert pending["where"] == "main" and pending["why"] == "Let me search."
    assert pending["can_approve_always"] is False  # approval "always"
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await answer(handle, approval_id=pending["approval_id"], decision="approve_always")
    assert "asks before every call" in str(refused.value.cause)

    await answer(handle, approval_id=pending["approval_id"], decision="deny")
    result = await asyncio.wait_for(handle.result(), 60)

    assert result.reply is not None
    assert result.reply.startswith("ERROR: Not approved: the user denied this call")
    await keep_history(client, handle.id, "approval_of_the_main_agent_denied")


async def test_the_cli_the_gateway_and_the_client_answer_approvals(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    asking_worker: Settings,
    cli_env: dict[str, str],
) -> None:
    """Three steps of the main agent, each a `search` (approval "always"): approved with
    `errands approve`, denied through POST /v1/tasks/{id}/approval, approved with Client."""

    def main_agent(request: RecordedRequest) -> Reply:
        done = len(tool_results(request))
        if done < 3:
            return Reply(text=f"Search {done}.", calls=[Call("mcp__web__search", {"query": "qqq"})])
        said = " | ".join(r["content"][:30] for r in tool_results(request))
        return final(said)

    scripted.script("gpt-tools", *[main_agent] * 4)
    handle = await start(asking_worker, client, "Search three times.")
    errands_client = ErrandsClient(client, asking_worker, store=store)

    first = await pending_approval(handle)
    shown = await run_cli(cli_env, "status", handle.id)
    assert "mcp__web__search (main) waits for your approval." in shown.stdout
    pin = f"--sha256 {first['arguments_sha256']}"
    assert f"approve with: errands approve {handle.id} {pin}\n" in shown.stdout
    approved = await run_cli(cli_env, "approve", handle.id, *pin.split(), "--json")
    assert approved.code == 0, approved.stderr
    assert approved.json()["approval_id"] == first["approval_id"]

    second = await pending_approval(handle)
    assert second["approval_id"] != first["approval_id"]
    app = create_app(errands_client, token=None)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
        stale = await http.post(
            f"/v1/tasks/{handle.id}/approval",
            json={"decision": "approve", "approval_id": first["approval_id"]},
        )
        assert stale.status_code == 409, stale.text
        denied = await http.post(
            f"/v1/tasks/{handle.id}/approval", json={"decision": "deny", "reason": "enough"}
        )
        assert denied.status_code == 200, denied.text

    third = await pending_approval(handle)
    receipt = await errands_client.task(handle.id).approve()
    assert receipt.approval_id == third["approval_id"]
    result = await asyncio.wait_for(handle.result(), 60)

    ran, refused, ran_again = (result.reply or "").split(" | ")
    assert ran == ran_again == "no notes match"
    assert refused.startswith("ERROR: Not approved: the user")
    with pytest.raises(TaskEnded, match="there is no tool call to approve"):
        await errands_client.task(handle.id).deny()


@errands.tool
def exchange_rate(currency: str) -> float:
    """Today's rate of one euro in ``currency``."""
    rates = {"USD": 1.08, "GBP": 0.85}
    if currency not in rates:
        raise KeyError(f"no rate for {currency}")
    return rates[currency]


async def test_the_main_agents_python_tools_run_beside_its_mcp_tools(
    client: Client, settings: Settings, store: SessionStore, servers: Servers, scripted: Any
) -> None:
    own = settings.model_copy(
        update={
            "task_queue": f"tools-main-{uuid.uuid4().hex[:6]}",
            "mcp_servers": json.dumps({"files": servers.config["files"]}),
        }
    )
    seen: list[RecordedRequest] = []

    def main_agent(request: RecordedRequest) -> Reply:
        seen.append(request)
        results = tool_results(request)
        if not results:
            return Reply(
                calls=[
                    Call("exchange_rate", {"currency": "USD"}),
                    Call("exchange_rate", {"currency": "XYZ"}),
                    Call("mcp__files__search", {"query": "big note"}),
                ]
            )
        return final(" | ".join(r["content"] for r in results))

    scripted.script("gpt-tools", main_agent, main_agent)
    router = ModelRouter(own)
    plugin = ErrandsPlugin(own, tools=[exchange_rate], store=store, router=router)
    async with Worker(client, task_queue=own.task_queue, plugins=[plugin]):
        _, result = await run_task(client, own, "What is a euro in dollars?")
    await router.aclose()

    names = offered(seen[0])
    assert names.index("exchange_rate") < names.index("mcp__files__search")
    usd, unknown, found = (result.reply or "").split(" | ")
    assert usd == "1.08"
    assert unknown.startswith("ERROR: exchange_rate failed: KeyError")
    assert found == "big"


@pytest.mark.fast
def test_a_main_agent_tool_may_not_take_a_built_in_name() -> None:
    @errands.tool(name="delegate", description="Shadows the control tool.")
    def shadow() -> str:
        return ""

    with pytest.raises(errands.ConfigError, match="'delegate' has a name taken by a built-in"):
        ErrandsPlugin(tools=[shadow])


async def test_a_tool_call_whose_every_attempt_died_is_reported_and_the_branch_goes_on(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    process_workers: ProcessWorkers,
) -> None:
    env = {
        **process_workers.env,
        "ERRANDS_MCP_SERVERS": json.dumps({"web": servers.config["web"]}),
    }
    Conversation(
        delegating(call("mcp__web__write", name="died", text="one attempt", hold=True)),
        told_branch,
        branches=2,
    ).install(scripted, "gpt-tools")
    calls = servers.web / "calls.jsonl"
    first = spawn_worker(env)
    handle = await start_task(
        client,
        process_workers.queue,
        "Write the note, one attempt only.",
        model=MODEL,
        settings=RoundSettings(heartbeat_timeout_seconds=3, tool_max_attempts=1),
    )
    try:
        await eventually(
            lambda: any(c["name"] == "died" for c in writes(servers.web, calls)),
            "the tool call to reach the server",
        )
    finally:
        kill_worker(first)
        (servers.web / "died.release").touch()
    with worker_process(env):
        result = await asyncio.wait_for(handle.result(), 120)

    assert result.status == "replied", result.error
    (row,) = branch_rows(store, result)
    assert "this tool could not be run (1 attempt failed" in row
    assert "Heartbeat" in row or "heartbeat" in row.lower()
    assert [c["name"] for c in writes(servers.web, calls)].count("died") == 1, "never retried"


async def test_two_branches_approvals_wait_in_turn_and_the_signal_answers_too(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    asking_worker: Settings,
) -> None:
    Conversation(
        delegating(
            call("mcp__web__write", name="left", text="L"),
            call("mcp__web__write", name="right", text="R"),
        ),
        told_branch,
        branches=4,
    ).install(scripted, "gpt-tools")
    handle = await start(asking_worker, client, "Write two notes.")

    first = await pending_approval(handle)
    await handle.signal("submit_approval", {"nonsense": True})  # recorded, not fatal
    await handle.signal(
        "submit_approval", {"approval_id": first["approval_id"], "decision": "approve"}
    )
    second = await pending_approval(handle, other_than=first["approval_id"])
    assert second["where"] != first["where"]
    await answer(handle, approval_id=second["approval_id"], decision="deny")
    result = await asyncio.wait_for(handle.result(), 60)

    assert result.status == "replied" and result.pending_approval is None
    assert any("approval_id" in e for e in result.answer_errors)
    written = {p.stem for p in servers.web.glob("*.txt")} & {"left", "right"}
    assert len(written) == 1, "one approved, one denied"


async def test_cancelling_a_task_while_a_branch_waits_for_approval_clears_the_wait(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    asking_worker: Settings,
) -> None:
    Conversation(branch_writes("never-approved", "no")[:1], told_branch, branches=1).install(
        scripted, "gpt-tools"
    )
    handle = await start(asking_worker, client, "Write a note, then be cancelled.")
    await pending_approval(handle)
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()

    thread = ids.child_workflow_id(handle.id, 0, 1)
    key = ids.thread_tool_result_id(thread, 0, 0)
    await eventually(lambda: store.get(key) is not None, "the waiting call's cancelled result")
    assert store.get(key).text.startswith("Cancelled")  # type: ignore[union-attr]
    described = await handle.describe()
    assert described.status is not None and described.status.name == "CANCELED"
    assert not (servers.web / "never-approved.txt").exists()
