"""Hostile stdio MCP servers inside real tasks (issue 26, acceptance 5): a server that crashes
mid-call, one that floods its stdout with text that is not the protocol, and one that never
answers ``initialize``. Each call comes back to the model as an error result within the tool
timeout, the worker's pool recovers (the next call works), and the task replies. Real dev server,
scripted model through the real OpenAI client, tests/mcp_tiny_server.py as stdio processes."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import Call, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.contracts.workflows import RoundSettings
from errands.settings import Settings
from errands.workers import build_worker
from tests.conftest import ROOT
from tests.helpers import Conversation, delegate, final, general, start_task

SCRIPTED = "gpt-hostile"
MODEL = f"openai:{SCRIPTED}"
TIMEOUT = 5.0
"""The servers' ``timeout_seconds``: each hostile call must be over within it (and a margin for
a loaded machine: the worker's own bookkeeping around the call)."""
MARGIN = 5.0
CALLS = [
    ("tiny", "crash"),
    ("tiny", "count"),
    ("tiny", "flood"),
    ("tiny", "count"),
    ("mute", "crash"),
    ("mute", "count"),
]
"""The branch's calls, one step each: crash mid-call, then a call that must work; a flood, then
a call that must work; on the server whose later processes never initialize, a crash (so the
next call needs a new process), then a call that meets one that never answers."""


def results(request: RecordedRequest) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "tool"]


def hostile_branch(request: RecordedRequest) -> Reply:
    got = results(request)
    if len(got) < len(CALLS):
        server, tool = CALLS[len(got)]
        return Reply(calls=[Call(f"mcp__{server}__{tool}", {})])
    return Reply(text=json.dumps(got))


@pytest.fixture
async def hostile_worker(
    client: Client, settings: Settings, store: SessionStore, tmp_path: Path
) -> AsyncIterator[Settings]:
    tiny = [sys.executable, str(ROOT / "tests" / "mcp_tiny_server.py")]
    own = settings.model_copy(
        update={
            "task_queue": f"hostile-{uuid.uuid4().hex[:6]}",
            "mcp_servers": json.dumps(
                {
                    "tiny": {"command": tiny, "timeout_seconds": TIMEOUT, "for": ["*"]},
                    "mute": {
                        "command": [*tiny, "--mute-after", str(tmp_path / "muted")],
                        "timeout_seconds": TIMEOUT,
                        "for": ["*"],
                    },
                }
            ),
        }
    )
    router = ModelRouter(own)
    async with build_worker(client, own, store=store, router=router):
        yield own
    await router.aclose()


def durations(store: SessionStore, task_id: str) -> list[float]:
    """Seconds from each tool call's ``tool_requested`` to its ``tool_finished``, in call order."""
    events = store.list_events(task_id)
    started: dict[str, datetime] = {}
    took: list[float] = []
    for event in events:
        at = datetime.fromisoformat(event.at)
        if event.type == "tool_requested":
            started[event.cause or ""] = at
        elif event.type == "tool_finished":
            took.append((at - started[event.cause or ""]).total_seconds())
    return took


async def test_a_crash_a_flood_and_a_server_that_never_initializes_are_errors_and_the_task_replies(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    hostile_worker: Settings,
) -> None:
    Conversation(
        [delegate(general("misbehave")), final("done")], hostile_branch, branches=len(CALLS) + 1
    ).install(scripted, SCRIPTED)
    handle = await start_task(
        client,
        hostile_worker.task_queue,
        "Call the hostile tools.",
        model=MODEL,
        settings=RoundSettings(tool_timeout_seconds=30),
    )
    result = await asyncio.wait_for(handle.result(), 180)

    assert result.status == "replied", result.error
    [row] = [r for r in store.list_session(result.session_id) if r.kind == "branch"]
    crash, after_crash, flood, after_flood, mute_crash, mute = json.loads(row.text)
    for text in (crash, mute_crash):
        assert "exited" in text or "closed" in text, text
    assert json.loads(after_crash)["count"] == 1, "the pool did not recover after the crash"
    assert f"{TIMEOUT:g} s" in flood, flood
    assert json.loads(after_flood)["count"] == 1, "the pool did not recover after the flood"
    assert f"{TIMEOUT:g} s" in mute and "stopped" in mute, mute
    # Each call was over within the server's timeout (a crash at once), and none was retried.
    took = durations(store, handle.id)
    assert len(took) == len(CALLS)
    assert all(seconds < TIMEOUT + MARGIN for seconds in took), took
    assert took[0] < MARGIN, took
    finished = [e for e in store.list_events(handle.id) if e.type == "tool_finished"]
    errors: list[Any] = [e.data["is_error"] for e in finished]
    assert errors == [True, False, True, False, True, True]
