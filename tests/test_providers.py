"""Providers through the real SDKs against the scripted server, and the one error classifier."""

from __future__ import annotations

import email.utils
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta

import anthropic
import httpx2
import openai
import pytest
from temporalio.exceptions import ApplicationError

from errands.adapters.providers import (
    AnthropicMessagesProvider,
    OpenAIChatProvider,
    Provider,
    anthropic_client,
    classify_provider_error,
    is_openai_api,
    openai_client,
)
from errands.adapters.scripted import Call, Fail, Reply, Reset, ScriptedModelServer
from errands.agent.arguments import refusal
from errands.agent.model_catalog import model_catalog
from errands.agent.side_questions import fallback_request, preferred_request
from errands.contracts.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolSpec,
    Usage,
)
from tests.helpers import tool_spec

Server = ScriptedModelServer
SECRET = "sk-test-Secret0123456789"
MODEL = {"openai": "gpt-test", "anthropic": "claude-test"}
both_apis = pytest.mark.parametrize("api", ["openai", "anthropic"])

SEARCH = tool_spec("search", "Search the notes.", q="string")
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


@pytest.mark.fast
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
async def test_streamed_tool_calls_keep_their_raw_arguments_even_cut_off(
    api: str, server: Server
) -> None:
    """Anthropic's SDK reads a streamed input as partial JSON, so ``{"text": "half`` would come
    out as ``{}``: the arguments are the text the stream sent, as on the OpenAI API."""
    server.script(
        MODEL[api], Reply(calls=[Call("search", {"q": "x"}), Call("final_reply", '{"text": "half')])
    )

    async with provider_for(api, server) as provider:
        response = await provider.complete(MODEL[api], HELLO, timeout=10, on_delta=lambda _: None)

    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("search", '{"q": "x"}'),
        ("final_reply", '{"text": "half'),
    ]


@both_apis
async def test_a_tool_call_nested_1000_deep_is_refused_to_the_model_even_without_a_delta_sink(
    api: str, server: Server
) -> None:
    """Anthropic sends a whole message's tool input parsed, and that parse cannot go 1,000
    levels deep: the provider asks once more, streamed, where the input arrives as text."""
    deep = '{"text": ' + "[" * 1000 + "]" * 1000 + "}"
    steps = [Reply(calls=[Call("final_reply", deep)])] * (2 if api == "anthropic" else 1)
    server.script(MODEL[api], *steps)

    response = await complete(api, server)  # no on_delta: nobody reads the answer as it comes

    [call] = response.tool_calls
    assert call.name == "final_reply"
    refused = refusal(call.arguments) or ""
    assert "nested more than" in refused or "could not be read as JSON" in refused
    streamed = [bool(r.body.get("stream")) for r in server.requests]
    assert streamed == ([False, True] if api == "anthropic" else [False])


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
        # The scripted server is not OpenAI's own API: the limit goes in max_tokens too.
        "max_tokens": 512,
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
        # One block, so it can carry the cache breakpoint of the tools + system prefix.
        "system": [
            {
                "type": "text",
                "text": "You are errands.\n\nBudget: 2 steps left.",
                "cache_control": {"type": "ephemeral"},
            }
        ],
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
    # Anthropic's words for a body over its byte limit (a prompt over the window is `context`).
    error = await failure(
        "anthropic", server, Fail(413, "Request exceeds the maximum allowed number of bytes.")
    )

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


@pytest.mark.fast
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


@pytest.mark.fast
def test_classified_errors_carry_provider_and_status_as_details() -> None:
    error = classify_provider_error(TimeoutError(), "anthropic")

    assert error.details == ({"provider": "anthropic", "status": None},)
    assert json.dumps(error.details)


# -- what the model catalog changes on the wire ------------------------------------------------


class ToLoopback(httpx2.AsyncBaseTransport):
    """Carries requests addressed to api.openai.com to the scripted server instead."""

    def __init__(self, base_url: str) -> None:
        self._target = httpx2.URL(base_url)
        self._inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.url = request.url.copy_with(
            scheme=self._target.scheme, host=self._target.host, port=self._target.port
        )
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


async def test_a_reasoning_family_is_sent_no_temperature_and_no_max_tokens(
    server: Server,
) -> None:
    server.script("o4-mini", Reply("ok"))

    async with openai_client(api_key=SECRET, base_url=server.openai_base_url) as client:
        await OpenAIChatProvider(client).complete("o4-mini", ROUND, timeout=10)

    body = server.requests[0].body
    assert "temperature" not in body and "max_tokens" not in body
    assert body["max_completion_tokens"] == 512


async def test_a_side_question_to_a_reasoning_model_drops_its_temperature(
    server: Server,
) -> None:
    side = preferred_request(ROUND, "what did you find?")
    assert side.temperature is not None
    server.script("gpt-5-mini", Reply("three notes"), Reply("three notes"))

    async with openai_client(api_key=SECRET, base_url=server.openai_base_url) as client:
        provider = OpenAIChatProvider(client)
        await provider.complete("gpt-5-mini", side, timeout=10)
        await provider.complete("gpt-5-mini", fallback_request(ROUND.messages, "q"), timeout=10)

    assert ["temperature" in r.body for r in server.requests] == [False, False]


async def test_a_compatible_server_gets_max_tokens_beside_max_completion_tokens(
    server: Server,
) -> None:
    server.script("smollm2", Reply("ok"))

    async with openai_client(api_key=SECRET, base_url=server.openai_base_url) as client:
        await OpenAIChatProvider(client).complete("smollm2", HELLO, timeout=10)

    body = server.requests[0].body
    assert (body["max_tokens"], body["max_completion_tokens"]) == (4096, 4096)


async def test_openais_own_api_gets_max_completion_tokens_only(server: Server) -> None:
    server.script("gpt-4.1-mini", Reply("ok"))
    http = httpx2.AsyncClient(transport=ToLoopback(server.openai_base_url))

    async with openai.AsyncOpenAI(
        api_key=SECRET, base_url="https://api.openai.com/v1", http_client=http, max_retries=0
    ) as client:
        await OpenAIChatProvider(client).complete("gpt-4.1-mini", ROUND, timeout=10)

    body = server.requests[0].body
    assert "max_tokens" not in body
    assert (body["max_completion_tokens"], body["temperature"]) == (512, 0.2)
    assert is_openai_api("https://api.openai.com/v1")
    assert not is_openai_api(server.openai_base_url)


@both_apis
async def test_the_output_limit_is_capped_at_the_models_longest_output(
    api: str, server: Server
) -> None:
    server.script(MODEL[api], Reply("ok"))

    await complete(api, server, HELLO.model_copy(update={"max_output_tokens": 50_000}))

    body = server.requests[0].body
    assert body.get("max_completion_tokens", body.get("max_tokens")) == 4096


async def test_errands_models_reaches_the_mapping_through_the_providers_catalog(
    server: Server,
) -> None:
    catalog = model_catalog(
        '{"openai:gpt-test": {"temperature": false, "output_limit": "max_tokens", '
        '"max_output": 300}}'
    )
    server.script("gpt-test", Reply("ok"))

    async with openai_client(api_key=SECRET, base_url=server.openai_base_url) as client:
        await OpenAIChatProvider(client, catalog).complete("gpt-test", ROUND, timeout=10)

    body = server.requests[0].body
    assert "temperature" not in body and "max_completion_tokens" not in body
    assert body["max_tokens"] == 300


@both_apis
async def test_reasoning_tokens_and_cache_writes_read_back_the_same_on_both_apis(
    api: str, server: Server
) -> None:
    usage = Usage(
        input_tokens=1200,
        output_tokens=300,
        cached_tokens=600,
        cache_write_tokens=400,
        reasoning_tokens=200,
    )
    server.script(MODEL[api], Reply("ok", usage=usage))

    response = await complete(api, server)

    assert response.usage == usage


@both_apis
async def test_a_tool_call_cut_off_by_the_output_limit_reports_that_finish_reason(
    api: str, server: Server
) -> None:
    cut = {"openai": "length", "anthropic": "max_tokens"}[api]
    server.script(
        MODEL[api], Reply(calls=[Call("final_reply", '{"text": "a long')], finish_reason=cut)
    )

    response = await complete(api, server)

    assert response.finish_reason == cut
    assert [c.arguments for c in response.tool_calls] == ['{"text": "a long']


# -- servers that refuse tool_choice "required" ------------------------------------------------


@pytest.mark.parametrize("status", [400, 422, 500])
async def test_a_refused_required_tool_choice_is_retried_with_auto_in_the_same_call(
    status: int, server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    server.refuse_required_tool_choice("gpt-local", status)
    server.script("gpt-local", Reply("first"), Reply("second"))

    async with openai_client(api_key=SECRET, base_url=server.openai_base_url) as client:
        provider = OpenAIChatProvider(client)
        with caplog.at_level(logging.WARNING, logger="errands.providers"):
            first = await provider.complete("gpt-local", ROUND, timeout=10)
            second = await provider.complete("gpt-local", ROUND, timeout=10)

    assert (first.text, second.text) == ("first", "second")
    assert [r.body["tool_choice"] for r in server.requests] == ["required", "auto", "auto"]
    assert isinstance(server.requests[0].answered, Fail)
    warnings = [r for r in caplog.records if r.name == "errands.providers"]
    assert len(warnings) == 1 and "gpt-local" in warnings[0].getMessage()
    assert SECRET not in warnings[0].getMessage()


async def test_auto_is_remembered_per_model_not_for_every_model_of_the_server(
    server: Server,
) -> None:
    server.refuse_required_tool_choice("gpt-local")
    server.script("gpt-local", Reply("a"))
    server.script("gpt-test", Reply("b"))

    async with openai_client(api_key=SECRET, base_url=server.openai_base_url) as client:
        provider = OpenAIChatProvider(client)
        await provider.complete("gpt-local", ROUND, timeout=10)
        await provider.complete("gpt-test", ROUND, timeout=10)

    assert server.requests_for("gpt-test")[0].body["tool_choice"] == "required"


async def test_another_400_of_a_required_call_is_not_taken_for_a_tool_choice_refusal(
    server: Server,
) -> None:
    server.script("gpt-test", Fail(400, "messages[3] is missing a tool result"))

    async with openai_client(api_key=SECRET, base_url=server.openai_base_url) as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await OpenAIChatProvider(client).complete("gpt-test", ROUND, timeout=10)

    assert classify_provider_error(raised.value, "openai").type == "invalid_request"
    assert len(server.requests) == 1


# -- a 5xx that names the request ------------------------------------------------------------


@pytest.mark.parametrize(
    "said",
    [
        "JSON schema conversion failed: Pattern must start with '^' and end with '$'",
        "Invalid 'tools[0].function.parameters': unknown keyword",
        "Unsupported param: tool_choice",
        "[json.exception.parse_error.101] parse error at line 1",
    ],
)
async def test_a_5xx_that_names_the_request_is_a_non_retryable_invalid_request(
    said: str, server: Server
) -> None:
    error = await failure("openai", server, Fail(500, said))

    assert (error.type, error.non_retryable) == ("invalid_request", True)
    assert said in error.message and "500" in error.message
    assert "try again" not in error.message


@pytest.mark.parametrize(("status", "said"), [(500, "flaky"), (503, "invalid upstream response")])
async def test_a_5xx_that_does_not_name_the_request_stays_transient(
    status: int, said: str, server: Server
) -> None:
    error = await failure("anthropic", server, Fail(status, said))

    assert (error.type, error.non_retryable) == ("transient", False)
