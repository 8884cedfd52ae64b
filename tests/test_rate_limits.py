"""Shared rate limits (issue 14, item 6): a worker holds ``ERRANDS_PROVIDER_LIMITS`` across all
its branches, a provider's ``retry-after`` comes back jittered, and with
``ERRANDS_MODEL_TASK_QUEUE`` the model activities go through a task queue whose rate holds
across several workers."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from errands.adapters.devserver import DevServer
from errands.adapters.routing import ModelRouter, with_jitter
from errands.adapters.scripted import Fail, Gate, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.client import connect
from errands.contracts.messages import Message, ModelRequest
from errands.plugin import ErrandsPlugin
from errands.settings import Settings, load_settings
from errands.workers import build_worker
from tests.conftest import StartTask
from tests.helpers import (
    ACTIVITY_STARTED,
    Conversation,
    delegate,
    events_of,
    final,
    general,
    history_events,
    start_task,
    wait_for_pollers,
)

MODEL = "openai:gpt-limited"


class InServer:
    """Counts, as each call arrives, the calls in the server still unanswered (itself included),
    in all and per model: exact whatever the machine's load, since a call is answered (and
    leaves the count) before its client can send the next. The calls ``hold`` picks (all, by
    default) wait at ``gate`` until the test releases it; the others are answered at once."""

    def __init__(self, hold: Callable[[RecordedRequest], bool] = lambda request: True) -> None:
        self.gate = Gate("the calls in the server")
        self._through = Gate("the calls answered at once")
        self._through.release()
        self._hold = hold
        self.most: Counter[str] = Counter()
        self.most_in_all = 0

    def _in_server(self, model: str | None = None) -> int:
        return self.gate.in_server(model) + self._through.in_server(model)

    def __call__(self, request: RecordedRequest) -> Reply:
        self.most_in_all = max(self.most_in_all, self._in_server() + 1)
        mine = self._in_server(request.model) + 1
        self.most[request.model] = max(self.most[request.model], mine)
        return Reply(text="part done", hold=self.gate if self._hold(request) else self._through)


def eight_parts() -> Reply:
    return delegate(*(general(f"part {k}", 1) for k in range(8)))


def limited(settings: Settings, **changes: Any) -> Settings:
    return settings.model_copy(update={"task_queue": f"limits-{uuid.uuid4().hex[:6]}", **changes})


@pytest.fixture
async def limited_worker(
    client: Client, settings: Settings, store: SessionStore
) -> AsyncIterator[Settings]:
    own = limited(settings, provider_limits='{"openai": {"concurrency": 2}}')
    router = ModelRouter(own)
    async with build_worker(client, own, store=store, router=router):
        yield own
    await router.aclose()


async def test_a_concurrency_of_two_holds_a_round_of_eight_branches_to_two_requests_at_once(
    client: Client, limited_worker: Settings, scripted: ScriptedModelServer
) -> None:
    calls = InServer()
    convo = Conversation([eight_parts(), final("done")], calls, branches=8).install(
        scripted, "gpt-limited"
    )
    handle = await start_task(client, limited_worker.task_queue, "q", model=MODEL)
    await calls.gate.reached(2)
    calls.gate.release()
    assert (await handle.result()).reply == "done"
    assert len(convo.branch_requests) == 8
    assert calls.most_in_all == 2


async def test_without_a_limit_the_same_round_sends_its_eight_requests_at_once(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    calls = InServer()
    Conversation([eight_parts(), final("done")], calls, branches=8).install(scripted, "gpt-limited")
    handle = await start("q", model=MODEL)
    await calls.gate.reached(8)  # all eight in the server, none answered
    calls.gate.release()
    assert (await handle.result()).reply == "done"
    assert calls.most_in_all == 8


def request() -> ModelRequest:
    return ModelRequest(system="", messages=[Message(role="user", text="hi")])


async def test_a_models_own_limit_applies_beside_its_providers(
    settings: Settings, scripted: ScriptedModelServer
) -> None:
    own = limited(
        settings,
        provider_limits='{"openai": {"concurrency": 3}, "openai:gpt-limited": {"concurrency": 1}}',
    )
    # gpt-limited's calls go one at a time (and take the provider's slots while they wait),
    # so only gpt-other's are held: three of them fill the provider's three slots.
    calls = InServer(hold=lambda request: request.model == "gpt-other")
    scripted.script("gpt-limited", *[calls] * 3)
    scripted.script("gpt-other", *[calls] * 3)
    router = ModelRouter(own)
    try:
        sent = asyncio.gather(
            *(router.complete(MODEL, request(), timeout=30) for _ in range(3)),
            *(router.complete("openai:gpt-other", request(), timeout=30) for _ in range(3)),
        )
        await calls.gate.reached(3)
        calls.gate.release()
        await sent
    finally:
        await router.aclose()
    assert calls.most["gpt-limited"] == 1
    assert calls.most_in_all == 3


async def test_requests_per_minute_hold_starts_back_until_the_minute_has_room(
    settings: Settings, scripted: ScriptedModelServer
) -> None:
    own = limited(settings, provider_limits='{"openai": {"rpm": 2}}')
    scripted.script("gpt-limited", *[Reply(text="ok")] * 2)
    router = ModelRouter(own)
    try:
        await asyncio.gather(*(router.complete(MODEL, request(), timeout=30) for _ in range(2)))
        with pytest.raises(ApplicationError) as waited:
            await router.complete(MODEL, request(), timeout=2)
    finally:
        await router.aclose()
    assert waited.value.type == "transient" and not waited.value.non_retryable
    assert "ERRANDS_PROVIDER_LIMITS" in waited.value.message
    assert len(scripted.requests) == 2, "the third request was never sent"


async def test_retry_after_comes_back_jittered(
    settings: Settings, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-limited", *[Fail(429, "slow down", {"retry-after": "10"})] * 8)
    router = ModelRouter(settings)
    delays = []
    try:
        for _ in range(8):
            with pytest.raises(ApplicationError) as failure:
                await router.complete(MODEL, request(), timeout=30)
            assert failure.value.next_retry_delay is not None
            delays.append(failure.value.next_retry_delay.total_seconds())
    finally:
        await router.aclose()
    assert all(10 <= d <= 12 for d in delays), delays
    assert len(set(delays)) > 1, "not all at the same instant"


@pytest.mark.fast
def test_jitter_keeps_the_errors_posture() -> None:
    error = ApplicationError(
        "busy", {"provider": "openai"}, type="transient", next_retry_delay=timedelta(seconds=1)
    )
    jittered = with_jitter(error)
    assert (jittered.type, jittered.non_retryable, jittered.details) == (
        "transient",
        False,
        ({"provider": "openai"},),
    )
    assert 1 <= jittered.next_retry_delay.total_seconds() <= 2  # type: ignore[union-attr]
    plain = ApplicationError("gone", type="credential", non_retryable=True)
    assert with_jitter(plain) is plain


@pytest.mark.fast
def test_the_limits_setting_is_checked_when_it_is_read() -> None:
    from errands.errors import ConfigError

    for bad, says in [
        ("not json", "not JSON"),
        ('{"mistral": {"concurrency": 1}}', "neither a provider"),
        ('{"openai": {"concurrency": 0}}', "at least 1"),
        ('{"openai:gpt-4.1": {"queue_rate": 2}}', "only a provider key"),
    ]:
        with pytest.raises(ConfigError, match="ERRANDS_PROVIDER_LIMITS") as refused:
            load_settings(ERRANDS_PROVIDER_LIMITS=bad)
        assert says in str(refused.value)
    read = load_settings(
        ERRANDS_PROVIDER_LIMITS='{"openai": {"concurrency": 4, "rpm": 500, "queue_rate": 5}}',
        ERRANDS_MODEL_TASK_QUEUE="errands-models-{provider}",
    )
    assert read.limits()["openai"].concurrency == 4
    assert read.model_task_queues()["errands-models-openai"] == 5
    assert read.round_settings().model_task_queue == "errands-models-{provider}"


# -- across workers: the model task queue's own rate ------------------------------------------

RATE = 2.0


async def test_two_workers_on_a_rate_limited_model_queue_hold_the_rate_together(
    client: Client,
    dev_server: DevServer,
    settings: Settings,
    store: SessionStore,
    scripted: ScriptedModelServer,
) -> None:
    own = limited(settings, model_task_queue="{provider}-models-" + uuid.uuid4().hex[:6])
    (model_queue,) = [q for q in own.model_task_queues() if q.startswith("openai-")]
    routers = [ModelRouter(own) for _ in range(3)]
    # A client each, as two worker processes would have (one client polls a queue once).
    model_workers = [
        Worker(
            await connect(address=dev_server.address, embedded=True),
            task_queue=model_queue,
            activities=ErrandsPlugin(own).model_call_activities(store, router),
            max_task_queue_activities_per_second=RATE,
            identity=f"model-worker-{k}",
        )
        for k, router in enumerate(routers[1:])
    ]
    convo = Conversation(
        [eight_parts(), final("done")], lambda r: Reply(text="part done"), branches=8
    ).install(scripted, "gpt-limited")
    try:
        async with build_worker(client, own, store=store, router=routers[0]):
            async with model_workers[0], model_workers[1]:
                activity = TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
                await wait_for_pollers(client, model_queue, 2, kind=activity)
                started = time.monotonic()
                handle = await start_task(
                    client,
                    own.task_queue,
                    "q",
                    model=MODEL,
                    settings=own.round_settings(),
                )
                assert (await asyncio.wait_for(handle.result(), 60)).reply == "done"
                took = time.monotonic() - started
    finally:
        for router in routers:
            await router.aclose()
    times = sorted(r.received_at for r in scripted.requests)
    assert len(times) == 10
    # The server dispatches from a token bucket per queue partition (4 on the dev server): past
    # a burst of one per partition, no more than RATE starts a second, whichever worker polls.
    burst = 4
    for i in range(len(times)):
        for j in range(i + burst + 1, len(times)):
            assert j - i - burst <= RATE * (times[j] - times[i]) + 0.5, (i, j, times)
    assert took >= (len(times) - burst) / RATE * 0.8
    identities = set()
    for workflow_id in [handle.id] + [f"{handle.id}/r0/b{k}" for k in range(1, 9)]:
        events = await history_events(client.get_workflow_handle(workflow_id))
        identities |= {
            e.activity_task_started_event_attributes.identity
            for e in events_of(events, ACTIVITY_STARTED)
        }
    assert identities == {"model-worker-0", "model-worker-1"}
    assert convo.main_requests and len(convo.branch_requests) == 8
