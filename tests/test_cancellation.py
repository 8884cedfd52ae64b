"""Cancellation reaches the wire, and a dead worker's call is seen dead by its heartbeats
(issue 14, item 5): model activities heartbeat while the provider call runs, so a task's cancel
closes its HTTP requests within seconds, and a killed worker's attempt fails by its heartbeat
timeout instead of its start-to-close timeout."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from temporalio.api.enums.v1 import TimeoutType
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import CancelledError

from errands.adapters.devserver import DevServer
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import Call, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.contracts.workflows import RoundSettings
from errands.settings import Settings
from errands.workers import build_worker
from tests.helpers import ACTIVITY_STARTED, Conversation, events_of, history_events, start_task
from tests.test_worker_crash import spawn_worker, worker_env

MODEL = "openai:gpt-cancel"


@dataclass
class Held:
    """Requests the scripted server holds, and when the server saw each one end: its handler
    is cancelled when the client drops the connection (the server runs aiohttp with
    ``handler_cancellation``), and finishes normally when the reply went out."""

    ends: list[tuple[float, bool]] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)

    def hold(self, reply: Reply) -> Reply:
        # Called inside the server's request handler: its task is that request's.
        handler = asyncio.current_task()
        assert handler is not None
        self.arrivals.append(time.time())
        handler.add_done_callback(lambda t: self.ends.append((time.time(), t.cancelled())))
        return reply


@pytest.fixture
async def quick_worker(
    client: Client, settings: Settings, store: SessionStore
) -> AsyncIterator[str]:
    """A worker on a queue of its own that sends a heartbeat at least every 2 s, as the
    errands worker does: the throttle bounds how soon a cancellation reaches an activity."""
    queue = f"cancel-{uuid.uuid4().hex[:6]}"
    router = ModelRouter(settings)
    own = settings.model_copy(update={"task_queue": queue})
    async with build_worker(
        client,
        own,
        store=store,
        router=router,
        max_heartbeat_throttle_interval=timedelta(seconds=2),
    ):
        yield queue
    await router.aclose()


async def until(predicate, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.05)


async def test_cancelling_a_task_closes_its_held_model_request_within_three_seconds(
    client: Client, quick_worker: str, scripted: ScriptedModelServer
) -> None:
    held = Held()
    final = Reply(calls=[Call("final_reply", {"text": "too late"})], delay=10)
    scripted.script("gpt-cancel", lambda r: held.hold(final))
    handle = await start_task(client, quick_worker, "q", model=MODEL)
    await until(lambda: held.arrivals)
    await asyncio.sleep(0.5)  # the call is well under way
    cancelled_at = time.time()
    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert isinstance(failure.value.cause, CancelledError)
    await until(lambda: held.ends, timeout=10)
    ended_at, was_cancelled = held.ends[0]
    assert was_cancelled, "the server saw the client drop the request, not a reply sent"
    assert ended_at - cancelled_at < 3, f"closed {ended_at - cancelled_at:.1f} s after the cancel"


async def test_cancelling_a_task_closes_its_branches_model_requests(
    client: Client, quick_worker: str, scripted: ScriptedModelServer
) -> None:
    held = Held()
    subtasks = [{"type": "general", "prompt": f"part {k}", "references": [1]} for k in (1, 2)]
    convo = Conversation(
        [Reply(calls=[Call("delegate", {"reply": "On it.", "subtasks": subtasks})])],
        lambda r: held.hold(Reply(text="too late", delay=10)),
        branches=2,
    ).install(scripted, "gpt-cancel")
    handle = await start_task(client, quick_worker, "q", model=MODEL)
    await until(lambda: len(convo.branch_requests) == 2)
    await asyncio.sleep(0.5)
    cancelled_at = time.time()
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    await until(lambda: len(held.ends) == 2, timeout=10)
    assert all(cancelled for _, cancelled in held.ends)
    assert max(at for at, _ in held.ends) - cancelled_at < 3


async def test_a_killed_workers_model_call_is_retried_after_its_heartbeat_timeout(
    client: Client,
    dev_server: DevServer,
    database_url: str,
    settings: Settings,
    store: SessionStore,
    model_server: ScriptedModelServer,
    scripted: ScriptedModelServer,
) -> None:
    queue = f"killed-{uuid.uuid4().hex[:6]}"
    asked: list[RecordedRequest] = []

    def answer(request: RecordedRequest) -> Reply:
        asked.append(request)
        if len(asked) == 1:
            return Reply(calls=[Call("final_reply", {"text": "never sent"})], delay=60)
        return Reply(calls=[Call("final_reply", {"text": "survived"})])

    scripted.script("gpt-cancel", answer, answer)
    first = spawn_worker(worker_env(dev_server, queue, database_url, model_server))
    handle = await start_task(
        client,
        queue,
        "q",
        model=MODEL,
        # The default start-to-close (300 s) would hold the dead attempt for five minutes.
        settings=RoundSettings(heartbeat_timeout_seconds=3),
    )
    try:
        await until(lambda: asked, timeout=60)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    killed_at = time.monotonic()
    router = ModelRouter(settings)
    async with build_worker(
        client, settings.model_copy(update={"task_queue": queue}), store=store, router=router
    ):
        result = await asyncio.wait_for(handle.result(), 60)
    await router.aclose()
    assert result.reply == "survived"
    assert time.monotonic() - killed_at < 30, "retried by the heartbeat timeout"
    started = [
        e.activity_task_started_event_attributes
        for e in events_of(await history_events(handle), ACTIVITY_STARTED)
    ]
    assert [s.attempt for s in started] == [2]
    timeout = started[0].last_failure.timeout_failure_info.timeout_type
    assert timeout == TimeoutType.TIMEOUT_TYPE_HEARTBEAT


async def test_a_call_longer_than_its_heartbeat_timeout_is_kept_alive_by_its_heartbeats(
    client: Client, worker, settings: Settings, scripted: ScriptedModelServer
) -> None:
    slow = Reply(calls=[Call("final_reply", {"text": "slow, alive"})], delay=5)
    scripted.script("gpt-cancel", slow)
    handle = await start_task(
        client,
        settings.task_queue,
        "q",
        model=MODEL,
        settings=RoundSettings(heartbeat_timeout_seconds=2),
    )
    assert (await handle.result()).reply == "slow, alive"
    started = events_of(await history_events(handle), ACTIVITY_STARTED)
    assert [e.activity_task_started_event_attributes.attempt for e in started] == [1]
