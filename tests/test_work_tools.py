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
import os
import re
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from errands import ids
from errands.contracts import NewMessage
from errands.devserver import DevServer, free_port
from errands.routing import ModelRouter
from errands.scripted import Call, RecordedRequest, Reply, ScriptedModelServer
from errands.settings import Settings
from errands.store import SessionStore
from errands.workflow_io import RoundSettings, TaskResult
from tests.helpers import Conversation, keep_history, start_task
from tests.mcp_notes import ROOT, notes_command, start_listening, stop
from tests.test_worker_crash import spawn_worker, worker_env
from worker import build_worker

MODEL = "openai:gpt-tools"
TOKEN = "notes-token-" + "k" * 24
BIG = "".join(
    f"line {n:04d} of the big note, kept in the store and never in history\n" for n in range(60)
)
CALL = re.compile(r"call (\S+) (\{.*\})", re.DOTALL)


@dataclass
class Servers:
    files: Path
    """The stdio server's notes (a process per session)."""
    web: Path
    """The HTTP server's notes."""
    config: dict[str, Any]
    """ERRANDS_MCP_SERVERS for both."""


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    files = tmp_path_factory.mktemp("files-notes")
    web = tmp_path_factory.mktemp("web-notes")
    (files / "big.txt").write_text(BIG)
    port = free_port()
    process = start_listening(
        notes_command(web, "--http", str(port), "--token", TOKEN), port, web.parent / "web.log"
    )
    config = {
        "files": {"command": notes_command(files), "cwd": str(ROOT)},
        "web": {
            "url": f"http://127.0.0.1:{port}/mcp",
            "headers": {"Authorization": f"Bearer {TOKEN}"},
        },
    }
    try:
        yield Servers(files, web, config)
    finally:
        stop(process)


def writes(notes: Path, log: Path | None = None) -> list[dict[str, Any]]:
    """The server's record of the writes it made (or, given ``log``, of that log)."""
    path = log or notes / "writes.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
async def tools_worker(
    client: Client, settings: Settings, store: SessionStore, servers: Servers
) -> AsyncIterator[Settings]:
    """A worker of its own whose agents may call both notes servers (and one that is down)."""
    down = {"url": f"http://127.0.0.1:{free_port()}/mcp", "timeout_seconds": 5}
    own = settings.model_copy(
        update={
            "task_queue": f"tools-{uuid.uuid4().hex[:6]}",
            "mcp_servers": json.dumps({**servers.config, "down": down}),
        }
    )
    router = ModelRouter(own)
    async with build_worker(client, own, store=store, router=router):
        yield own
    await router.aclose()


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


def delegating(*prompts: str, final: str = "done") -> list[Reply]:
    subtasks = [{"type": "general", "prompt": p} for p in prompts]
    return [
        Reply(calls=[Call("delegate", {"reply": "On it.", "subtasks": subtasks})]),
        Reply(calls=[Call("final_reply", {"text": final})]),
    ]


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
    pinned = {"servers": {"files": {"tools": [search], "for": ["*"], "error": None}}}
    store.append_once(
        NewMessage(
            id=ids.task_tools_id(task_id),
            session_id=ids.task_tools_id(task_id),
            role="system",
            kind="tools",
            text=json.dumps(pinned),
            task_id=task_id,
        )
    )
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

    _, result = await run_task(
        client, tools_worker, "Try every tool.", max_subtasks=4, tool_timeout_seconds=3
    )

    assert result.status == "replied", result.error
    failed, invalid, down, hung = branch_rows(store, result)
    assert "the fail tool always fails" in failed
    assert "text" in invalid and "required" in invalid.lower()
    assert "There is no tool named 'mcp__down__anything'" in down
    assert "mcp__files__sleep was stopped" in hung and "did not answer within 3" in hung
    assert not (servers.web / "no-text.txt").exists()


async def until(condition: Any, what: str, timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.1)
    assert condition(), what


async def test_a_worker_killed_during_a_tool_call_retries_it_with_the_same_key_and_writes_once(
    client: Client,
    dev_server: DevServer,
    database_url: str,
    model_server: ScriptedModelServer,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
) -> None:
    queue = f"tools-kill-{uuid.uuid4().hex[:6]}"
    env = {
        **worker_env(dev_server, queue, database_url, model_server),
        "ERRANDS_MCP_SERVERS": json.dumps({"web": servers.config["web"]}),
    }
    Conversation(
        delegating(call("mcp__web__write", name="once", text="exactly once", delay=2)),
        told_branch,
        branches=2,
    ).install(scripted, "gpt-tools")
    calls = servers.web / "calls.jsonl"

    def calls_for_once() -> list[dict[str, Any]]:
        return [c for c in writes(servers.web, calls) if c["name"] == "once"]

    first = spawn_worker(env)
    handle = await start_task(
        client,
        queue,
        "Write the note once.",
        model=MODEL,
        settings=RoundSettings(heartbeat_timeout_seconds=3),
    )
    try:
        await until(lambda: len(calls_for_once()) == 1, "the tool call to reach the server")
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    # The server finishes the call the dead worker made; the retry then finds it done.
    await until(lambda: (servers.web / "once.txt").exists(), "the first call's write")
    second = spawn_worker(env)
    try:
        result = await asyncio.wait_for(handle.result(), 120)
    finally:
        os.killpg(second.pid, signal.SIGKILL)
        second.wait()

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
        delegating(call("mcp__web__write", name="never", text="cancelled first", delay=4))[:1],
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
    await until(
        lambda: any(c["name"] == "never" for c in writes(servers.web, servers.web / "calls.jsonl")),
        "the tool call to reach the server",
    )
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()

    thread = ids.child_workflow_id(handle.id, 0, 1)
    key = ids.thread_tool_result_id(thread, 0, 0)
    await until(lambda: store.get(key) is not None, "the cancelled call's result")
    row = store.get(key)
    assert row is not None and row.meta["is_error"]
    assert row.text.startswith("mcp__web__write was cancelled")
    kinds = [r.kind for r in store.list_session(thread)]
    assert kinds[-2:] == ["step", "tool_result"], "the thread ends with the call's result"
    await asyncio.sleep(6)  # past the tool's delay: a call still running would have written
    assert not (servers.web / "never.txt").exists()


async def test_the_demo_models_facts_branch_calls_the_bundled_almanac_server(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    almanac = {"almanac": {"command": [sys.executable, "-m", "errands.demo_tools"]}}
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
        return Reply(calls=[Call("final_reply", {"text": f"read: {said}"})])

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
    key = ids.round_tool_result_id(result.task_id, 0, "primary", 1, 1)
    assert [w["idempotency_key"] for w in writes(servers.web) if w["name"] == "main-note"] == [key]
    await keep_history(client, handle.id, "round_mcp_tools")
    exported = await histories(client, handle, 0)
    assert "line 0030 of the big note" not in exported
    assert TOKEN not in exported


async def test_a_tool_that_needs_approval_is_not_run_until_approvals_exist(
    client: Client, settings: Settings, store: SessionStore, servers: Servers, scripted: Any
) -> None:
    web = {**servers.config["web"], "approval": {"write": "ask"}}
    own = settings.model_copy(
        update={
            "task_queue": f"tools-ask-{uuid.uuid4().hex[:6]}",
            "mcp_servers": json.dumps({"web": web}),
        }
    )
    Conversation(
        delegating(call("mcp__web__write", name="unasked", text="should not exist")),
        told_branch,
        branches=2,
    ).install(scripted, "gpt-tools")
    router = ModelRouter(own)
    async with build_worker(client, own, store=store, router=router):
        _, result = await run_task(client, own, "Write without asking.")
    await router.aclose()

    assert result.status == "replied", result.error
    (row,) = branch_rows(store, result)
    assert "mcp__web__write needs the user's approval (approval 'ask'" in row
    assert not (servers.web / "unasked.txt").exists()
    assert not [
        c for c in writes(servers.web, servers.web / "calls.jsonl") if c["name"] == "unasked"
    ]
