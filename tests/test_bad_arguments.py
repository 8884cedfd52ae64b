"""Bad tool arguments are the model's problem, never the task's (issue 22; issue 23, item 4):
a call of ``read_message``, ``advisor``, an MCP tool or a control tool with arguments nested
100,000 deep, or 5 MB long, comes back to the model as an error result, and the task replies.

Each task runs on the dev server with the scripted model behind the real OpenAI client: the model
makes the bad call, then, with the error in front of it, replies. The assertions read the next
request's tool result (what the model was told), the task's result, and its history (the
arguments never travel through it).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

import errands
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import Call, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.agent.arguments import MAX_BYTES, MAX_DEPTH
from errands.contracts import ids
from errands.contracts.workflows import RoundSettings, TaskResult
from errands.plugin import ErrandsPlugin
from errands.settings import Settings
from tests.conftest import StartTask
from tests.helpers import Conversation, delegate, final, keep_history, start_task

DEEP = "[" * 100_000 + "]" * 100_000
"""Arguments nested 100,000 deep (200 KB)."""
LONG = json.dumps({"name": "big", "text": "x" * 5_000_000})
"""Arguments 5 MB long."""
TOO_DEEP = f"more than {MAX_DEPTH} levels deep"
TOO_LONG = f"{len(LONG):,} bytes long; at most {MAX_BYTES:,} bytes"
REPLY_WITHIN = 60
"""Seconds a task has to reply: generous; the point is that it replies, not how fast."""


def bad_call(name: str, arguments: str) -> Reply:
    # Streamed in pieces of 1,000 characters (5,000 of them for 5 MB): small enough that
    # handling each piece must stay cheap, large enough to keep the test quick.
    return Reply(calls=[Call(name, arguments)], chunk_chars=1_000)


def tool_results(request: RecordedRequest) -> list[dict[str, Any]]:
    return [m for m in request.body["messages"] if m["role"] == "tool"]


async def run(
    client: Client, task_queue: str, model: str, **settings: Any
) -> tuple[WorkflowHandle[Any, TaskResult], TaskResult]:
    handle = await start_task(
        client,
        task_queue,
        "Do the thing.",
        model=f"openai:{model}",
        settings=RoundSettings(**settings),
        advisor_model=f"openai:{model}-advisor",
    )
    return handle, await asyncio.wait_for(handle.result(), REPLY_WITHIN)


async def largest_payload(handle: WorkflowHandle[Any, Any]) -> int:
    """The bytes of the largest event in the task's history."""
    history = await handle.fetch_history()
    return max(event.ByteSize() for event in history.events)


async def told(
    client: Client, task_queue: str, scripted: ScriptedModelServer, model: str, name: str, args: str
) -> tuple[str, TaskResult, int]:
    """Run a task whose model calls ``name`` with ``args`` and then replies: the tool result the
    model read next, the task's result and its history's largest event."""
    scripted.script(model, bad_call(name, args), final("Done anyway."))
    handle, result = await run(client, task_queue, model)
    second = scripted.requests_for(model)[1]
    results = tool_results(second)
    assert len(results) == 1, results
    return results[0]["content"], result, await largest_payload(handle)


@pytest.mark.parametrize(
    ("name", "arguments", "problem"),
    [
        ("read_message", DEEP, TOO_DEEP),
        ("read_message", LONG, TOO_LONG),
        ("advisor", DEEP, TOO_DEEP),
        ("advisor", LONG, TOO_LONG),
        ("final_reply", DEEP, TOO_DEEP),
        ("final_reply", LONG, TOO_LONG),
        ("delegate", DEEP, TOO_DEEP),
        ("delegate", LONG, TOO_LONG),
        ("ask_user", DEEP, TOO_DEEP),
        ("ask_user", LONG, TOO_LONG),
    ],
)
async def test_a_built_in_call_with_bad_arguments_is_the_models_error_and_the_task_replies(
    client: Client,
    scripted: ScriptedModelServer,
    worker: Worker,
    settings: Settings,
    name: str,
    arguments: str,
    problem: str,
) -> None:
    model = f"gpt-bad-{name.replace('_', '-')}"
    text, result, largest = await told(
        client, settings.task_queue, scripted, model, name, arguments
    )

    assert problem in text, text
    assert name in text
    assert result.status == "replied", result.error
    assert result.reply == "Done anyway."
    assert largest < 64 * 1024, "the arguments went through the task's history"
    assert not scripted.requests_for(f"{model}-advisor"), "no advice on refused arguments"
    if arguments is DEEP:
        await keep_history(client, result.task_id, f"bad_arguments_{name}")


@pytest.mark.parametrize(("arguments", "problem"), [(DEEP, TOO_DEEP), (LONG, TOO_LONG)])
async def test_an_mcp_call_with_bad_arguments_is_the_models_error_and_the_task_replies(
    client: Client,
    scripted: ScriptedModelServer,
    tools_worker: Settings,
    arguments: str,
    problem: str,
) -> None:
    model = "gpt-bad-mcp"
    text, result, largest = await told(
        client, tools_worker.task_queue, scripted, model, "mcp__files__write", arguments
    )

    assert problem in text, text
    assert "mcp__files__write: the arguments" in text
    assert result.status == "replied", result.error
    assert largest < 64 * 1024, "the arguments went through the task's history"


@pytest.mark.parametrize(("arguments", "problem"), [(DEEP, TOO_DEEP), (LONG, TOO_LONG)])
async def test_a_branchs_mcp_call_with_bad_arguments_is_its_error_and_the_task_replies(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    tools_worker: Settings,
    arguments: str,
    problem: str,
) -> None:
    branch_requests: list[RecordedRequest] = []

    def branch(request: RecordedRequest) -> Reply:
        branch_requests.append(request)
        results = tool_results(request)
        if results:
            return Reply(text=f"told: {results[-1]['content']}")
        return bad_call("mcp__files__write", arguments)

    convo = Conversation(
        [delegate("Write the note."), final("Done anyway.")], branch, branches=2
    ).install(scripted, "gpt-bad-branch")
    handle = await start_task(
        client, tools_worker.task_queue, "Write it.", model="openai:gpt-bad-branch"
    )
    result = await asyncio.wait_for(handle.result(), REPLY_WITHIN)

    told_text = tool_results(branch_requests[1])[0]["content"]
    assert problem in told_text, told_text
    assert result.status == "replied", result.error
    assert problem in json.dumps(convo.main_requests[1].body["messages"])  # the branch said so
    thread = ids.child_workflow_id(handle.id, 0, 1)
    step = store.get(ids.thread_step_id(thread, 0))
    assert step is not None and len(step.model_dump_json()) < 4096, "stored as the marker"
    assert await largest_payload(client.get_workflow_handle(thread)) < 64 * 1024
    if arguments is DEEP:
        await keep_history(client, thread, "bad_arguments_in_a_branch")


async def test_a_call_whose_arguments_cannot_be_read_is_not_put_to_the_user_for_approval(
    client: Client, scripted: ScriptedModelServer, asking_worker: Settings
) -> None:
    # The web server's `search` asks before every call; a call that cannot run asks no one.
    model = "gpt-bad-approval"
    scripted.script(model, bad_call("mcp__web__search", DEEP), final("Done anyway."))
    handle = await start_task(client, asking_worker.task_queue, "Search.", model=f"openai:{model}")
    result = await asyncio.wait_for(handle.result(), REPLY_WITHIN)

    assert result.status == "replied", result.error
    told_text = tool_results(scripted.requests_for(model)[1])[0]["content"]
    assert TOO_DEEP in told_text


@errands.tool
def exchange_rate(currency: str) -> float:
    """Today's rate of one euro in ``currency``."""
    return 1.08


@pytest.mark.parametrize(("arguments", "problem"), [(DEEP, TOO_DEEP), (LONG, TOO_LONG)])
async def test_a_python_tool_call_with_bad_arguments_is_the_models_error_and_the_task_replies(
    client: Client,
    scripted: ScriptedModelServer,
    settings: Settings,
    store: SessionStore,
    arguments: str,
    problem: str,
) -> None:
    own = settings.model_copy(update={"task_queue": f"bad-python-{uuid.uuid4().hex[:6]}"})
    router = ModelRouter(own)
    plugin = ErrandsPlugin(own, tools=[exchange_rate], store=store, router=router)
    try:
        async with Worker(client, task_queue=own.task_queue, plugins=[plugin]):
            text, result, largest = await told(
                client, own.task_queue, scripted, "gpt-bad-python", "exchange_rate", arguments
            )
    finally:
        await router.aclose()

    assert problem in text, text
    assert "exchange_rate: the arguments" in text
    assert result.status == "replied", result.error
    assert largest < 64 * 1024, "the arguments went through the task's history"


def anthropic_results(request: RecordedRequest) -> list[str]:
    return [
        block["content"]
        for message in request.body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (DEEP, "could not be read as JSON (recursion limit exceeded"),
        (LONG, TOO_LONG),
        ('{"text": "a",, "b": 1}', "could not be read as JSON ("),
    ],
    ids=["deep", "long", "malformed"],
)
async def test_on_anthropic_a_call_the_sdk_cannot_read_is_the_models_error_and_the_task_replies(
    scripted: ScriptedModelServer, arguments: str, problem: str, start: StartTask
) -> None:
    # The SDK parses a tool call's input as it streams in, and gives up on what it cannot
    # read (with the whole input in its message): that is the model's mistake too.
    model = "claude-bad-arguments"
    scripted.script(model, bad_call("final_reply", arguments), final("Done anyway."))
    handle = await start("Do the thing.", model=f"anthropic:{model}")
    result = await asyncio.wait_for(handle.result(), REPLY_WITHIN)

    assert result.status == "replied", result.error
    told_text = anthropic_results(scripted.requests_for(model)[1])[0]
    assert problem in told_text, told_text
    assert told_text.startswith("final_reply: the arguments")
    assert await largest_payload(handle) < 64 * 1024
