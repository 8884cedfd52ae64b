"""The event log tells every call that waits for the user's approval (issue 22): an
``approval_requested`` as the wait starts, then one ``approval_answered`` with what became of it
(the user's answer, a timeout, a cancellation, or a headless task that could not ask). The page
and ``errands run`` show approval cards from these alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError

from errands.adapters.scripted import Call, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.contracts import ids
from errands.contracts.events import StoredEvent
from errands.contracts.workflows import RoundSettings
from errands.settings import Settings
from tests.helpers import Conversation, eventually, keep_history
from tests.mcp_notes import Servers
from tests.test_work_tools import (
    answer,
    branch_writes,
    pending_approval,
    start,
    told_branch,
    tool_results,
)


def approval_events(store: SessionStore, task_id: str) -> list[StoredEvent]:
    return [e for e in store.list_events(task_id) if e.type.startswith("approval_")]


def answered(store: SessionStore, task_id: str) -> list[dict[str, Any]]:
    return [e.data for e in approval_events(store, task_id) if e.type == "approval_answered"]


async def test_a_branch_call_is_logged_as_it_waits_and_as_it_is_approved(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    asking_worker: Settings,
) -> None:
    Conversation(branch_writes("logged", "yes"), told_branch, branches=2).install(
        scripted, "gpt-tools"
    )
    handle = await start(asking_worker, client, "Write a note once I say so.")
    pending = await pending_approval(handle)
    digest = pending["arguments_sha256"]
    await answer(
        handle, approval_id=pending["approval_id"], decision="approve", arguments_sha256=digest
    )
    assert (await asyncio.wait_for(handle.result(), 60)).status == "replied"

    requested, reply = approval_events(store, handle.id)
    assert requested.type == "approval_requested" and requested.cause == pending["approval_id"]
    assert requested.data == {
        "approval_id": pending["approval_id"],
        "tool": "mcp__web__write",
        "arguments": pending["arguments"],
        "arguments_sha256": pending["arguments_sha256"],
        "arguments_bytes": pending["arguments_bytes"],
        "why": pending["why"],
        "where": "round 0 · subtask 1",
        "can_approve_always": True,
        "expires_at": pending["expires_at"],
        "policy": "ask",
    }
    assert reply.type == "approval_answered"
    assert reply.data == {
        "approval_id": pending["approval_id"],
        "decision": "approve",
        "reason": None,
        "arguments_sha256": digest,
        "by": None,
        "approved_by": [],
        "call_sha256": digest,
        "tool": "mcp__web__write",
    }, "the digest the person's answer carried, and the digest of the call it settled"
    tool = next(e for e in store.list_events(handle.id) if e.type == "tool_approved")
    assert requested.seq < reply.seq < tool.seq
    await keep_history(client, handle.id, "approval_events_in_a_branch")
    thread = ids.child_workflow_id(handle.id, 0, 1)
    await keep_history(client, thread, "approval_events_branch_waits")


async def test_the_main_agents_denied_call_is_logged_with_the_users_reason(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    asking_worker: Settings,
) -> None:
    def main_agent(request: RecordedRequest) -> Reply:
        results = tool_results(request)
        if not results:
            return Reply(text="Let me search.", calls=[Call("mcp__web__search", {"query": "q"})])
        return Reply(calls=[Call("final_reply", {"text": results[-1]["content"][:80]})])

    scripted.script("gpt-tools", main_agent, main_agent)
    handle = await start(asking_worker, client, "Search the notes.")
    pending = await pending_approval(handle)
    await answer(handle, approval_id=pending["approval_id"], decision="deny", reason="not now")
    assert (await asyncio.wait_for(handle.result(), 60)).status == "replied"

    requested, _ = approval_events(store, handle.id)
    assert requested.data["where"] == "main" and requested.data["why"] == "Let me search."
    assert requested.data["can_approve_always"] is False  # the tool asks every time
    assert answered(store, handle.id) == [
        {
            "approval_id": pending["approval_id"],
            "decision": "deny",
            "reason": "not now",
            "arguments_sha256": None,
            "by": None,
            "approved_by": [],
            "call_sha256": pending["arguments_sha256"],
            "tool": "mcp__web__search",
        }
    ], "an answer that carried no digest is logged with none, not the waiting call's"
    await keep_history(client, handle.id, "approval_events_main_agent_denied")


async def test_a_call_nobody_answers_is_logged_as_timed_out(
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
    pending = await pending_approval(handle)
    assert (await asyncio.wait_for(handle.result(), 60)).status == "replied"

    assert [e.type for e in approval_events(store, handle.id)] == [
        "approval_requested",
        "approval_answered",
    ]
    assert answered(store, handle.id) == [
        {
            "approval_id": pending["approval_id"],
            "decision": "timed_out",
            "reason": None,
            "arguments_sha256": None,
        }
    ]


async def test_a_headless_task_logs_the_call_it_could_not_ask_about(
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
    assert (await asyncio.wait_for(handle.result(), 60)).status == "replied"

    thread = ids.child_workflow_id(handle.id, 0, 1)
    assert answered(store, handle.id) == [
        {
            "approval_id": ids.approval_id(thread, 0, 0),
            "decision": "headless",
            "reason": None,
            "arguments_sha256": None,
        }
    ]
    assert not [e for e in approval_events(store, handle.id) if e.type == "approval_requested"]


async def test_a_call_waiting_when_the_task_is_cancelled_is_logged_as_cancelled(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    servers: Servers,
    asking_worker: Settings,
) -> None:
    Conversation(branch_writes("never", "no")[:1], told_branch, branches=1).install(
        scripted, "gpt-tools"
    )
    handle = await start(asking_worker, client, "Write a note, then be cancelled.")
    pending = await pending_approval(handle)
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()

    await eventually(
        lambda: (
            answered(store, handle.id)
            == [
                {
                    "approval_id": pending["approval_id"],
                    "decision": "cancelled",
                    "reason": None,
                    "arguments_sha256": None,
                }
            ]
        ),
        "the waiting call logged as cancelled",
    )
