"""Text the stores cannot hold (issue 23, item 6) and the length of what reaches a payload.

NUL and unpaired surrogates are the characters PostgreSQL refuses (``errands.contracts.text``).
From a person they are refused, clearly, before anything starts or is sent (the client's
``InvalidRequest``, the gateway's 422); from a model or a tool they are replaced with U+FFFD and
the task replies. Every task case runs on SQLite and on PostgreSQL, each with a worker of its
own on that store, and ends within a minute.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

import errands
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import Call, Gate, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore, open_store
from errands.client import Client as ErrandsClient
from errands.client import task_input
from errands.contracts import ids
from errands.contracts.events import NewEvent
from errands.contracts.limits import TASK_PATTERN
from errands.contracts.messages import ModelResponse, NewMessage, ToolCall
from errands.contracts.text import (
    REPLACEMENT,
    check,
    clean,
    clean_arguments,
    clean_json,
    clean_response,
)
from errands.errors import InvalidRequest, TaskNotFound
from errands.gateway import create_app, serving
from errands.plugin import ErrandsPlugin
from errands.settings import Settings
from tests.conftest import run_cli
from tests.helpers import final
from tests.test_store import pg_admin, pg_url_in

ROOT = Path(__file__).resolve().parent.parent
WITHIN = 60
"""Seconds each case has to resolve."""
BAD = {"nul": "\x00", "surrogate": "\ud800"}
"""The characters no store can hold, as a person, a model or a tool may send them."""
SURROGATE_CALLS: list[str] = []


@errands.tool
def surrogate_text() -> str:
    """Return a short text with an unpaired surrogate in it."""
    SURROGATE_CALLS.append("called")
    return "before\ud800after"


# -- the rule, without a server ---------------------------------------------------------------


@pytest.mark.fast
@pytest.mark.parametrize(
    "bad",
    ["a/b", "a b", "tab\there", "bell\x07", "del\x7f", "next-line\x85", "csi\x9b2J", "x" * 301],
)
def test_a_task_id_the_gateway_would_refuse_is_refused_by_the_client_too(bad: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        task_input(Settings(), "Do it.", session="ids-s1", task_id=bad)
    assert refused.value.field == "task_id"
    assert refused.value.message.startswith("the task id")
    assert not any(0x7F <= ord(c) <= 0x9F for c in refused.value.message), "said, not sent"
    assert not re.fullmatch(TASK_PATTERN, bad)


@pytest.mark.fast
def test_the_client_and_the_gateways_task_paths_take_the_same_ids() -> None:
    paths = create_app(ErrandsClient(None, Settings()), token=None).openapi()["paths"]
    patterns = {
        parameter["schema"]["pattern"]
        for operations in paths.values()
        for operation in operations.values()
        for parameter in operation.get("parameters", [])
        if parameter["name"] == "task_id"
    }
    assert patterns == {TASK_PATTERN}
    for good in ["review-2026-12", "é:ü.7", "x" * 300]:
        assert task_input(Settings(), "Do it.", session="ids-s1", task_id=good).task_id == good


@pytest.mark.fast
@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_the_rule_names_the_field_the_character_and_its_position(bad: str) -> None:
    with pytest.raises(ValueError) as refused:
        check(f"ab{bad}c", "text")
    message = str(refused.value)
    assert message.startswith("text holds ")
    assert f"(U+{ord(bad):04X}) at character 3" in message
    assert bad not in message  # the message itself can be printed and stored
    assert clean(f"ab{bad}c") == f"ab{REPLACEMENT}c"


@pytest.mark.fast
def test_everything_else_passes_untouched() -> None:
    text = "tab\tbell\x07 \ufffe\uffff\U0010ffff 😀 \\u0000"
    assert check(text, "text") is text
    assert clean(text) is text
    value = {"k": [text, 1, None]}
    assert clean_json(value) is value


@pytest.mark.fast
def test_json_keys_and_nested_strings_are_cleaned() -> None:
    assert clean_json({"a\x00": ["x\udc80", {"y": "\x00"}]}) == {
        f"a{REPLACEMENT}": [f"x{REPLACEMENT}", {"y": REPLACEMENT}]
    }


@pytest.mark.fast
def test_escaped_unstorable_characters_in_arguments_are_replaced_and_a_pair_is_kept() -> None:
    raw = '{"reply": "x\\u0000y\\ud800z \\ud83d\\ude00"}'
    assert json.loads(clean_arguments(raw)) == {"reply": f"x{REPLACEMENT}y{REPLACEMENT}z 😀"}
    kept = '{"reply": "\\ud83d\\ude00 and a backslash-u: \\\\u0000"}'
    assert clean_arguments(kept) is kept


@pytest.mark.fast
def test_a_models_response_is_cleaned_text_and_calls() -> None:
    call = ToolCall(id="c1", name="final_reply", arguments='{"text": "a\\u0000b"}')
    fine = ToolCall(id="c2", name="other", arguments="{}")
    response = clean_response(ModelResponse(text="t\x00", tool_calls=[call, fine]))
    assert response.text == f"t{REPLACEMENT}"
    assert json.loads(response.tool_calls[0].arguments) == {"text": f"a{REPLACEMENT}b"}
    assert response.tool_calls[1] is fine


# -- both stores ------------------------------------------------------------------------------


@dataclass
class Stack:
    """A worker of its own on one store, an errands client on it, and a gateway before that."""

    backend: str
    store: SessionStore
    settings: Settings
    client: ErrandsClient
    http: httpx.AsyncClient
    calls: Path
    """One line per call of the MCP tool ``nul_text``."""


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
async def stack(
    request: pytest.FixtureRequest,
    client: Client,
    settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Stack]:
    backend = request.param
    where = tmp_path_factory.mktemp(f"text-{backend}")
    schema = f"errands_test_{uuid.uuid4().hex[:12]}"
    if backend == "sqlite":
        url = f"sqlite:///{where / 'sessions.db'}"
    else:
        with pg_admin() as admin:
            admin.execute(f'CREATE SCHEMA "{schema}"')
        url = pg_url_in(schema)
    calls = where / "calls.txt"
    server = [sys.executable, "-m", "tests.mcp_text_server", str(calls)]
    own = settings.model_copy(
        update={
            "task_queue": f"text-{backend}-{uuid.uuid4().hex[:6]}",
            "database_url": url,
            "mcp_servers": json.dumps({"text": {"command": server, "cwd": str(ROOT)}}),
        }
    )
    store = open_store(url)
    router = ModelRouter(own)
    plugin = ErrandsPlugin(own, tools=[surrogate_text], store=store, router=router)
    errands_client = ErrandsClient(client, own, store=store)
    try:
        async with Worker(client, task_queue=own.task_queue, plugins=[plugin]):
            async with serving(create_app(errands_client, token=None)) as base:
                async with httpx.AsyncClient(base_url=base, timeout=WITHIN) as http:
                    yield Stack(backend, store, own, errands_client, http, calls)
    finally:
        await router.aclose()
        store.close()
        if backend == "postgres":
            with pg_admin() as admin:
                admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def model(name: str, stack: Stack) -> str:
    """A scripted model of this test on this stack (the server keys scripts by name)."""
    return f"{name}-{stack.backend}"


async def replied(stack: Stack, task_id: str) -> Any:
    result = await asyncio.wait_for(stack.client.task(task_id).wait(), WITHIN)
    assert result.status == "replied", result.error
    return result


async def post(stack: Stack, path: str, body: dict[str, Any]) -> httpx.Response:
    """POST ``body`` as JSON with every non-ASCII character escaped, as a browser's
    ``JSON.stringify`` may send an unpaired surrogate (``"\\ud800"``)."""
    headers = {"Content-Type": "application/json"}
    return await stack.http.post(path, content=json.dumps(body), headers=headers)


def gateway_says(detail: str, bad: str, field: str, position: int) -> bool:
    """Whether the gateway's 422 names the character and where it is: a NUL reaches the client,
    which names its position; an unpaired surrogate is refused as the body is read, in the
    field it is in."""
    if bad == "\x00":
        return f"holds a NUL character (U+0000) at character {position}" in detail
    return f"body.{field}: the text holds an unpaired surrogate" in detail


def tool_results(request: RecordedRequest) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "tool"]


def test_the_store_holds_the_same_cleaned_text_on_both_backends(
    tmp_path: Path,
) -> None:
    schema = f"errands_test_{uuid.uuid4().hex[:12]}"
    with pg_admin() as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        try:
            held = []
            for url in (str(tmp_path / "s.db"), pg_url_in(schema)):
                store = open_store(url)
                try:
                    row = store.append_once(
                        NewMessage(
                            id="m\x00",
                            session_id="s1",
                            role="tool",
                            kind="tool_result",
                            text="a\x00b\ud800c",
                            meta={"k\x00": ["\udfff", 1]},
                        ),
                        [NewEvent(task_id="t", key="k", type="replied", data={"x": "\x00"})],
                    )
                    store.put_decision("s1", "d", {"answer": "\ud800"})
                    assert store.get("m\x00") == row  # a lookup cleans its key as the write did
                    held.append(
                        (
                            row.id,
                            row.text,
                            row.meta,
                            store.list_events("t")[0].data,
                            store.list_decisions("s1"),
                        )
                    )
                finally:
                    store.close()
        finally:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
    r = REPLACEMENT
    expected = (f"m{r}", f"a{r}b{r}c", {f"k{r}": [r, 1]}, {"x": r}, {"d": {"answer": r}})
    assert held == [expected, expected]


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
async def test_a_tasks_text_with_an_unstorable_character_is_refused_and_nothing_starts(
    stack: Stack, bad: str
) -> None:
    task_id = f"task-text-{uuid.uuid4().hex[:8]}"
    with pytest.raises(InvalidRequest) as refused:
        await stack.client.start(f"Do{bad} it.", session="text-s1", task_id=task_id)
    assert "the task's text holds" in refused.value.message
    assert "at character 3" in refused.value.message
    assert refused.value.field == "text"
    with pytest.raises(TaskNotFound):
        await stack.client.task(task_id).describe()

    session = f"text-{uuid.uuid4().hex[:8]}"
    answer = await post(stack, f"/v1/sessions/{session}/tasks", {"text": f"Do{bad} it."})
    assert answer.status_code == 422, answer.text
    assert gateway_says(answer.json()["detail"], bad, "text", 3)
    assert stack.store.list_session(session) == []  # nothing was written for it


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
async def test_a_model_reply_with_an_unstorable_character_is_stored_with_the_replacement(
    stack: Stack, scripted: ScriptedModelServer, bad: str
) -> None:
    name = model("gpt-text-reply", stack)
    scripted.script(name, final(f"before{bad}after"))
    handle = await stack.client.start("Say it.", model=f"openai:{name}")

    result = await replied(stack, handle.task_id)

    assert result.reply == f"before{REPLACEMENT}after"
    row = stack.store.get(ids.reply_message_id(handle.task_id))
    assert row is not None and row.text == f"before{REPLACEMENT}after"


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
async def test_a_steer_and_a_side_question_with_an_unstorable_character_are_refused_clearly(
    stack: Stack, scripted: ScriptedModelServer, bad: str
) -> None:
    name = model(f"gpt-text-steer-{'nul' if bad == chr(0) else 'sur'}", stack)
    gate = Gate("steer")
    scripted.script(name, final("Done.", hold=gate))
    handle = await stack.client.start("Take your time.", model=f"openai:{name}")
    await gate.reached()
    task = stack.client.task(handle.task_id)

    with pytest.raises(InvalidRequest) as steer:
        await task.say(f"also{bad}this")
    with pytest.raises(InvalidRequest) as side:
        await task.btw(f"why{bad}?")
    sent = await post(stack, f"/v1/tasks/{handle.task_id}/messages", {"text": f"a{bad}"})
    asked = await post(stack, f"/v1/tasks/{handle.task_id}/btw", {"question": f"a{bad}"})
    gate.release()
    await replied(stack, handle.task_id)

    assert "the message holds" in steer.value.message and "at character 5" in steer.value.message
    assert "the side question holds" in side.value.message
    assert "at character 4" in side.value.message
    for answer, field in ((sent, "text"), (asked, "question")):
        assert answer.status_code == 422, answer.text
        assert gateway_says(answer.json()["detail"], bad, field, 2)
    user_rows = [r for r in stack.store.list_session(handle.session_id) if r.role == "user"]
    assert [r.text for r in user_rows] == ["Take your time."]  # nothing was sent


async def test_an_mcp_tool_result_with_a_nul_runs_the_tool_once_and_the_task_replies(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    name = model("gpt-text-mcp", stack)
    before = stack.calls.read_text().count("called") if stack.calls.exists() else 0
    scripted.script(name, Reply(calls=[Call("mcp__text__nul_text", {})]), final("Read it."))
    handle = await stack.client.start("Read the tool.", model=f"openai:{name}")

    await replied(stack, handle.task_id)

    told = tool_results(scripted.requests_for(name)[1])[0]
    assert stack.calls.exists(), told
    assert stack.calls.read_text().count("called") - before == 1, told
    assert told.startswith(f"before{REPLACEMENT}after")
    assert "1 character(s) of this result" in told  # the model is told what was replaced


async def test_a_python_tool_result_with_a_lone_surrogate_runs_once_and_the_task_replies(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    name = model("gpt-text-python", stack)
    before = len(SURROGATE_CALLS)
    scripted.script(name, Reply(calls=[Call("surrogate_text", {})]), final("Read it."))
    handle = await stack.client.start("Read the tool.", model=f"openai:{name}")

    await replied(stack, handle.task_id)

    assert len(SURROGATE_CALLS) - before == 1
    told = tool_results(scripted.requests_for(name)[1])[0]
    assert told.startswith(f"before{REPLACEMENT}after")
    assert "were replaced with" in told


async def test_a_600k_character_model_name_is_refused_at_the_client_and_the_gateway(
    stack: Stack,
) -> None:
    huge = "openai:" + "x" * 600_000
    with pytest.raises(InvalidRequest) as refused:
        await stack.client.start("Hello.", model=huge)
    assert refused.value.field == "model"
    assert "600,007 characters, more than the 200 allowed" in refused.value.message
    assert len(refused.value.message) < 300

    session = f"text-{uuid.uuid4().hex[:8]}"
    answer = await stack.http.post(
        f"/v1/sessions/{session}/tasks", json={"text": "Hello.", "model": huge}
    )
    assert answer.status_code == 422, answer.text[:300]
    assert "body.model: String should have at most 200 characters" in answer.json()["detail"]
    assert len(answer.content) < 2_000  # the name is not echoed back
    assert stack.store.list_session(session) == []


async def test_an_answer_with_an_unstorable_character_is_refused_before_it_is_sent(
    stack: Stack,
) -> None:
    task = stack.client.task("task-none-such")  # never reached: the answer is checked first
    with pytest.raises(InvalidRequest) as refused:
        await task.answer({"q1": "Other: my\x00 words"})
    assert "the answer to 'q1' holds a NUL character (U+0000) at character 10" in (
        refused.value.message
    )
    with pytest.raises(InvalidRequest) as too_long:
        await task.answer({"q1": "x" * 10_001})
    assert "more than the 10,000 allowed" in too_long.value.message


async def test_a_denial_reason_with_an_unstorable_character_is_refused_before_it_is_sent(
    stack: Stack,
) -> None:
    task = stack.client.task("task-none-such")  # never reached: the reason is checked first
    with pytest.raises(InvalidRequest) as refused:
        await task.deny("not\x00 now")
    assert "the reason holds a NUL character (U+0000) at character 4" in refused.value.message
    with pytest.raises(InvalidRequest) as too_long:
        await task.deny("x" * 2_001)
    assert "more than the 2,000 allowed" in too_long.value.message


async def test_the_cli_refuses_text_it_cannot_store_in_one_line_with_exit_2(
    cli_env: dict[str, str],
) -> None:
    # A NUL cannot be a command-line argument; bytes that are not UTF-8 arrive as unpaired
    # surrogates (Python's surrogateescape), the same character the rule refuses.
    for args in (("run", "Do \udcff it."), ("run", "Hello.", "--model", "openai:" + "x" * 600)):
        result = await run_cli(cli_env, *args, timeout=WITHIN)
        assert result.code == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
