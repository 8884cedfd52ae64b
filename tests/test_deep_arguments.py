"""Bad model output is the model's problem, never the task's (issue 23, item 4), on SQLite and on
PostgreSQL: a call of ``advisor``, ``read_message``, each control tool (``final_reply``,
``delegate``, ``ask_user``) or an MCP tool with arguments 1,000 levels deep (2 KB: what failed
the advisor as ``internal`` in about a second, and ``read_message`` after 30 store retries) or
longer than the parser reads comes back to the model as an error result naming what was wrong,
and the task replies.

The scripted model (behind the real OpenAI client) makes the bad call, then replies once the
error is in front of it. The assertions read the tool result of the next request, the task's
result, the history (no failed activity attempt, nothing large) and the stored rows.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from errands.adapters.scripted import Call, RecordedRequest, Reply, ScriptedModelServer
from errands.agent.arguments import MAX_BYTES, MAX_DEPTH
from errands.contracts.workflows import TaskResult
from tests.helpers import final, start_task
from tests.store_stacks import Stack, database, stack

__all__ = ["database", "stack"]  # fixtures, imported for pytest

ROOT = Path(__file__).resolve().parent.parent
DEEP = "[" * 1_000 + "]" * 1_000
"""Arguments nested 1,000 levels deep: 2 KB."""
DEEP_OBJECT = '{"question": ' + '{"a": ' * 1_000 + "1" + "}" * 1_000 + "}"
"""An object whose one argument nests 1,000 levels deep."""
LONG = json.dumps({"question": "x" * (MAX_BYTES + 1_000), "text": "y"})
"""Arguments just over the size the parser reads."""
TOO_DEEP = f"more than {MAX_DEPTH} levels deep"
TOO_LONG = f"at most {MAX_BYTES:,} bytes"
REPLY_WITHIN = 60
"""Seconds a task has to reply: generous; the point is that it replies, not how fast."""
NAMES = ["advisor", "read_message", "final_reply", "delegate", "ask_user", "mcp__hostile__dump"]


@pytest.fixture(scope="module")
def mcp_servers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    calls = tmp_path_factory.mktemp("deep")
    command = [sys.executable, "-m", "tests.mcp_hostile_server", "--dir", str(calls)]
    return {"hostile": {"command": command, "cwd": str(ROOT)}}


def tool_results(request: RecordedRequest) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "tool"]


async def failed_attempts(client: Client, workflow_id: str) -> list[str]:
    """The failures of activity attempts and workflow tasks in the task's history."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    failed = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            failed.append(event.workflow_task_failed_event_attributes.failure.message)
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            failed.append(event.activity_task_failed_event_attributes.failure.message)
    return failed


async def told(
    client: Client, scripted: ScriptedModelServer, stack: Stack, name: str, arguments: str
) -> tuple[str, TaskResult, int]:
    """Run a task whose model calls ``name`` with ``arguments`` and then replies: the tool
    result the model read next, the task's result and its history's largest event."""
    model = f"deep-{name.replace('_', '-')}-{len(arguments)}-{stack.backend}"
    scripted.script(model, Reply(calls=[Call(name, arguments)]), final("Done anyway."))
    handle = await start_task(
        client,
        stack.settings.task_queue,
        "Do the thing.",
        model=f"openai:{model}",
        advisor_model=f"openai:{model}-advisor",
    )
    result = await asyncio.wait_for(handle.result(), REPLY_WITHIN)
    assert not scripted.requests_for(f"{model}-advisor"), "no advice on refused arguments"
    assert await failed_attempts(client, handle.id) == [], "nothing failed or was retried"
    history = await handle.fetch_history()
    largest = max(event.ByteSize() for event in history.events)
    (text,) = tool_results(scripted.requests_for(model)[1])
    return text, result, largest


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    ("arguments", "problem"),
    [(DEEP, TOO_DEEP), (DEEP_OBJECT, TOO_DEEP), (LONG, TOO_LONG)],
    ids=["deep-array", "deep-object", "long"],
)
async def test_a_call_with_arguments_too_deep_or_too_long_is_the_models_error_and_the_task_replies(
    client: Client,
    scripted: ScriptedModelServer,
    stack: Stack,
    name: str,
    arguments: str,
    problem: str,
) -> None:
    text, result, largest = await told(client, scripted, stack, name, arguments)

    assert result.status == "replied", result.error
    assert result.reply == "Done anyway."
    assert problem in text, text
    assert f"{name}: the arguments" in text, text
    assert largest < 64 * 1024, "the arguments went through the task's history"
    rows = stack.store.list_session(result.session_id)
    assert all(len(row.text) < 64 * 1024 for row in rows), "the arguments were stored"


@pytest.mark.parametrize(("name", "field"), [("ask_user", "questions"), ("delegate", "subtasks")])
async def test_a_nested_argument_sent_as_a_string_1000_deep_is_not_parsed_and_the_task_replies(
    client: Client, scripted: ScriptedModelServer, stack: Stack, name: str, field: str
) -> None:
    # Models send `questions` and `subtasks` as JSON strings at times; such a string is read
    # under the same guards, so a deep one stays a string, which the call's check refuses.
    arguments = json.dumps({field: DEEP, "reply": "On it."})
    text, result, largest = await told(client, scripted, stack, name, arguments)

    assert result.status == "replied", result.error
    assert result.reply == "Done anyway."
    assert text.startswith(f"{name}:") or f"`{field}`" in text, text
    assert largest < 64 * 1024
