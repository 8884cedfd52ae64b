"""Prompt caching: Anthropic breakpoints on the tools + system prefix and on the last stable
message, the same on every render and on a side question replaying the round, and the cache
reads and writes the server reports reaching the task's ledger on both wires."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from errands.adapters.providers import AnthropicMessagesProvider, anthropic_client
from errands.adapters.scripted import Call, Reply, ScriptedModelServer
from errands.agent.model_catalog import model_catalog
from errands.agent.side_questions import preferred_request
from errands.contracts.messages import Message, ModelRequest, ToolCall, ToolSpec, Usage
from tests.conftest import StartTask
from tests.helpers import Conversation

BREAKPOINT = {"type": "ephemeral"}
FINAL = ToolSpec(
    name="final_reply",
    description="Answer the user.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}},
)
DELEGATE = ToolSpec(name="delegate", description="Split the work.", parameters={"type": "object"})
RENDERED = [
    Message(role="user", text="[ref 1] compare the options"),
    Message(role="assistant", text="on it", tool_calls=[ToolCall(id="call_0", name="delegate")]),
    Message(role="tool", tool_call_id="call_0", tool_name="delegate", text="[branch results]"),
]
REPAIR = [
    Message(role="assistant", tool_calls=[ToolCall(id="call_1", name="final_reply")]),
    Message(
        role="tool", tool_call_id="call_1", tool_name="final_reply", text="blank", is_error=True
    ),
]
ROUND = ModelRequest(
    system="You are errands. " * 50,
    messages=RENDERED + REPAIR,
    tools=[FINAL, DELEGATE],
    tool_choice="required",
    cache_upto=len(RENDERED),
)


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(prompt_cache=True) as scripted:
        yield scripted


async def send(server: ScriptedModelServer, *requests: ModelRequest, catalog: Any = None) -> None:
    server.script("claude-test", *[Reply("ok") for _ in requests])
    async with anthropic_client(api_key="sk-ant-test", base_url=server.anthropic_base_url) as c:
        provider = AnthropicMessagesProvider(c, catalog)
        for request in requests:
            await provider.complete("claude-test", request, timeout=10)


def marked_blocks(body: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Where the breakpoints are: ("system"|"tools", index, 0) or ("messages", turn, block)."""
    found = [
        ("system", i, 0) for i, b in enumerate(body.get("system") or []) if "cache_control" in b
    ]
    found += [("tools", i, 0) for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    for t, turn in enumerate(body["messages"]):
        found += [
            ("messages", t, b) for b, blk in enumerate(turn["content"]) if "cache_control" in blk
        ]
    return found


async def test_breakpoints_go_on_the_system_block_and_the_last_stable_message(
    server: ScriptedModelServer,
) -> None:
    await send(server, ROUND)

    body = server.requests[0].body
    # Turns: user, assistant (delegate), user (its result), assistant (repair), user (error).
    assert marked_blocks(body) == [("system", 0, 0), ("messages", 2, 0)]
    assert body["system"][0]["cache_control"] == BREAKPOINT
    assert body["messages"][2]["content"][0]["type"] == "tool_result"


async def test_with_no_system_prompt_the_last_tool_carries_the_prefix_breakpoint(
    server: ScriptedModelServer,
) -> None:
    await send(server, ROUND.model_copy(update={"system": "", "cache_upto": None}))

    assert marked_blocks(server.requests[0].body) == [("tools", 1, 0)]


async def test_the_same_request_renders_byte_identical_bodies_breakpoints_included(
    server: ScriptedModelServer,
) -> None:
    await send(server, ROUND, ModelRequest.model_validate_json(ROUND.model_dump_json()))

    first, second = server.requests
    assert first.raw == second.raw
    assert b"cache_control" in first.raw


async def test_a_side_question_carries_the_rounds_breakpoints_on_the_same_prefix(
    server: ScriptedModelServer,
) -> None:
    side = preferred_request(ROUND, "what have you found so far?")

    await send(server, ROUND, side)

    round_body, side_body = (r.body for r in server.requests)
    assert marked_blocks(side_body) == marked_blocks(round_body)
    assert side_body["system"] == round_body["system"]
    assert side_body["tools"] == round_body["tools"]
    assert side_body["messages"][:4] == round_body["messages"][:4]
    round_usage, side_usage = (r.reported_usage or Usage() for r in server.requests)
    # The side question reads exactly what the round wrote, and writes nothing new.
    assert round_usage.cache_write_tokens > 0
    assert (side_usage.cached_tokens, side_usage.cache_write_tokens) == (
        round_usage.cache_write_tokens,
        0,
    )


async def test_a_side_question_trimmed_short_of_the_stable_prefix_marks_where_it_ends(
    server: ScriptedModelServer,
) -> None:
    waiting = ROUND.model_copy(
        update={
            "messages": [*RENDERED, Message(role="user", text="and the costs?")],
            "cache_upto": 4,
        }
    )

    side = preferred_request(waiting, "what have you found so far?")

    assert side.cache_upto == len(RENDERED)
    await send(server, side)
    assert marked_blocks(server.requests[0].body) == [("system", 0, 0), ("messages", 2, 0)]


async def test_a_system_message_after_the_stable_prefix_leaves_the_system_prompt_alone(
    server: ScriptedModelServer,
) -> None:
    nudged = ROUND.model_copy(
        update={"messages": [*ROUND.messages, Message(role="system", text="End the round now.")]}
    )

    await send(server, ROUND, nudged)

    first, second = (r.body for r in server.requests)
    assert second["system"] == first["system"]
    assert second["messages"][-1]["content"][-1] == {"type": "text", "text": "End the round now."}
    assert (server.requests[1].reported_usage or Usage()).cached_tokens > 0


async def test_a_model_without_prompt_caching_gets_no_breakpoints(
    server: ScriptedModelServer,
) -> None:
    catalog = model_catalog('{"anthropic:claude-test": {"prompt_cache": false}}')

    await send(server, ROUND, catalog=catalog)

    body = server.requests[0].body
    assert marked_blocks(body) == [] and body["system"] == ROUND.system


# -- through a real task: what the server reported is what the ledger holds -------------------


@pytest.mark.parametrize("spec", ["anthropic:claude-cache", "openai:gpt-cache"])
async def test_a_three_round_task_reports_the_cache_reads_the_server_returned(
    spec: str, scripted: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch, start: StartTask
) -> None:
    monkeypatch.setattr(scripted, "prompt_cache", True)
    api, model = spec.split(":")
    subtasks = [{"type": "general", "prompt": f"part {k}", "references": [1]} for k in (1, 2)]
    delegate = Reply(calls=[Call("delegate", {"reply": "on it", "subtasks": subtasks})])
    Conversation(
        [delegate, delegate, Reply(calls=[Call("final_reply", {"text": "done"})])],
        lambda r: Reply(text="branch text"),
        branches=4,
    ).install(scripted, model)

    handle = await start("compare them", model=spec)
    result = await handle.result()

    assert result.status == "replied"
    requests = scripted.requests_for(model)
    if api == "anthropic":
        assert all(marked_blocks(r.body) for r in requests)
    reported = [r.reported_usage or Usage() for r in requests]
    total = result.usage.total()
    assert (total.input_tokens, total.cached_tokens, total.cache_write_tokens) == (
        sum(u.input_tokens for u in reported),
        sum(u.cached_tokens for u in reported),
        sum(u.cache_write_tokens for u in reported),
    )
    assert total.cached_tokens > 0
