"""A task runs end to end on the real dev server, through the real SDK clients."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import Fail, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.agent.subtask_types import load_types
from errands.contracts.messages import NewMessage
from errands.contracts.rounds import RoundStepInput, RoundStepOutput
from errands.contracts.workflows import RoundSettings, TaskResult
from errands.plugin import WORKFLOWS, build_activities
from errands.settings import Settings
from errands.workers import build_worker
from tests.conftest import ANTHROPIC_KEY, OPENAI_KEY, StartTask, run_cli
from tests.helpers import (
    ACTIVITY_SCHEDULED,
    ACTIVITY_STARTED,
    Conversation,
    delegate,
    events_of,
    final,
    general,
    history_bytes,
    history_events,
    is_summary_call,
    keep_history,
    start_task,
)

FAST = RoundSettings(model_max_attempts=4)


async def test_cli_runs_a_task_on_openai(
    worker, cli_env, scripted: ScriptedModelServer, store
) -> None:
    scripted.script("gpt-test", final("The answer is 42."))
    result = await run_cli(
        {**cli_env, "ERRANDS_MODEL": "openai:gpt-test"}, "run", "What is it?", "--json"
    )
    assert result.code == 0, result.stderr
    state = result.json()
    assert state["status"] == "replied"
    assert state["reply"] == "The answer is 42."
    assert state["usage"]["parts"]["rounds"]["openai:gpt-test"]["calls"] == 1
    request = scripted.requests_for("gpt-test")[0]
    assert request.api == "openai"
    assert request.body["tool_choice"] == "required"
    assert request.body["messages"][-1]["content"] == "[ref 1] What is it?"


async def test_cli_runs_a_task_on_anthropic(worker, cli_env, scripted: ScriptedModelServer) -> None:
    scripted.script("claude-test", final("Bonjour."))
    result = await run_cli(
        {**cli_env, "ERRANDS_MODEL": "anthropic:claude-test"},
        "run",
        "Say hello in French",
        "--json",
    )
    assert result.code == 0, result.stderr
    assert result.json()["status"] == "replied"
    assert result.json()["reply"] == "Bonjour."
    request = scripted.requests_for("claude-test")[0]
    assert request.api == "anthropic"
    assert request.body["tool_choice"] == {"type": "any"}


async def test_status_and_history_show_the_task(
    worker, cli_env, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-test", final("Done."))
    session = f"s-{uuid.uuid4().hex[:6]}"
    env = {**cli_env, "ERRANDS_MODEL": "openai:gpt-test"}
    run = (await run_cli(env, "run", "hello", "--session", session, "--json")).json()
    status = await run_cli(env, "status", run["task_id"], "--json")
    assert status.json()["status"] == "replied"
    history = (await run_cli(env, "history", session, "--json")).json()
    assert [(m["id"], m["role"], m["text"]) for m in history["messages"]] == [
        (f"task:{run['task_id']}:user", "user", "hello"),
        (f"task:{run['task_id']}:reply", "assistant", "Done."),
    ]


async def test_a_429_is_retried_on_the_same_model_after_its_retry_after(
    client: Client, scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-test", Fail(429, "slow down", headers={"retry-after": "2"}), final("ok"))
    handle = await start("hi", model="openai:gpt-test", settings=FAST)
    result = await handle.result()
    assert result.status == "replied"
    first, second = scripted.requests_for("gpt-test")
    assert second.received_at - first.received_at >= 1.9
    events = await history_events(handle)
    started = events_of(events, ACTIVITY_STARTED)
    scheduled = events_of(events, ACTIVITY_SCHEDULED)
    round_step = next(
        i
        for i, e in enumerate(scheduled)
        if e.activity_task_scheduled_event_attributes.activity_type.name == "round_step"
    )
    step_started = next(
        e
        for e in started
        if e.activity_task_started_event_attributes.scheduled_event_id
        == scheduled[round_step].event_id
    )
    assert step_started.activity_task_started_event_attributes.attempt == 2
    waited = step_started.event_time.ToDatetime() - scheduled[round_step].event_time.ToDatetime()
    assert waited >= timedelta(seconds=1.9)
    assert result.usage.parts["rounds"]["openai:gpt-test"].failed_calls == 1
    await keep_history(client, handle.id, "retry_after_429")


async def test_a_500_is_retried(scripted: ScriptedModelServer, start: StartTask) -> None:
    scripted.script("gpt-test", Fail(500, "boom"), final("recovered"))
    handle = await start("hi", model="openai:gpt-test", settings=FAST)
    assert (await handle.result()).reply == "recovered"
    assert len(scripted.requests_for("gpt-test")) == 2


async def test_a_timeout_is_retried(scripted: ScriptedModelServer, start: StartTask) -> None:
    # The delay is the behaviour under test: a reply later than the model timeout.
    scripted.script("gpt-test", final("late", delay=6), final("on time"))
    quick = RoundSettings(model_timeout_seconds=3, model_max_attempts=3)
    handle = await start("hi", model="openai:gpt-test", settings=quick)
    assert (await handle.result()).reply == "on time"


async def test_a_401_fails_the_task_at_once_with_kind_credential(
    client: Client, worker, settings: Settings, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-test", Fail(401, "invalid api key"))
    handle = await start_task(
        client,
        settings.task_queue,
        "hi",
        model="openai:gpt-test",
        fallback_model="openai:gpt-fallback",
        settings=FAST,
    )
    result = await handle.result()
    assert result.status == "failed"
    assert result.error is not None and result.error.kind == "credential"
    assert "openai" in result.error.message and "OPENAI_API_KEY" in result.error.message
    assert len(scripted.requests) == 1, "no retry and no fallback on a dead credential"
    await keep_history(client, handle.id, "credential_401")


async def test_a_worker_without_a_key_fails_the_task_at_once_naming_the_variable(
    client: Client, settings: Settings, store: SessionStore, monkeypatch
) -> None:
    """No key anywhere: the SDK will not even build a client. That is a credential error,
    not a hiccup to retry six times and report as exhausted."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    keyless = settings.model_copy(
        update={"openai_api_key": None, "task_queue": f"keyless-{uuid.uuid4().hex[:6]}"}
    )
    router = ModelRouter(keyless)
    async with build_worker(client, keyless, store=store, router=router):
        handle = await start_task(
            client,
            keyless.task_queue,
            "hi",
            model="openai:gpt-test",
            fallback_model="openai:gpt-fallback",
            settings=FAST,
        )
        result = await handle.result()
    await router.aclose()
    assert result.status == "failed"
    assert result.error is not None and result.error.kind == "credential"
    assert "set OPENAI_API_KEY on the worker" in result.error.message
    attempts = [
        e.activity_task_started_event_attributes.attempt
        for e in events_of(await history_events(handle), ACTIVITY_STARTED)
    ]
    assert attempts == [1], "one attempt, no retry and no fallback"


async def test_narration_is_a_failed_attempt_and_the_fallback_answers(
    client: Client, scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-test", Reply(text="I will now answer the question."))
    scripted.script("gpt-fallback", final("fallback answer"))
    handle = await start(
        "hi",
        model="openai:gpt-test",
        fallback_model="openai:gpt-fallback",
    )
    result = await handle.result()
    assert result.reply == "fallback answer"
    assert result.steps == 2
    await keep_history(client, handle.id, "narration_then_fallback")


async def test_narration_on_every_slot_fails_the_task_as_exhausted(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    # Narration is repaired on the same slot (3 repairs), so it takes four narrations to fail.
    scripted.script("gpt-test", *[Reply(text="Sure, I can help with that.")] * 4)
    handle = await start("hi", model="openai:gpt-test")
    result = await handle.result()
    assert result.status == "failed" and result.error is not None
    assert result.error.kind == "exhausted"
    assert "finish_reason=stop" in result.error.message and "text length=27" in result.error.message


async def test_round_steps_retried_after_their_writes_landed_leave_each_message_once(
    client: Client, settings: Settings, store: SessionStore, scripted: ScriptedModelServer
) -> None:
    """Fault injection: the first attempt of every round step fails after its writes landed (the
    task's opening, the acknowledgement, the reply). The retry finds what it wrote and asks no
    model again; the branches run from the stored acknowledgement."""
    router = ModelRouter(settings)
    built = build_activities(store, router, load_types(settings.subtask_types))
    real_step = next(a for a in built if a.__name__ == "round_step")

    @activity.defn(name="round_step")
    async def round_step(data: RoundStepInput) -> RoundStepOutput:
        out = await real_step(data)
        if activity.info().attempt == 1:
            raise RuntimeError("injected: worker lost after the writes")
        return out

    queue = f"faults-{uuid.uuid4().hex[:6]}"
    activities = [round_step if a.__name__ == "round_step" else a for a in built]
    convo = Conversation(
        [delegate(general("one", 1), reply="Working on it."), final("exactly once")],
        lambda r: Reply(text="branch result"),
        branches=1,
    )
    async with Worker(client, task_queue=queue, workflows=WORKFLOWS, activities=activities):
        convo.install(scripted, "gpt-test")
        handle = await start_task(client, queue, "write me once", model="openai:gpt-test")
        result = await handle.result()
    await router.aclose()
    assert result.reply == "exactly once"
    assert len(convo.main_requests) == 2  # one model call a round: the retries asked none
    assert len(convo.branch_requests) == 1
    rows = store.list_session(result.session_id)
    assert [(r.id, r.text) for r in rows if r.kind != "branch"] == [
        (f"task:{result.task_id}:user", "write me once"),
        (f"task:{result.task_id}:round:0:ack", "Working on it."),
        (f"task:{result.task_id}:reply", "exactly once"),
    ]
    # Two attempts a round: the first made the round's one call and died after its writes,
    # which carry what the call spent; the retry charges it, as the event log counts it.
    rounds = result.usage.parts["rounds"]["openai:gpt-test"]
    assert (rounds.calls, rounds.failed_calls) == (2, 0)
    served = [r.reported_usage for r in convo.main_requests]
    assert all(u is not None and u.input_tokens > 0 for u in served)
    assert rounds.input_tokens == sum(u.input_tokens for u in served if u is not None)
    assert rounds.output_tokens == sum(u.output_tokens for u in served if u is not None)
    await keep_history(client, handle.id, "round_steps_retried_after_their_writes")


async def test_no_secret_reaches_the_history(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-test", final("fine"))
    scripted.script("claude-test", final("fine"))
    for model in ("openai:gpt-test", "anthropic:claude-test"):
        handle = await start("hi", model=model)
        await handle.result()
        exported = (await handle.fetch_history()).to_json()
        assert OPENAI_KEY not in exported and ANTHROPIC_KEY not in exported
    assert any(OPENAI_KEY in json.dumps(r.headers) for r in scripted.requests), "the key was used"


async def test_history_size_does_not_grow_with_the_session(
    store: SessionStore, scripted: ScriptedModelServer, start: StartTask
) -> None:
    sizes = {}
    summary_calls: list[Any] = []

    def answer(request: Any) -> Reply:
        # 500 messages of 2 KB (1 MB) outgrow the default 32,000-token window: compacted.
        if is_summary_call(request):
            summary_calls.append(request)
            return Reply(text="summary of the earlier messages")
        return final("a short reply")

    scripted.responder = answer
    try:
        for prior in (10, 500):
            session = f"long-{prior}-{uuid.uuid4().hex[:6]}"
            for i in range(prior):
                store.append_once(
                    NewMessage(
                        id=f"seed:{session}:{i}",
                        session_id=session,
                        role="user" if i % 2 == 0 else "assistant",
                        kind="user" if i % 2 == 0 else "reply",
                        text=f"{i:05d} " + "x" * 2042,
                    )
                )
            handle = await start("summarise", model="openai:gpt-test", session=session)
            result: TaskResult = await handle.result()
            assert result.status == "replied"
            sizes[prior] = await history_bytes(handle)
    finally:
        scripted.responder = None
    # The model saw the whole session, in the summary calls; no history carried it.
    assert sum(len(r.raw) for r in summary_calls) > 500 * 2000
    assert sizes[500] <= sizes[10] * 1.10, sizes
