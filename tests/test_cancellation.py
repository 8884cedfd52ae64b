"""Cancellation reaches the wire, and a dead worker's call is seen dead by its heartbeats
(issue 14, item 5): model activities heartbeat while the provider call runs, so a task's cancel
closes its HTTP requests within seconds, and a killed worker's attempt fails by its heartbeat
timeout instead of its start-to-close timeout."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from temporalio.api.enums.v1 import TimeoutType
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import CancelledError

from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import Gate, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.contracts.workflows import RoundSettings
from errands.settings import Settings
from errands.workers import build_worker
from tests.conftest import ProcessWorkers, kill_worker, spawn_worker
from tests.helpers import (
    ACTIVITY_STARTED,
    Conversation,
    delegate,
    events_of,
    eventually,
    final,
    general,
    history_events,
    start_task,
)

MODEL = "openai:gpt-cancel"


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


async def test_cancelling_a_task_closes_its_held_model_request_within_three_seconds(
    client: Client, quick_worker: str, scripted: ScriptedModelServer
) -> None:
    held = Gate("the model call, never answered")
    scripted.script("gpt-cancel", final("too late", hold=held))
    handle = await start_task(client, quick_worker, "q", model=MODEL)
    await held.reached()
    cancelled_at = time.time()
    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert isinstance(failure.value.cause, CancelledError)
    await eventually(lambda: held.ended, "the held request to end", timeout=10)
    ended_at, was_cancelled = held.ended[0]
    assert was_cancelled, "the server saw the client drop the request, not a reply sent"
    assert ended_at - cancelled_at < 3, f"closed {ended_at - cancelled_at:.1f} s after the cancel"


async def test_cancelling_a_task_closes_its_branches_model_requests(
    client: Client, quick_worker: str, scripted: ScriptedModelServer
) -> None:
    held = Gate("the branches' model calls, never answered")
    Conversation(
        [delegate(general("part 1", 1), general("part 2", 1))],
        lambda r: Reply(text="too late", hold=held),
        branches=2,
    ).install(scripted, "gpt-cancel")
    handle = await start_task(client, quick_worker, "q", model=MODEL)
    await held.reached(2)
    cancelled_at = time.time()
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    await eventually(lambda: len(held.ended) == 2, "both held requests to end", timeout=10)
    assert all(cancelled for _, cancelled in held.ended)
    assert max(at for at, _ in held.ended) - cancelled_at < 3


async def test_a_killed_workers_model_call_is_retried_after_its_heartbeat_timeout(
    client: Client,
    settings: Settings,
    store: SessionStore,
    scripted: ScriptedModelServer,
    process_workers: ProcessWorkers,
) -> None:
    first_call = Gate("the first worker's model call, never answered")
    scripted.script("gpt-cancel", final("never sent", hold=first_call), final("survived"))
    queue = process_workers.queue
    first = spawn_worker(process_workers.env)
    handle = await start_task(
        client,
        queue,
        "q",
        model=MODEL,
        # The default start-to-close (300 s) would hold the dead attempt for five minutes.
        settings=RoundSettings(heartbeat_timeout_seconds=3),
    )
    try:
        await first_call.reached()
    finally:
        kill_worker(first)
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
    # The delay is the behaviour under test: a call longer than its heartbeat timeout.
    scripted.script("gpt-cancel", final("slow, alive", delay=5))
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
