"""Against a model server no one here wrote: llama.cpp's llama-server serving SmolLM2-135M
(tests/llama_server.py) behind the real openai client, on the real dev server.

What is asserted is protocol, not wit: the server accepts errands' requests, a task ends through
``final_reply``, a delegating round's branches reach the next round, the ledger is the server's
own count, side questions are answered, and a server killed in the middle of a call is recovered
from. A recording proxy in front of the server sees every request and the ``usage`` the server
answered with, and narrows what a round offers so the server's grammar makes the control call a
test is about (SmolLM2 left to choose delegated with out-of-range references in every attempt
of one CI run).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import SecretStr
from temporalio.client import Client
from temporalio.worker import Worker

import errands
from errands.adapters.devserver import free_port
from errands.adapters.providers._openai import openai_client, openai_params
from errands.adapters.routing import ModelRouter
from errands.adapters.store import SessionStore
from errands.agent.advisor import advisor_spec
from errands.agent.asking import ask_user_spec
from errands.agent.control import delegate_spec, final_reply_spec
from errands.agent.subtask_types import GENERAL
from errands.contracts.events import LiveText
from errands.contracts.messages import Message, ModelRequest
from errands.contracts.workflows import TaskResult
from errands.settings import Settings
from errands.workers import build_worker
from tests.helpers import eventually
from tests.llama_server import LLAMA_ABORTS, Exchange, LlamaServer, RecordingProxy, llama_server
from tests.plugins import RESEARCH

pytestmark = pytest.mark.real_model

MODEL = "openai:smollm2"
TASK_TIMEOUT = 600.0


def is_round(body: dict) -> bool:
    return body.get("tool_choice") == "required"


@pytest.fixture(scope="session")
def llama(tmp_session_dir: Path) -> Iterator[LlamaServer]:
    with llama_server(free_port(), tmp_session_dir / "llama-server.log") as server:
        yield server


@pytest.fixture(scope="session")
def proxy(llama: LlamaServer, pytestconfig: pytest.Config) -> Iterator[RecordingProxy]:
    """The recording proxy for the session. The server's own aborts it recovered from are
    reported in the run's summary (tests/conftest.py): they are upstream bugs the proxy stands
    in for a supervisor on, not failures of errands, so they must be seen but fail nothing."""
    recording = RecordingProxy(llama).start()
    yield recording
    recording.stop()
    pytestconfig.stash.setdefault(LLAMA_ABORTS, []).extend(recording.aborts)


@pytest.fixture
def recorded(proxy: RecordingProxy) -> Iterator[RecordingProxy]:
    """The proxy with nothing recorded and nothing held, for one test."""
    proxy.release()
    proxy.reset()
    yield proxy
    proxy.release()


@pytest.fixture(scope="session")
def real_settings(proxy: RecordingProxy, database_url: str) -> Settings:
    # Only the built-in `general` type, which takes no params; few model calls. Output is capped
    # at the server's own 512: at 256, SmolLM2's delegate calls were cut off round after round.
    return Settings(
        TEMPORAL_ADDRESS=None,
        ERRANDS_TASK_QUEUE=f"errands-real-{uuid.uuid4().hex[:8]}",
        ERRANDS_DATABASE_URL=database_url,
        ERRANDS_MODEL=MODEL,
        OPENAI_API_KEY=SecretStr("sk-local-anything"),
        OPENAI_BASE_URL=proxy.base_url,
        ERRANDS_MAX_OUTPUT_TOKENS=512,
        ERRANDS_MAX_SUBTASKS=2,
        ERRANDS_STEP_BUDGET=6,
        ERRANDS_BRANCH_STEP_LIMIT=3,
        ERRANDS_MODEL_TIMEOUT=120.0,
        ERRANDS_ROUND_RETRY_DELAY=2.0,
        ERRANDS_SIDE_QUESTION_TIMEOUT=120.0,
    )


@pytest.fixture(scope="session")
async def real_worker(
    client: Client, real_settings: Settings, store: SessionStore
) -> AsyncIterator[Worker]:
    router = ModelRouter(real_settings)
    async with build_worker(client, real_settings, store=store, router=router) as running:
        yield running
    await router.aclose()


@pytest.fixture(scope="session")
def tasks(client: Client, real_settings: Settings, store: SessionStore) -> errands.Client:
    return errands.Client(client, real_settings, store=store)


@dataclass
class Finished:
    handle: errands.TaskHandle
    result: TaskResult
    exchanges: list[Exchange]
    """Every request the task sent, with the server's answers."""


@pytest.fixture(scope="session")
async def finished(tasks: errands.Client, real_worker: Worker, proxy: RecordingProxy) -> Finished:
    """One short task run to its end; several tests read it, so the model is called few times."""
    proxy.release()
    proxy.reset()
    proxy.narrow(is_round, {"final_reply"})
    handle = await tasks.start("Say hello to the team in one short sentence.", headless=True)
    result = await handle.wait(timeout=TASK_TIMEOUT)
    return Finished(handle, result, list(proxy.exchanges))


def ended_through_a_control_tool(result: TaskResult) -> None:
    assert result.status == "replied", (result.status, result.error)
    assert result.replied_by in ("model", "join")
    assert result.reply and result.reply.strip()


async def test_every_tool_schema_errands_offers_is_accepted(recorded: RecordingProxy) -> None:
    # The grammar is built from the schemas before the first token: one token is enough.
    request = ModelRequest(
        system="Answer the user.",
        messages=[Message(role="user", text="Hi")],
        tools=[
            final_reply_spec(),
            delegate_spec([GENERAL.info(), RESEARCH.info()], 8),
            ask_user_spec(),
            advisor_spec(),
        ],
        tool_choice="required",
        max_output_tokens=1,
    )
    params = openai_params("smollm2", request)
    params["max_tokens"] = 1
    sdk = openai_client(api_key="sk-local-anything", base_url=recorded.base_url)
    try:
        await sdk.chat.completions.create(**params)
    finally:
        await sdk.close()
    assert [e.status for e in recorded.exchanges] == [200]


async def test_a_round_request_is_accepted(finished: Finished) -> None:
    rounds = [e for e in finished.exchanges if is_round(e.body)]
    assert rounds, "the task sent no round request"
    assert [e.status for e in finished.exchanges] == [200] * len(finished.exchanges)
    first = rounds[0].body
    assert [t["function"]["name"] for t in first["tools"]][:2] == ["final_reply", "delegate"]
    subtask = first["tools"][1]["function"]["parameters"]["properties"]["subtasks"]["items"]
    assert "params" not in subtask["properties"]  # `general` takes none


async def test_a_task_replies_through_final_reply(finished: Finished) -> None:
    ended_through_a_control_tool(finished.result)
    assert finished.result.replied_by == "model"
    assert finished.result.error is None


async def test_the_reply_streams_and_what_a_watcher_saw_is_the_reply(finished: Finished) -> None:
    rounds = [e for e in finished.exchanges if is_round(e.body)]
    assert all(e.body.get("stream") is True for e in rounds), "round calls stream"
    events = [e.public() async for e in finished.handle.events(follow=False)]
    assert any(e["type"] == "reply_delta" for e in events), "the server's pieces reached the log"
    live = LiveText()
    for event in events:
        live.apply(event)
    assert live.text() == finished.result.reply


async def test_the_ledger_equals_the_servers_token_counts(finished: Finished) -> None:
    answered = [e for e in finished.exchanges if e.status == 200]
    total = finished.result.usage.total()
    assert total.calls == len(finished.exchanges) > 0
    assert total.input_tokens == sum(e.usage["prompt_tokens"] for e in answered) > 0
    assert total.output_tokens == sum(e.usage["completion_tokens"] for e in answered) > 0


def carries_branch_results(messages: list[dict]) -> bool:
    """The request shows an earlier round's delegate call and its branches' results."""
    return any(
        m["role"] == "assistant"
        and [c["function"]["name"] for c in m.get("tool_calls") or []] == ["delegate"]
        and after["role"] == "tool"
        and '"subtask_id"' in after["content"]  # the branches' results, not a repair's error
        for m, after in zip(messages, messages[1:], strict=False)
    )


def is_first_round(body: dict) -> bool:
    """A round request before any delegation (the branches' own calls are not rounds)."""
    return is_round(body) and not any(
        c["function"]["name"] == "delegate"
        for m in body["messages"]
        for c in m.get("tool_calls") or []
    )


async def test_a_delegating_rounds_branches_reach_the_next_round(
    tasks: errands.Client, real_worker: Worker, recorded: RecordingProxy
) -> None:
    # Whether SmolLM2 delegates is its choice: the proxy offers round 0 only `delegate` (without
    # `references`, which it fills with numbers like 172935), and later rounds only
    # `final_reply`, so the server's grammar makes the calls; what is tested is what errands
    # does with them. Rejecting a bad reference is tested against the scripted model.
    recorded.narrow(is_first_round, {"delegate"}, subtask_fields={"references"})
    recorded.narrow(is_round, {"final_reply"})
    handle = await tasks.start(
        "Split the work in two subtasks: list three birds, and list three fish.", headless=True
    )
    result = await handle.wait(timeout=TASK_TIMEOUT)
    ended_through_a_control_tool(result)
    assert result.rounds >= 2
    assert all(e.status == 200 for e in recorded.exchanges)
    assert any(not is_round(e.body) for e in recorded.exchanges)  # the branches' own calls
    later_rounds = [e.body["messages"] for e in recorded.exchanges if is_round(e.body)][1:]
    assert any(carries_branch_results(messages) for messages in later_rounds)


async def test_a_side_question_on_a_finished_task_is_answered(
    finished: Finished, recorded: RecordingProxy
) -> None:
    answer = await asyncio.wait_for(finished.handle.btw("What did you just do?"), 180)
    assert answer.answer.strip()
    assert recorded.exchanges and all(e.status == 200 for e in recorded.exchanges)
    assert not any(is_round(e.body) for e in recorded.exchanges)


async def test_a_side_question_on_a_running_task_is_answered(
    tasks: errands.Client, real_worker: Worker, recorded: RecordingProxy
) -> None:
    recorded.hold(is_round)  # the task's round call waits at the proxy: the task stays running
    recorded.narrow(is_round, {"final_reply"})
    handle = await tasks.start("Name one colour.", headless=True)
    await eventually(
        lambda: bool(recorded.held()), "the round's request to reach the proxy", timeout=120
    )
    answer = await asyncio.wait_for(handle.btw("What are you working on?"), 180)
    assert answer.answer.strip()
    assert (await handle.status()).status == "running"
    recorded.release()
    ended_through_a_control_tool(await handle.wait(timeout=TASK_TIMEOUT))


async def test_a_server_killed_mid_call_and_restarted_is_recovered_from(
    tasks: errands.Client, real_worker: Worker, recorded: RecordingProxy, llama: LlamaServer
) -> None:
    recorded.narrow(is_round, {"final_reply"})
    handle = await tasks.start("Name one animal.", headless=True)
    await eventually(
        lambda: any(e.status is None and e.error is None for e in recorded.exchanges),
        "a model call in flight at the server",
        timeout=120,
    )
    llama.stop(kill=True)
    try:
        await eventually(
            lambda: sum(1 for e in recorded.exchanges if e.error) >= 2,
            "the cut call, then a retry finding nobody listening",
            timeout=120,
        )
    finally:
        await asyncio.to_thread(llama.start)
    result = await handle.wait(timeout=TASK_TIMEOUT)
    ended_through_a_control_tool(result)
    assert any(e.status == 200 for e in recorded.exchanges)
