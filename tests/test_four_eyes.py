"""Who may approve a tool call (issue 25): the task checks every answer against the tool's
policy and the task's owner, under the client's own checks. ``approver``: a principal with the
approver role (or an admin); ``two``: two distinct principals, each the owner, an approver or an
admin (four eyes), the first approval recorded while the call waits on. A refused answer changes
nothing; the event log names everyone who answered and the digest of the call they answered.

Driven through ``errands.Client(...).as_principal(...)`` against a real MCP server whose
``search`` needs two approvals and whose ``write`` needs an approver."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError

from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import Call, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.client import Client as ErrandsClient
from errands.client import TaskHandle
from errands.contracts.approvals import ApprovalAnswer, ApprovalReceipt
from errands.contracts.principals import Principal
from errands.contracts.workflows import TaskResult
from errands.errors import AnswerRejected, SessionNotFound, TaskNotFound
from errands.settings import Settings
from errands.workers import build_worker
from tests.helpers import Conversation, eventually
from tests.mcp_notes import Servers
from tests.test_work_tools import MODEL, branch_rows, call, delegating, told_branch, tool_results

ALICE = Principal(id="alice", role="user")
"""Starts the tasks: their owner."""
BOB = Principal(id="bob", role="user")
CAROL = Principal(id="carol", role="approver")
DAVE = Principal(id="dave", role="approver")


@asynccontextmanager
async def worker_with(
    approval: dict[str, str],
    client: Client,
    settings: Settings,
    store: SessionStore,
    servers: Servers,
) -> AsyncIterator[Settings]:
    """A worker of its own whose web server's tools wait for whom ``approval`` says."""
    web = {**servers.config["web"], "approval": approval}
    own = settings.model_copy(
        update={
            "task_queue": f"four-eyes-{uuid.uuid4().hex[:6]}",
            "mcp_servers": json.dumps({"web": web}),
        }
    )
    router = ModelRouter(own)
    try:
        async with build_worker(client, own, store=store, router=router):
            yield own
    finally:
        await router.aclose()


@pytest.fixture
async def policy_worker(
    client: Client, settings: Settings, store: SessionStore, servers: Servers
) -> AsyncIterator[Settings]:
    """The web server's ``search`` needs two approvals; its ``write`` an approver's."""
    approval = {"search": "two", "write": "approver"}
    async with worker_with(approval, client, settings, store, servers) as own:
        yield own


@pytest.fixture
async def errands_client(
    client: Client, policy_worker: Settings, store: SessionStore
) -> ErrandsClient:
    return ErrandsClient(client, policy_worker, store=store)


def calls_once(tool: str, arguments: dict[str, Any]) -> Any:
    """A main agent that calls ``tool`` once, then replies with what it read."""

    def main_agent(request: RecordedRequest) -> Reply:
        results = tool_results(request)
        if not results:
            return Reply(text="I need this.", calls=[Call(tool, arguments)])
        return Reply(calls=[Call("final_reply", {"text": results[-1]["content"][:120]})])

    return main_agent


async def waiting(task: TaskHandle, approved: int = 0) -> dict[str, Any]:
    """The call waiting for approval, once ``approved`` approvals are recorded on it."""

    async def pending() -> dict[str, Any] | None:
        status = await task.status()
        shown = status.pending_approval
        if shown is None or len(shown["approved_by"]) != approved:
            return None
        assert status.status == "waiting_for_user"
        return shown

    return await eventually(pending, f"a call of {task.task_id} waiting for approval")


def approval_log(store: SessionStore, task_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e.type, e.data) for e in store.list_events(task_id) if e.type.startswith("approval_")]


def tool_log(store: SessionStore, task_id: str) -> list[str]:
    return [e.type for e in store.list_events(task_id) if e.type.startswith("tool_")]


async def test_two_distinct_principals_approve_a_call_whose_policy_is_two(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    errands_client: ErrandsClient,
) -> None:
    agent = calls_once("mcp__web__search", {"query": "four eyes"})
    scripted.script("gpt-tools", agent, agent)
    task = await errands_client.as_principal(ALICE).start("Search the notes.", model=MODEL)
    pending = await waiting(task)
    assert pending["policy"] == "two" and pending["approvals_needed"] == 2
    assert pending["can_approve_always"] is False

    # A user who is neither the owner nor an approver: the client does not show them the task,
    # and the task itself refuses the answer if it reaches it all the same.
    with pytest.raises(TaskNotFound):
        await errands_client.as_principal(BOB).task(task.task_id).approve()
    raw = client.get_workflow_handle(task.task_id)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await raw.execute_update(
            "answer_approval",
            ApprovalAnswer(approval_id=pending["approval_id"], decision="approve", by=BOB),
            result_type=ApprovalReceipt,
        )
    assert "bob (user) may not approve calls of mcp__web__search" in str(refused.value.cause)
    assert "two different principals" in str(refused.value.cause)
    await raw.signal(
        "submit_approval",
        ApprovalAnswer(approval_id=pending["approval_id"], decision="approve", by=BOB),
    )
    status = await eventually(
        lambda: _with_error(task, "bob (user) may not approve"), "the refused signal recorded"
    )
    assert status.pending_approval == pending, "a refused answer changes nothing"

    # The first approver's verdict is recorded; the call waits on.
    first = await errands_client.as_principal(CAROL).task(task.task_id).approve()
    assert first.waiting_for == 1 and first.approved_by == [CAROL]
    pending_after_one = await waiting(task, approved=1)
    assert pending_after_one["approved_by"] == [{"id": "carol", "role": "approver"}]
    assert pending_after_one["approval_id"] == pending["approval_id"]
    assert "tool_requested" not in tool_log(store, task.task_id), "nothing ran yet"

    # The same principal approving again does not count twice.
    with pytest.raises(AnswerRejected, match="carol approved this call of mcp__web__search"):
        await errands_client.as_principal(CAROL).task(task.task_id).approve()
    assert (await waiting(task, approved=1)) == pending_after_one

    # A second, distinct principal (the owner) runs it.
    second = await errands_client.as_principal(ALICE).task(task.task_id).approve()
    assert second.waiting_for == 0 and second.approved_by == [CAROL, ALICE]
    result = await task.wait(timeout=60)
    assert result.status == "replied" and result.reply == "no notes match"

    digest = pending["arguments_sha256"]
    assert approval_log(store, task.task_id)[1:] == [
        (
            "approval_recorded",
            {
                "approval_id": pending["approval_id"],
                "arguments_sha256": None,
                "waiting_for": 1,
                "by": {"id": "carol", "role": "approver"},
                "approved_by": [{"id": "carol", "role": "approver"}],
                "call_sha256": digest,
                "tool": "mcp__web__search",
            },
        ),
        (
            "approval_answered",
            {
                "approval_id": pending["approval_id"],
                "decision": "approve",
                "reason": None,
                "arguments_sha256": None,
                "by": {"id": "alice", "role": "user"},
                "approved_by": [
                    {"id": "carol", "role": "approver"},
                    {"id": "alice", "role": "user"},
                ],
                "call_sha256": digest,
                "tool": "mcp__web__search",
            },
        ),
    ]
    assert tool_log(store, task.task_id) == ["tool_approved", "tool_requested", "tool_finished"]


async def test_a_branchs_call_of_policy_two_waits_for_a_second_approver_sent_by_signal(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    errands_client: ErrandsClient,
) -> None:
    """A branch's call waits through its task: the first approval (here the signal path,
    fire-and-forget) is recorded by the task and the branch waits on; the second runs it."""
    Conversation(
        delegating(call("mcp__web__search", query="branch eyes")), told_branch, branches=2
    ).install(scripted, "gpt-tools")
    task = await errands_client.as_principal(ALICE).start("Search in a branch.", model=MODEL)
    pending = await waiting(task)
    assert pending["where"] == "round 0 · subtask 1" and pending["policy"] == "two"

    raw = client.get_workflow_handle(task.task_id)
    first = ApprovalAnswer(approval_id=pending["approval_id"], decision="approve", by=DAVE)
    await raw.signal("submit_approval", first)
    await raw.signal("submit_approval", first)  # the same approver again counts once
    status = await eventually(
        lambda: _with_error(task, "dave approved this call of mcp__web__search already"),
        "the repeated approval refused",
    )
    assert status.pending_approval is not None
    assert status.pending_approval["approved_by"] == [{"id": "dave", "role": "approver"}]

    await errands_client.as_principal(CAROL).task(task.task_id).approve()
    result = await task.wait(timeout=60)
    assert result.status == "replied"
    assert branch_rows(store, result) == ["tool said: no notes match"]
    logged = approval_log(store, task.task_id)
    assert [t for t, _ in logged] == [
        "approval_requested",
        "approval_recorded",
        "approval_answered",
    ]
    assert logged[2][1]["approved_by"] == [
        {"id": "dave", "role": "approver"},
        {"id": "carol", "role": "approver"},
    ]
    assert tool_log(store, task.task_id) == ["tool_approved", "tool_requested", "tool_finished"]


async def test_a_denial_by_the_owner_settles_a_call_of_policy_two_at_once(
    scripted: ScriptedModelServer, store: SessionStore, errands_client: ErrandsClient
) -> None:
    agent = calls_once("mcp__web__search", {"query": "not this"})
    scripted.script("gpt-tools", agent, agent)
    task = await errands_client.as_principal(ALICE).start("Search the notes.", model=MODEL)
    pending = await waiting(task)
    await errands_client.as_principal(CAROL).task(task.task_id).approve()
    await waiting(task, approved=1)

    receipt = await errands_client.as_principal(ALICE).task(task.task_id).deny(reason="no")
    assert receipt.waiting_for == 0
    result = await task.wait(timeout=60)
    assert (result.reply or "").startswith("ERROR: Not approved: the user denied")

    type_, answered = approval_log(store, task.task_id)[-1]
    assert type_ == "approval_answered" and answered["decision"] == "deny"
    assert answered["by"] == {"id": "alice", "role": "user"}
    assert answered["approved_by"] == [{"id": "carol", "role": "approver"}]
    assert answered["call_sha256"] == pending["arguments_sha256"]
    assert tool_log(store, task.task_id) == ["tool_denied"]


async def test_policy_approver_refuses_the_owner_who_is_a_user_and_takes_an_approver(
    servers: Servers,
    scripted: ScriptedModelServer,
    store: SessionStore,
    errands_client: ErrandsClient,
) -> None:
    agent = calls_once("mcp__web__write", {"name": "reviewed", "text": "by dave"})
    scripted.script("gpt-tools", agent, agent)
    task = await errands_client.as_principal(ALICE).start("Write the note.", model=MODEL)
    pending = await waiting(task)
    assert pending["policy"] == "approver" and pending["approvals_needed"] == 1

    with pytest.raises(AnswerRejected) as refused:
        await errands_client.as_principal(ALICE).task(task.task_id).approve()
    assert "alice (user) may not approve calls of mcp__web__write" in str(refused.value)
    assert "its policy asks for an approver" in str(refused.value)
    with pytest.raises(AnswerRejected, match="approve this call once, or deny it"):
        await errands_client.as_principal(DAVE).task(task.task_id).approve(always=True)
    assert (await waiting(task)) == pending, "refused answers change nothing"
    assert not (servers.web / "reviewed.txt").exists()

    receipt = await errands_client.as_principal(DAVE).task(task.task_id).approve()
    assert receipt.waiting_for == 0 and receipt.approved_by == [DAVE]
    result = await task.wait(timeout=60)
    assert result.status == "replied"
    assert (servers.web / "reviewed.txt").read_text() == "by dave"
    _, answered = approval_log(store, task.task_id)[-1]
    assert answered["by"] == {"id": "dave", "role": "approver"}
    assert answered["call_sha256"] == pending["arguments_sha256"]


async def test_an_answer_that_names_nobody_cannot_approve_for_an_approver(
    client: Client, scripted: ScriptedModelServer, errands_client: ErrandsClient
) -> None:
    """Policies that need to know who approves refuse an answer that does not say (a frontend
    from before principals talking to Temporal directly); the owner's denial still counts."""
    agent = calls_once("mcp__web__write", {"name": "anonymous", "text": "x"})
    scripted.script("gpt-tools", agent, agent)
    task = await errands_client.as_principal(ALICE).start("Write a note.", model=MODEL)
    pending = await waiting(task)
    raw = client.get_workflow_handle(task.task_id)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await raw.execute_update(
            "answer_approval",
            ApprovalAnswer(approval_id=pending["approval_id"], decision="approve"),
            result_type=ApprovalReceipt,
        )
    assert "an answer that does not say who gave it may not approve" in str(refused.value.cause)
    await raw.execute_update(
        "answer_approval",
        ApprovalAnswer(approval_id=pending["approval_id"], decision="deny", reason="not so"),
        result_type=ApprovalReceipt,
    )
    result = await asyncio.wait_for(task.wait(), 60)
    assert "Their reason: not so" in (result.reply or "")


async def _with_error(task: TaskHandle, text: str) -> TaskResult | None:
    status = await task.status()
    return status if any(text in e for e in status.answer_errors) else None


async def test_an_approver_sees_anothers_task_only_while_a_call_there_waits_for_approvers(
    servers: Servers,
    scripted: ScriptedModelServer,
    errands_client: ErrandsClient,
) -> None:
    """A call the owner answers (policy ask/always) gives an approver nothing to do: the task
    is not found for them, as a missing one; a call of policy approver lets them read and
    follow it and answer that call, never steer, cancel or ask about it."""
    agent = calls_once("mcp__web__write", {"name": "seen", "text": "by dave"})
    scripted.script("gpt-tools", agent, agent)
    owners = errands_client.as_principal(ALICE)
    as_dave = errands_client.as_principal(DAVE)
    task = await owners.start("Write the note.", model=MODEL)
    pending = await waiting(task)
    assert pending["policy"] == "approver"
    theirs = as_dave.task(task.task_id)
    assert (await theirs.status()).pending_approval == pending
    assert [e.type async for e in theirs.events(follow=False)][0] == "task_started"
    for refused in (theirs.say("hurry"), theirs.btw("what is it doing?"), theirs.cancel()):
        with pytest.raises(TaskNotFound):
            await refused
    await theirs.approve(arguments_sha256=pending["arguments_sha256"])
    assert (await task.wait(timeout=60)).status == "replied"
    with pytest.raises(TaskNotFound) as after:
        await theirs.status()
    assert f"no task {task.task_id!r}" in str(after.value), "nothing waits for them any more"
    with pytest.raises(SessionNotFound):
        await as_dave.history(task.session_id or "")


@pytest.fixture
async def two_step_worker(
    client: Client, settings: Settings, store: SessionStore, servers: Servers
) -> AsyncIterator[ErrandsClient]:
    """``write`` waits for an approver, ``read`` for its owner."""
    approval = {"write": "approver", "read": "always"}
    async with worker_with(approval, client, settings, store, servers) as own:
        yield ErrandsClient(client, own, store=store)


async def test_an_approvers_event_stream_ends_once_nothing_waits_for_them(
    servers: Servers, scripted: ScriptedModelServer, two_step_worker: ErrandsClient
) -> None:
    """Dave follows alice's task while its write waits for an approver; he approves it; the
    task goes on to a read that waits for alice herself: his stream ends there, the task still
    running, and it showed him nothing past that point."""
    name = f"steps-{uuid.uuid4().hex[:6]}"

    def agent(request: RecordedRequest) -> Reply:
        done = len(tool_results(request))
        if done == 0:
            return Reply(calls=[Call("mcp__web__write", {"name": name, "text": "x"})])
        if done == 1:
            return Reply(calls=[Call("mcp__web__read", {"name": name})])
        return Reply(calls=[Call("final_reply", {"text": "read it"})])

    scripted.script("gpt-tools", agent, agent, agent)
    task = await two_step_worker.as_principal(ALICE).start("Write, then read.", model=MODEL)
    await waiting(task)
    theirs = two_step_worker.as_principal(DAVE).task(task.task_id)
    followed: list[str] = []

    async def follow() -> None:
        async for event in theirs.events():
            followed.append(event.type)
            if event.type == "approval_requested" and followed.count("approval_requested") == 1:
                await theirs.approve()

    await asyncio.wait_for(follow(), 60)  # ends by itself: no error, no last event
    assert (await task.status()).status == "waiting_for_user", "the read waits for alice"
    assert "replied" not in followed
    pending = await waiting(task)
    assert pending["tool"] == "mcp__web__read" and pending["policy"] == "always"
    await two_step_worker.as_principal(ALICE).task(task.task_id).approve()
    assert (await task.wait(timeout=60)).reply == "read it"
