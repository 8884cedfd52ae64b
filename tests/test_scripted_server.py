"""The scripted model server, driven by the real openai and anthropic SDK clients over loopback."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState

from errands.adapters.scripted import (
    Call,
    Fail,
    Gate,
    RecordedRequest,
    Reply,
    Reset,
    ScriptedModelServer,
)
from errands.contracts.messages import Usage
from tests.helpers import eventually

Server = ScriptedModelServer
# Typed loosely: the two SDKs want different TypedDicts for the same literal.
USER: list[Any] = [{"role": "user", "content": "hello"}]


@pytest.fixture
def server() -> Iterator[Server]:
    with ScriptedModelServer() as scripted:
        yield scripted


def openai_sdk(server: Server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="sk-test", base_url=server.openai_base_url, max_retries=0)


def anthropic_sdk(server: Server) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key="sk-ant-test", base_url=server.anthropic_base_url, max_retries=0
    )


async def ask_openai(server: Server, model: str = "gpt-test", timeout: float = 10):
    async with openai_sdk(server) as client:
        return await client.chat.completions.create(model=model, messages=USER, timeout=timeout)


async def ask_anthropic(server: Server, model: str = "claude-test", timeout: float = 10):
    async with anthropic_sdk(server) as client:
        return await client.messages.create(
            model=model, max_tokens=100, messages=USER, timeout=timeout
        )


async def test_openai_text_reply_arrives_as_a_chat_completion(server: Server) -> None:
    server.script("gpt-test", Reply("hi there"))

    completion = await ask_openai(server)

    assert completion.object == "chat.completion"
    assert completion.model == "gpt-test"
    assert completion.choices[0].message.content == "hi there"
    assert completion.choices[0].message.tool_calls is None
    assert completion.choices[0].finish_reason == "stop"
    server.assert_done()


async def test_openai_tool_calls_get_deterministic_ids_and_verbatim_arguments(
    server: Server,
) -> None:
    server.script(
        "gpt-test", Reply("ok"), Reply(calls=[Call("search", {"q": "x"}), Call("broken", '{"q": ')])
    )

    await ask_openai(server)
    completion = await ask_openai(server)

    message = completion.choices[0].message
    assert message.content is None
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls] == [
        ("call_1_0", "search", '{"q": "x"}'),
        ("call_1_1", "broken", '{"q": '),
    ]
    assert completion.choices[0].finish_reason == "tool_calls"


async def test_anthropic_text_reply_arrives_as_a_message(server: Server) -> None:
    server.script("claude-test", Reply("hi there"))

    message = await ask_anthropic(server)

    assert message.type == "message"
    assert message.model == "claude-test"
    assert [(b.type, b.text) for b in message.content] == [("text", "hi there")]
    assert message.stop_reason == "end_turn"


async def test_anthropic_tool_calls_send_malformed_arguments_as_a_raw_string(
    server: Server,
) -> None:
    server.script(
        "claude-test",
        Reply("let me look", calls=[Call("search", {"q": "x"}), Call("broken", "[1, 2")]),
    )

    message = await ask_anthropic(server)

    text, good, bad = message.content
    assert text.type == "text" and text.text == "let me look"
    assert (good.type, good.id, good.name, good.input) == (
        "tool_use",
        "toolu_0_0",
        "search",
        {"q": "x"},
    )
    assert (bad.type, bad.id, bad.name, bad.input) == ("tool_use", "toolu_0_1", "broken", "[1, 2")
    assert message.stop_reason == "tool_use"


async def test_scripted_usage_with_cached_tokens_is_reported_on_both_apis(
    server: Server,
) -> None:
    usage = Usage(input_tokens=1000, output_tokens=50, cached_tokens=800)
    server.script("gpt-test", Reply("a", usage=usage))
    server.script("claude-test", Reply("b", usage=usage))

    completion = await ask_openai(server)
    message = await ask_anthropic(server)

    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (1000, 50)
    assert completion.usage.prompt_tokens_details.cached_tokens == 800
    # Anthropic reports cache reads apart from input tokens.
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens) == (200, 800)
    assert [r.reported_usage for r in server.requests] == [usage, usage]


async def test_default_usage_is_derived_from_the_request_and_reply(
    server: Server,
) -> None:
    server.script("gpt-test", Reply("x" * 40, calls=[Call("f")]))

    completion = await ask_openai(server)

    recorded = server.requests[0]
    expected = Usage(input_tokens=len(recorded.raw) // 4, output_tokens=10 + 10)
    assert recorded.reported_usage == expected
    assert completion.usage is not None and completion.usage.prompt_tokens == expected.input_tokens


async def test_a_scripted_finish_reason_overrides_the_default(server: Server) -> None:
    server.script("gpt-test", Reply("cut", finish_reason="length"))

    completion = await ask_openai(server)

    assert completion.choices[0].finish_reason == "length"


async def test_fail_answers_with_its_status_headers_and_an_openai_error_body(
    server: Server,
) -> None:
    server.script("gpt-test", Fail(429, "slow down", headers={"retry-after": "2"}))

    with pytest.raises(openai.RateLimitError) as raised:
        await ask_openai(server)

    assert raised.value.status_code == 429
    assert raised.value.response.headers["retry-after"] == "2"
    assert raised.value.body == {
        "message": "slow down",
        "type": "rate_limit_exceeded",
        "code": None,
    }
    assert server.requests[0].reported_usage is None


async def test_fail_answers_with_an_anthropic_error_body(server: Server) -> None:
    server.script("claude-test", Fail(529, "busy"))

    with pytest.raises(anthropic.OverloadedError) as raised:
        await ask_anthropic(server)

    assert raised.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "busy"},
    }


@pytest.mark.parametrize("ask", [ask_openai, ask_anthropic], ids=["openai", "anthropic"])
async def test_reset_drops_the_connection_without_an_answer(server: Server, ask) -> None:
    server.script("gpt-test", Reset())
    server.script("claude-test", Reset())

    with pytest.raises((openai.APIConnectionError, anthropic.APIConnectionError)) as raised:
        await ask(server)

    assert not isinstance(raised.value, (openai.APITimeoutError, anthropic.APITimeoutError))
    assert isinstance(server.requests[0].answered, Reset)


async def test_a_held_reply_waits_for_its_release_and_does_not_hold_up_other_requests(
    server: Server,
) -> None:
    gate = Gate("slow")
    server.script("slow", Reply("slow", hold=gate))
    server.script("fast", Reply("fast"))
    finished: list[str] = []

    async def ask(model: str) -> None:
        completion = await ask_openai(server, model)
        finished.append(completion.choices[0].message.content or "")

    slow = asyncio.create_task(ask("slow"))
    held = await gate.reached()
    await ask("fast")
    assert finished == ["fast"] and held.model == "slow"
    gate.release()
    await slow

    assert finished == ["fast", "slow"]
    assert [gone for _, gone in gate.ended] == [False]


async def test_a_held_call_whose_client_gives_up_ends_as_gone(server: Server) -> None:
    gate = Gate()
    server.script("gpt-test", Reply("never", hold=gate))
    asking = asyncio.create_task(ask_openai(server))
    await gate.reached()
    asking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asking
    await eventually(lambda: gate.ended, "the server to see the client go")
    assert [gone for _, gone in gate.ended] == [True]


async def test_a_gate_that_never_fills_fails_naming_itself(server: Server) -> None:
    with pytest.raises(AssertionError, match="branches: 2 call"):
        await Gate("branches").reached(2, timeout=0.05)


async def test_an_unexpected_call_is_refused_with_400_and_recorded(
    server: Server,
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        await ask_openai(server, "nobody-scripted-me")

    assert "unexpected call for model nobody-scripted-me (no scripted step left)" in str(
        raised.value
    )
    assert [r.model for r in server.unexpected] == ["nobody-scripted-me"]
    with pytest.raises(AssertionError, match="nobody-scripted-me"):
        server.assert_done()


async def test_leftover_steps_make_assert_done_fail(server: Server) -> None:
    server.script("gpt-test", Reply("used"), Reply("never used"), Fail(500))

    await ask_openai(server)

    assert server.pending() == {"gpt-test": 2}
    with pytest.raises(AssertionError, match="2 scripted step.*'gpt-test'"):
        server.assert_done()


async def test_the_responder_answers_what_the_script_does_not(server: Server) -> None:
    server.responder = lambda request: Reply(f"echo {request.body['messages'][-1]['content']}")
    server.script("gpt-test", Reply("scripted first"))

    first = await ask_openai(server)
    second = await ask_openai(server)

    assert first.choices[0].message.content == "scripted first"
    assert second.choices[0].message.content == "echo hello"
    server.assert_done()


async def test_a_callable_step_sees_the_recorded_request(server: Server) -> None:
    seen: list[RecordedRequest] = []

    def step(request: RecordedRequest) -> Reply:
        seen.append(request)
        return Reply(f"you sent {len(request.body['messages'])} message(s) to {request.api}")

    server.script("claude-test", step)

    message = await ask_anthropic(server)

    assert message.content[0].text == "you sent 1 message(s) to anthropic"
    assert seen[0].model == "claude-test" and json.loads(seen[0].raw) == seen[0].body
    assert isinstance(server.requests[0].answered, Reply)


async def test_a_raising_callable_step_is_refused_loudly(server: Server) -> None:
    def step(request: RecordedRequest) -> Reply:
        raise RuntimeError("bad script")

    server.script("gpt-test", step)

    with pytest.raises(openai.BadRequestError, match="bad script"):
        await ask_openai(server)
    with pytest.raises(AssertionError):
        server.assert_done()


async def test_requests_are_recorded_per_model_and_reset_forgets_them(
    server: Server,
) -> None:
    server.script("a", Reply("1"), Reply("2"))
    server.script("b", Reply("3"), Reply("4"))

    await ask_openai(server, "a")
    await ask_anthropic(server, "b")

    assert [(r.api, r.model) for r in server.requests] == [("openai", "a"), ("anthropic", "b")]
    assert [r.api for r in server.requests_for("b")] == ["anthropic"]
    assert server.requests[0].headers["Authorization"] == "Bearer sk-test"
    server.reset()
    assert (server.requests, server.unexpected, server.pending()) == ([], [], {})
    server.assert_done()


def test_the_server_serves_synchronous_clients_and_frees_its_port_on_stop() -> None:
    with ScriptedModelServer() as server:
        server.script("gpt-test", Reply("sync"))
        port = int(server.anthropic_base_url.rsplit(":", 1)[1])
        with openai.OpenAI(
            api_key="sk-test", base_url=server.openai_base_url, max_retries=0
        ) as client:
            completion = client.chat.completions.create(model="gpt-test", messages=USER, timeout=10)
        assert completion.choices[0].message.content == "sync"

    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    with pytest.raises(RuntimeError, match="start"):
        _ = server.openai_base_url


async def test_a_responder_returning_none_declines_the_call(server: Server) -> None:
    server.responder = lambda request: None

    with pytest.raises(anthropic.BadRequestError, match="no scripted step left"):
        await ask_anthropic(server)

    assert [r.model for r in server.unexpected] == ["claude-test"]


async def test_a_body_that_is_not_json_is_recorded_and_refused(server: Server) -> None:
    url = f"{server.openai_base_url}/chat/completions"
    async with aiohttp.ClientSession() as session, session.post(url, data=b"{oops") as answer:
        assert answer.status == 400
        assert "not a JSON object" in (await answer.json())["error"]["message"]

    assert [r.raw for r in server.unexpected] == [b"{oops"]


TOOLS_OPENAI: list[Any] = [
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
]
TOOLS_ANTHROPIC: list[Any] = [{"name": "f", "input_schema": {"type": "object"}}]


async def test_a_model_refusing_required_tool_choice_is_answered_without_playing_a_step(
    server: Server,
) -> None:
    server.refuse_required_tool_choice("gpt-local", 500)
    server.script("gpt-local", Reply("with auto"))

    async with openai_sdk(server) as client:
        with pytest.raises(openai.InternalServerError, match='tool_choice "required"'):
            await client.chat.completions.create(
                model="gpt-local", messages=USER, tools=TOOLS_OPENAI, tool_choice="required"
            )
        completion = await client.chat.completions.create(
            model="gpt-local", messages=USER, tools=TOOLS_OPENAI, tool_choice="auto"
        )

    assert completion.choices[0].message.content == "with auto"
    assert isinstance(server.requests[0].answered, Fail) and server.unexpected == []
    server.assert_done()


async def test_anthropic_any_tool_choice_is_refused_the_same_way(server: Server) -> None:
    server.refuse_required_tool_choice("claude-local")

    async with anthropic_sdk(server) as client:
        with pytest.raises(anthropic.BadRequestError, match="required"):
            await client.messages.create(
                model="claude-local",
                max_tokens=10,
                messages=USER,
                tools=TOOLS_ANTHROPIC,
                tool_choice={"type": "any"},
            )


async def test_a_tool_call_can_come_with_a_length_finish_reason(server: Server) -> None:
    server.script("gpt-test", Reply(calls=[Call("f", '{"q": "cut')], finish_reason="length"))
    server.script("claude-test", Reply(calls=[Call("f", {"q": 1})], finish_reason="max_tokens"))

    completion = await ask_openai(server)
    message = await ask_anthropic(server)

    assert completion.choices[0].finish_reason == "length"
    assert completion.choices[0].message.tool_calls[0].function.arguments == '{"q": "cut'
    assert (message.stop_reason, message.content[0].type) == ("max_tokens", "tool_use")


async def test_reasoning_tokens_and_cache_writes_are_reported_in_each_apis_fields(
    server: Server,
) -> None:
    usage = Usage(
        input_tokens=1000,
        output_tokens=300,
        cached_tokens=500,
        cache_write_tokens=200,
        reasoning_tokens=120,
    )
    server.script("gpt-test", Reply("a", usage=usage))
    server.script("claude-test", Reply("b", usage=usage))

    completion = await ask_openai(server)
    message = await ask_anthropic(server)

    assert completion.usage is not None
    assert completion.usage.completion_tokens_details.reasoning_tokens == 120
    assert completion.usage.prompt_tokens_details.cached_tokens == 500
    assert (
        message.usage.input_tokens,
        message.usage.cache_read_input_tokens,
        message.usage.cache_creation_input_tokens,
        message.usage.output_tokens_details.thinking_tokens,
    ) == (300, 500, 200, 120)


async def test_the_prompt_cache_counts_a_prefix_seen_before_as_cached_input_on_openai(
    server: Server,
) -> None:
    server.prompt_cache = True
    server.script("gpt-test", Reply("one"), Reply("two"), Reply("three"))
    first: list[Any] = [{"role": "system", "content": "s" * 400}, *USER]
    longer = [*first, {"role": "assistant", "content": "one"}, {"role": "user", "content": "more"}]

    async with openai_sdk(server) as client:
        for messages in (first, longer, longer):
            await client.chat.completions.create(model="gpt-test", messages=messages)

    reported = [r.reported_usage for r in server.requests]
    assert reported[0] is not None and reported[0].cached_tokens == 0
    prefix = (
        len(json.dumps(first[0], separators=(",", ":")))
        + len(json.dumps(USER[0], separators=(",", ":")))
        + 2
    )
    assert reported[1] is not None and reported[1].cached_tokens == prefix // 4
    assert reported[2] is not None and reported[2].cached_tokens > reported[1].cached_tokens
    assert all(u is not None and u.cache_write_tokens == 0 for u in reported)


async def test_the_prompt_cache_on_anthropic_writes_at_breakpoints_and_reads_them_back(
    server: Server,
) -> None:
    server.prompt_cache = True
    server.script("claude-test", Reply("one"), Reply("two"), Reply("three"))
    marked: list[Any] = [
        {"type": "text", "text": "s" * 400, "cache_control": {"type": "ephemeral"}}
    ]
    plain: list[Any] = [{"type": "text", "text": "t" * 400}]

    async with anthropic_sdk(server) as client:
        for system in (marked, marked, plain):
            await client.messages.create(
                model="claude-test", max_tokens=10, system=system, messages=USER
            )

    written, read, unmarked = (r.reported_usage or Usage() for r in server.requests)
    assert written.cached_tokens == 0 and written.cache_write_tokens > 0
    assert (read.cached_tokens, read.cache_write_tokens) == (written.cache_write_tokens, 0)
    assert (unmarked.cached_tokens, unmarked.cache_write_tokens) == (0, 0)


async def test_reset_forgets_the_prompt_cache_and_the_refusals(server: Server) -> None:
    server.prompt_cache = True
    server.refuse_required_tool_choice("gpt-test")
    server.script("gpt-test", Reply("one"))
    await ask_openai(server)

    server.reset()
    server.script("gpt-test", Reply("two"))
    async with openai_sdk(server) as client:
        await client.chat.completions.create(
            model="gpt-test", messages=USER, tools=TOOLS_OPENAI, tool_choice="required"
        )

    usage = server.requests[0].reported_usage
    assert usage is not None and usage.cached_tokens == 0


# -- streaming ---------------------------------------------------------------------------------

MODELS = {"openai": "gpt-test", "anthropic": "claude-test"}
STREAMED_USAGE = Usage(
    input_tokens=1000, output_tokens=300, cached_tokens=500, cache_write_tokens=200
)
STREAMED_REPLIES = [
    Reply("hi there, " * 9, usage=STREAMED_USAGE),
    Reply(calls=[Call("search", {"q": "x" * 50}), Call("f")], usage=STREAMED_USAGE),
    Reply("let me look", calls=[Call("search", {"q": "x"})], usage=STREAMED_USAGE),
]
REPLY_IDS = ["text", "tool-calls", "text-and-tool-calls"]


async def stream_openai(server: Server, model: str = "gpt-test"):
    """Stream with usage and accumulate the chunks as the SDK's own stream helper does."""
    state = ChatCompletionStreamState()
    async with openai_sdk(server) as client:
        stream = await client.chat.completions.create(
            model=model,
            messages=USER,
            stream=True,
            stream_options={"include_usage": True},
            timeout=10,
        )
        async for chunk in stream:
            state.handle_chunk(chunk)
    return state.get_final_completion()


async def stream_anthropic(server: Server, model: str = "claude-test"):
    async with (
        anthropic_sdk(server) as client,
        client.messages.stream(model=model, max_tokens=100, messages=USER, timeout=10) as stream,
    ):
        return await stream.get_final_message()


async def stream_pieces(
    server: Server, api: str, pieces: list[tuple[float, str]], stop_after: int | None = None
) -> None:
    """Stream a request on ``api``, appending each piece of text or arguments with the time it
    arrived; with ``stop_after``, close the stream once that many have."""

    def done() -> bool:
        return stop_after is not None and len(pieces) >= stop_after

    if api == "openai":
        async with openai_sdk(server) as client:
            chunks = await client.chat.completions.create(
                model=MODELS[api],
                messages=USER,
                stream=True,
                stream_options={"include_usage": True},
                timeout=10,
            )
            async for chunk in chunks:
                for choice in chunk.choices:
                    calls = choice.delta.tool_calls or []
                    texts = [choice.delta.content or ""]
                    texts += [c.function.arguments or "" for c in calls if c.function]
                    pieces += [(time.monotonic(), text) for text in texts if text]
                if done():
                    await chunks.close()
                    return
        return
    async with anthropic_sdk(server) as client:
        events = await client.messages.create(
            model=MODELS[api], max_tokens=100, messages=USER, stream=True, timeout=10
        )
        async for event in events:
            if event.type == "content_block_delta":
                delta = event.delta
                text = delta.text if delta.type == "text_delta" else delta.partial_json
                pieces.append((time.monotonic(), text))
            if done():
                await events.close()
                return


def openai_result(completion) -> tuple[Any, ...]:
    choice = completion.choices[0]
    calls = [
        (c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls or []
    ]
    return choice.message.content, calls, choice.finish_reason, completion.usage.model_dump()


def anthropic_result(message) -> tuple[Any, ...]:
    blocks = [
        (b.type, b.text) if b.type == "text" else (b.type, b.name, b.input) for b in message.content
    ]
    return blocks, message.stop_reason, message.usage.model_dump()


@pytest.mark.parametrize("reply", STREAMED_REPLIES, ids=REPLY_IDS)
async def test_a_streamed_openai_reply_accumulates_to_the_plain_completion(
    server: Server, reply: Reply
) -> None:
    server.script("gpt-test", reply, reply)

    plain = await ask_openai(server)
    streamed = await stream_openai(server)

    assert openai_result(streamed) == openai_result(plain)
    assert (streamed.id, streamed.model) == ("chatcmpl-scripted-1", "gpt-test")
    assert [c.id for c in streamed.choices[0].message.tool_calls or []] == [
        f"call_1_{k}" for k in range(len(reply.calls))
    ]
    assert [r.reported_usage for r in server.requests] == [STREAMED_USAGE, STREAMED_USAGE]


@pytest.mark.parametrize("reply", STREAMED_REPLIES, ids=REPLY_IDS)
async def test_a_streamed_anthropic_reply_accumulates_to_the_plain_message(
    server: Server, reply: Reply
) -> None:
    server.script("claude-test", reply, reply)

    plain = await ask_anthropic(server)
    streamed = await stream_anthropic(server)

    assert anthropic_result(streamed) == anthropic_result(plain)
    # The input and cache counts come from message_start as well as message_delta.
    assert (
        streamed.usage.input_tokens,
        streamed.usage.cache_read_input_tokens,
        streamed.usage.cache_creation_input_tokens,
    ) == (300, 500, 200)
    assert [b.id for b in streamed.content if b.type == "tool_use"] == [
        f"toolu_1_{k}" for k in range(len(reply.calls))
    ]
    assert [r.reported_usage for r in server.requests] == [STREAMED_USAGE, STREAMED_USAGE]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_a_long_text_streams_in_pieces_of_chunk_chars_spread_by_chunk_delay(
    server: Server, api: str
) -> None:
    server.script(MODELS[api], Reply("x" * 2000, chunk_chars=100, chunk_delay=0.02))
    pieces: list[tuple[float, str]] = []

    await stream_pieces(server, api, pieces)

    assert [len(text) for _, text in pieces] == [100] * 20
    assert pieces[-1][0] - pieces[0][0] >= 19 * 0.02 * 0.5


FAILING = Reply(
    "ab", calls=[Call("f", {"q": "x" * 100})], chunk_chars=10, fail_after=4, fail_message="boom"
)
"""One piece of text, then the arguments in eleven: the error comes after three of those."""


async def test_fail_after_ends_an_openai_stream_with_an_api_error_after_that_many_pieces(
    server: Server,
) -> None:
    server.script("gpt-test", FAILING)
    pieces: list[tuple[float, str]] = []

    with pytest.raises(openai.APIError) as raised:
        await stream_pieces(server, "openai", pieces)

    # A plain APIError, not a status error: the stream had started with 200.
    assert type(raised.value) is openai.APIError and not hasattr(raised.value, "status_code")
    assert raised.value.body == {"message": "boom", "type": "server_error", "code": None}
    assert len(pieces) == 4
    assert server.requests[0].reported_usage is None


async def test_fail_after_ends_an_anthropic_stream_with_a_status_error_after_that_many_pieces(
    server: Server,
) -> None:
    server.script("claude-test", FAILING)
    pieces: list[tuple[float, str]] = []

    with pytest.raises(anthropic.APIStatusError) as raised:
        await stream_pieces(server, "anthropic", pieces)

    # The SDK makes a status error of the event with the stream's own status, 200.
    assert type(raised.value) is anthropic.APIStatusError and raised.value.status_code == 200
    assert "boom" in str(raised.value)
    assert len(pieces) == 4
    assert server.requests[0].reported_usage is None


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_a_client_closing_a_stream_early_leaves_the_server_serving(
    server: Server, api: str, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(MODELS[api], Reply("x" * 2000, chunk_chars=10, chunk_delay=0.01), Reply("next"))
    ask = ask_openai if api == "openai" else ask_anthropic
    pieces: list[tuple[float, str]] = []

    with caplog.at_level(logging.ERROR):
        await stream_pieces(server, api, pieces, stop_after=3)
        await ask(server)

    assert len(pieces) == 3
    assert caplog.records == []
    server.assert_done()


async def test_an_openai_stream_without_include_usage_reports_no_usage(server: Server) -> None:
    server.script("gpt-test", Reply("hi"))

    async with openai_sdk(server) as client:
        stream = await client.chat.completions.create(
            model="gpt-test", messages=USER, stream=True, timeout=10
        )
        chunks = [chunk async for chunk in stream]

    assert [chunk.usage for chunk in chunks] == [None] * len(chunks)
    assert server.requests[0].reported_usage is None


async def test_a_fail_step_answers_a_streaming_request_before_any_stream_starts(
    server: Server,
) -> None:
    server.script("gpt-test", Fail(429, "slow down"))

    with pytest.raises(openai.RateLimitError, match="slow down"):
        await stream_openai(server)


async def test_an_unexpected_streaming_call_is_refused_with_400_and_recorded(
    server: Server,
) -> None:
    with pytest.raises(anthropic.BadRequestError, match="no scripted step left"):
        await stream_anthropic(server)

    assert [r.model for r in server.unexpected] == ["claude-test"]
