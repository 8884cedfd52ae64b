"""Providers through the real SDKs against the scripted server, and the one error classifier."""

from __future__ import annotations

import email.utils
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta

import anthropic
import openai
import pytest
from temporalio.exceptions import ApplicationError

from errands.contracts import Message, ModelRequest, ModelResponse, ToolCall, ToolSpec, Usage
from errands.providers import (
    AnthropicMessagesProvider,
    OpenAIChatProvider,
    Provider,
    anthropic_client,
    classify_provider_error,
    openai_client,
)
from errands.scripted import Call, Fail, Reply, Reset, ScriptedModelServer

Server = ScriptedModelServer
SECRET = "sk-test-Secret0123456789"
MODEL = {"openai": "gpt-test", "anthropic": "claude-test"}
both_apis = pytest.mark.parametrize("api", ["openai", "anthropic"])

SEARCH = ToolSpec(
    name="search",
    description="Search the notes.",
    parameters={
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
    },
)
FINAL = ToolSpec(
    name="final_reply",
    description="Answer the user.",
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string"}},
    },
)
ROUND = ModelRequest(
    system="You are errands.",
    messages=[
        Message(role="user", text="find the notes"),
        Message(
            role="assistant",
            text="looking",
            tool_calls=[
                ToolCall(id="call_a", name="search", arguments='{"q": "notes"}'),
                ToolCall(id="call_b", name="search", arguments='{"q": '),
            ],
        ),
        Message(role="tool", tool_call_id="call_a", tool_name="search", text="3 notes"),
        Message(
            role="tool", tool_call_id="call_b", tool_name="search", text="bad JSON", is_error=True
        ),
        Message(role="system", text="Budget: 2 steps left."),
        Message(role="user", text="and hurry"),
    ],
    tools=[SEARCH, FINAL],
    tool_choice="required",
    max_output_tokens=512,
    temperature=0.2,
)
HELLO = ModelRequest(system="", messages=[Message(role="user", text="hello")])


@pytest.fixture
def server() -> Iterator[Server]:
    with ScriptedModelServer() as scripted:
        yield scripted


@asynccontextmanager
async def provider_for(api: str, server: Server) -> AsyncIterator[Provider]:
    if api == "openai":
        async with openai_client(api_key=SECRET, base_url=server.openai_base_url) as client:
            yield OpenAIChatProvider(client)
    else:
        async with anthropic_client(api_key=SECRET, base_url=server.anthropic_base_url) as client:
            yield AnthropicMessagesProvider(client)


async def complete(
    api: str, server: Server, request: ModelRequest = HELLO, timeout: float = 10
) -> ModelResponse:
    async with provider_for(api, server) as provider:
        return await provider.complete(MODEL[api], request, timeout=timeout)


async def failure(api: str, server: Server, *steps, timeout: float = 10) -> ApplicationError:
    server.script(MODEL[api], *steps)
    try:
        await complete(api, server, timeout=timeout)
    except (openai.OpenAIError, anthropic.AnthropicError) as error:
        return classify_provider_error(error, api)
    raise AssertionError("the provider call was expected to fail")


def test_client_builders_turn_sdk_retries_off() -> None:
    assert openai_client(api_key=SECRET, base_url="http://127.0.0.1:9/v1").max_retries == 0
    assert anthropic_client(api_key=SECRET, base_url="http://127.0.0.1:9").max_retries == 0


@both_apis
async def test_a_text_reply_becomes_a_model_response(api: str, server: Server) -> None:
    server.script(MODEL[api], Reply("hello back", usage=Usage(input_tokens=9, output_tokens=3)))

    response = await complete(api, server)

    stop = {"openai": "stop", "anthropic": "end_turn"}[api]
    assert response == ModelResponse(
        text="hello back",
        finish_reason=stop,
        usage=Usage(input_tokens=9, output_tokens=3),
        model=MODEL[api],
    )


@both_apis
async def test_tool_calls_keep_their_ids_and_raw_arguments_even_malformed(
    api: str, server: Server
) -> None:
    server.script(
        MODEL[api], Reply(calls=[Call("search", {"q": "x"}), Call("final_reply", '{"text": ')])
    )

    response = await complete(api, server)

    prefix = {"openai": "call", "anthropic": "toolu"}[api]
    assert response.tool_calls == [
        ToolCall(id=f"{prefix}_0_0", name="search", arguments='{"q": "x"}'),
        ToolCall(id=f"{prefix}_0_1", name="final_reply", arguments='{"text": '),
    ]
    assert response.text == ""
    assert response.finish_reason == {"openai": "tool_calls", "anthropic": "tool_use"}[api]


@both_apis
async def test_usage_with_cached_tokens_reads_back_the_same_on_both_apis(
    api: str, server: Server
) -> None:
    usage = Usage(input_tokens=1200, output_tokens=40, cached_tokens=1000)
    server.script(MODEL[api], Reply("ok", usage=usage))

    response = await complete(api, server)

    assert response.usage == usage


async def test_openai_request_body_follows_the_mapping(server: Server) -> None:
    server.script("gpt-test", Reply("ok"))

    await complete("openai", server, ROUND)

    assert server.requests[0].body == {
        "messages": [
            {"role": "system", "content": "You are errands."},
            {"role": "user", "content": "find the notes"},
            {
                "role": "assistant",
                "content": "looking",
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"q": "notes"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"q": '},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": "3 notes"},
            {"role": "tool", "tool_call_id": "call_b", "content": "ERROR: bad JSON"},
            {"role": "system", "content": "Budget: 2 steps left."},
            {"role": "user", "content": "and hurry"},
        ],
        "model": "gpt-test",
        "max_completion_tokens": 512,
        "temperature": 0.2,
        "tool_choice": "required",
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "search",
                    "description": "Search the notes.",
                    "parameters": SEARCH.parameters,
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "final_reply",
                    "description": "Answer the user.",
                    "parameters": FINAL.parameters,
                },
            },
        ],
    }


async def test_anthropic_request_body_follows_the_mapping(server: Server) -> None:
    server.script("claude-test", Reply("ok"))

    await complete("anthropic", server, ROUND)

    assert server.requests[0].body == {
        "max_tokens": 512,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "find the notes"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "looking"},
                    {"type": "tool_use", "id": "call_a", "name": "search", "input": {"q": "notes"}},
                    # Malformed arguments cannot travel as an object: replayed as {}.
                    {"type": "tool_use", "id": "call_b", "name": "search", "input": {}},
                ],
            },
            # Both tool results and the next user text merge into one user turn.
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_a",
                        "content": "3 notes",
                        "is_error": False,
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_b",
                        "content": "bad JSON",
                        "is_error": True,
                    },
                    {"type": "text", "text": "and hurry"},
                ],
            },
        ],
        "model": "claude-test",
        "system": "You are errands.\n\nBudget: 2 steps left.",
        # No temperature: the Messages API of anthropic 2.x has no sampling parameters.
        "tool_choice": {"type": "any"},
        "tools": [
            {
                "name": "search",
                "description": "Search the notes.",
                "input_schema": SEARCH.parameters,
            },
            {
                "name": "final_reply",
                "description": "Answer the user.",
                "input_schema": FINAL.parameters,
            },
        ],
    }


@both_apis
async def test_a_request_without_tools_sends_no_tools_and_no_tool_choice(
    api: str, server: Server
) -> None:
    server.script(MODEL[api], Reply("ok"))

    await complete(api, server, HELLO.model_copy(update={"system": "Be brief."}))

    body = server.requests[0].body
    assert "tools" not in body and "tool_choice" not in body and "temperature" not in body


@pytest.mark.parametrize(
    ("choice", "wire"), [("auto", {"type": "auto"}), ("none", {"type": "none"})]
)
async def test_anthropic_tool_choice_maps_to_its_object_form(
    choice: str, wire: dict, server: Server
) -> None:
    server.script("claude-test", Reply("ok"))

    await complete("anthropic", server, ROUND.model_copy(update={"tool_choice": choice}))

    assert server.requests[0].body["tool_choice"] == wire


@both_apis
async def test_the_same_request_serializes_to_byte_identical_bodies(
    api: str, server: Server
) -> None:
    server.script(MODEL[api], Reply("one"), Reply("two"))

    await complete(api, server, ROUND)
    await complete(api, server, ModelRequest.model_validate_json(ROUND.model_dump_json()))

    first, second = server.requests
    assert first.raw == second.raw
    assert b'"search"' in first.raw


@both_apis
async def test_429_with_retry_after_is_transient_with_that_delay(api: str, server: Server) -> None:
    error = await failure(api, server, Fail(429, "rate limited", headers={"retry-after": "2"}))

    assert (error.type, error.non_retryable) == ("transient", False)
    assert error.next_retry_delay == timedelta(seconds=2)
    assert api in error.message and "429" in error.message


async def test_retry_after_ms_wins_over_retry_after(server: Server) -> None:
    error = await failure(
        "openai", server, Fail(429, headers={"retry-after-ms": "1500", "retry-after": "9"})
    )

    assert error.next_retry_delay == timedelta(milliseconds=1500)


async def test_retry_after_as_an_http_date_becomes_a_delay(server: Server) -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)

    error = await failure("anthropic", server, Fail(503, headers={"retry-after": when}))

    assert error.type == "transient"
    assert error.next_retry_delay is not None
    assert timedelta(seconds=25) < error.next_retry_delay <= timedelta(seconds=31)


@pytest.mark.parametrize(
    ("api", "status"),
    [("openai", 500), ("anthropic", 500), ("anthropic", 529), ("openai", 408), ("openai", 409)],
)
async def test_server_errors_and_overload_are_transient(
    api: str, status: int, server: Server
) -> None:
    error = await failure(api, server, Fail(status))

    assert (error.type, error.non_retryable, error.next_retry_delay) == ("transient", False, None)


@both_apis
async def test_401_is_a_non_retryable_credential_error_naming_the_variables(
    api: str, server: Server
) -> None:
    error = await failure(api, server, Fail(401, f"Incorrect API key provided: {SECRET}"))

    assert (error.type, error.non_retryable) == ("credential", True)
    key_var, url_var = {
        "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
        "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    }[api]
    assert key_var in error.message and url_var in error.message and api in error.message
    assert SECRET not in error.message and "Secret0123" not in error.message


@both_apis
async def test_403_is_a_non_retryable_permission_error(api: str, server: Server) -> None:
    error = await failure(api, server, Fail(403, "not allowed"))

    assert (error.type, error.non_retryable) == ("permission", True)


@both_apis
async def test_404_is_an_unknown_model_naming_the_model(api: str, server: Server) -> None:
    error = await failure(api, server, Fail(404, "no such model"))

    assert (error.type, error.non_retryable) == ("unknown_model", True)
    assert repr(MODEL[api]) in error.message and "ERRANDS_MODEL" in error.message


async def test_413_is_a_non_retryable_payload_too_large(server: Server) -> None:
    error = await failure("anthropic", server, Fail(413, "prompt is too long"))

    assert (error.type, error.non_retryable) == ("payload_too_large", True)


@pytest.mark.parametrize("status", [400, 422])
async def test_other_4xx_is_an_invalid_request_carrying_the_provider_message(
    status: int, server: Server
) -> None:
    error = await failure("openai", server, Fail(status, "messages[3] is missing a tool result"))

    assert (error.type, error.non_retryable) == ("invalid_request", True)
    assert "messages[3] is missing a tool result" in error.message


@both_apis
async def test_an_unexpected_call_to_the_scripted_server_is_not_retried(
    api: str, server: Server
) -> None:
    error = await failure(api, server)

    assert (error.type, error.non_retryable) == ("invalid_request", True)
    assert "no scripted step left" in error.message


@both_apis
async def test_a_connection_reset_is_transient(api: str, server: Server) -> None:
    error = await failure(api, server, Reset())

    assert (error.type, error.non_retryable) == ("transient", False)
    assert "could not reach" in error.message


@both_apis
async def test_a_reply_slower_than_the_timeout_is_a_transient_timeout(
    api: str, server: Server
) -> None:
    error = await failure(api, server, Reply("late", delay=5), timeout=1)

    assert (error.type, error.non_retryable) == ("transient", False)
    assert "did not answer within the call timeout" in error.message


async def test_an_anthropic_client_without_any_key_is_a_credential_error(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in [v for v in os.environ if v.startswith("ANTHROPIC_")]:
        monkeypatch.delenv(variable)
    async with anthropic_client(api_key=None, base_url=server.anthropic_base_url) as client:
        with pytest.raises(Exception) as raised:  # noqa: B017 - the SDK's own choice of class
            await AnthropicMessagesProvider(client).complete("claude-test", HELLO, timeout=10)

    error = classify_provider_error(raised.value, "anthropic")
    assert (error.type, error.non_retryable) == ("credential", True)
    assert "ANTHROPIC_API_KEY" in error.message
    assert server.requests == []


def test_anything_else_is_a_non_retryable_internal_error() -> None:
    error = classify_provider_error(KeyError("choices"), "openai")

    assert (error.type, error.non_retryable) == ("internal", True)
    assert "KeyError" in error.message and "openai" in error.message


async def test_a_tool_message_without_a_call_id_is_an_internal_error_not_a_request(
    server: Server,
) -> None:
    request = ModelRequest(system="", messages=[Message(role="tool", text="orphan")])

    with pytest.raises(ValueError) as raised:
        await complete("anthropic", server, request)

    assert classify_provider_error(raised.value, "anthropic").type == "internal"
    assert server.requests == []


def test_classified_errors_carry_provider_and_status_as_details() -> None:
    error = classify_provider_error(TimeoutError(), "anthropic")

    assert error.details == ({"provider": "anthropic", "status": None},)
    assert json.dumps(error.details)
