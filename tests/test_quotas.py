"""Quotas (SPEC §10, issue 25): a start over running tasks, starts per hour or cost per day is
refused (429 with Retry-After over HTTP) and starts nothing; a task whose owner passes the daily
cost stops at the next round boundary, its branches' work delivered."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client as TemporalClient
from temporalio.worker import Worker

from activities._quotas import CostQuotas
from errands.adapters.identity.keys import mint
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore, TaskStart, open_store
from errands.agent.quotas import parse_quotas, seconds_to_next_day, seconds_until_hour_frees
from errands.cli import exit_code
from errands.client import Client, TaskHandle
from errands.client._quotas import check_start, quota_checked
from errands.contracts import search
from errands.contracts.messages import Usage
from errands.contracts.principals import Principal
from errands.errors import ConfigError, QuotaExceeded, TaskNotFound
from errands.gateway import create_app, serving
from errands.settings import Settings
from errands.workers import build_worker
from tests.helpers import (
    DATABASE,
    Conversation,
    ask,
    delegate,
    eventually,
    final,
    general,
    keep_history,
)
from tests.test_rounds import answer_branch

PRICES = {"openai:gpt-quota": {"input": 10.0, "output": 0.0}}
"""$10 per million input tokens: 1,000 tokens cost $0.01."""


def someone(name: str) -> Principal:
    """A principal of this test alone (the store and the server outlive a test)."""
    return Principal(id=f"{name}-{uuid.uuid4().hex[:6]}", via="key")


def limited(settings: Settings, quotas: dict[str, dict[str, float]], **update: object) -> Settings:
    return settings.model_copy(update={"quotas": json.dumps(quotas), **update})


async def owned_by(temporal: TemporalClient, owner: str) -> list[str]:
    """The task ids Temporal lists for ``owner`` (visibility: may lag a start)."""
    query = f"WorkflowType = 'TaskWorkflow' AND {search.owner_filter(owner)}"
    return [w.id async for w in temporal.list_workflows(query)]


async def cancel_all(tasks: list[TaskHandle]) -> None:
    for task in tasks:
        await task.cancel()
    for task in tasks:
        await task.wait(timeout=60)


# -- running tasks ------------------------------------------------------------------------------


async def test_a_third_running_task_gets_429_with_retry_after_and_nothing_starts(
    client: TemporalClient,
    settings: Settings,
    worker: Worker,
    scripted: ScriptedModelServer,
    tmp_path: Path,
) -> None:
    """With running_tasks: 2, over the real gateway, as a principal known by an API key. The
    gateway keeps its keys and starts in a store of its own: a key in the suite's store would
    make every other test's gateway ask for a token."""
    alice = someone("alice")
    token, record = mint(alice.id, "user", datetime.now(UTC))
    store = open_store(f"sqlite:///{tmp_path / 'gateway.db'}")
    store.add_principal(record)
    scripted.script("gpt-quota", ask(DATABASE), ask(DATABASE))
    errands = Client(client, limited(settings, {alice.id: {"running_tasks": 2}}), store=store)
    app = create_app(errands, token=None)
    headers = {"Authorization": f"Bearer {token}"}
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
        started = []
        for n in (1, 2):
            reply = await http.post(
                f"/v1/sessions/q-{uuid.uuid4().hex[:8]}/tasks",
                json={"text": f"task {n}", "model": "openai:gpt-quota"},
                headers=headers,
            )
            assert reply.status_code == 201, reply.text
            started.append(reply.json()["task_id"])
        third = await http.post(
            f"/v1/sessions/q-{uuid.uuid4().hex[:8]}/tasks",
            json={"text": "task 3", "model": "openai:gpt-quota"},
            headers=headers,
        )
    tasks = [errands.task(t) for t in started]
    try:
        assert third.status_code == 429, third.text
        assert third.headers["retry-after"] == "30"
        detail = third.json()["detail"]
        assert f"{alice.id} runs 2 tasks" in detail and "running_tasks: 2" in detail
        assert token not in third.text
        since = datetime.now(UTC) - timedelta(hours=1)
        assert [s.task_id for s in store.starts_since(alice.id, since)] == started

        async def both_listed() -> list[str] | None:
            ids = await owned_by(client, alice.id)
            return ids if len(ids) >= 2 else None

        listed = await eventually(both_listed, "both tasks in Temporal's visibility")
        assert sorted(listed) == sorted(started), "no third workflow exists"
    finally:
        await cancel_all(tasks)
        store.close()


async def test_starts_in_quick_succession_are_each_counted_though_visibility_lags(
    client: TemporalClient,
    settings: Settings,
    store: SessionStore,
    worker: Worker,
    scripted: ScriptedModelServer,
) -> None:
    """Three starts at once: the first two pass, the third is refused and its id names no task."""
    bob = someone("bob")
    scripted.script("gpt-quota", ask(DATABASE), ask(DATABASE))
    errands = Client(client, limited(settings, {bob.id: {"running_tasks": 2}}), store=store)
    as_bob = errands.as_principal(bob)
    ids = [f"quota-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    outcomes = await asyncio.gather(
        *(
            as_bob.start(f"task {n}", task_id=i, model="openai:gpt-quota")
            for n, i in enumerate(ids)
        ),
        return_exceptions=True,
    )
    started = [o for o in outcomes if isinstance(o, TaskHandle)]
    refused = [o for o in outcomes if isinstance(o, QuotaExceeded)]
    try:
        assert (len(started), len(refused)) == (2, 1), outcomes
        assert refused[0].quota == "running_tasks" and refused[0].retry_after == 30
        assert "wait for one to end or cancel one" in str(refused[0])
        loser = next(i for i, o in zip(ids, outcomes, strict=True) if isinstance(o, QuotaExceeded))
        with pytest.raises(TaskNotFound):
            await errands.task(loser).status()
    finally:
        await cancel_all(started)


# -- starts per hour ----------------------------------------------------------------------------


async def test_starts_per_hour_says_when_the_oldest_start_leaves_the_hour(
    client: TemporalClient, settings: Settings, store: SessionStore
) -> None:
    carol = someone("carol")
    now = datetime.now(UTC)
    for minutes in (59, 10):  # the first leaves the hour in about a minute
        store.record_start(
            TaskStart(
                task_id=f"old-{uuid.uuid4().hex[:8]}",
                owner=carol.id,
                session_id="s-old",
                started_at=now - timedelta(minutes=minutes),
            )
        )
    errands = Client(client, limited(settings, {"*": {"starts_per_hour": 2}}), store=store)
    task_id = f"quota-{uuid.uuid4().hex[:8]}"
    with pytest.raises(QuotaExceeded) as refused:
        await errands.as_principal(carol).start("one more", task_id=task_id)
    assert refused.value.quota == "starts_per_hour"
    assert 55 <= refused.value.retry_after <= 60
    assert f"{carol.id} started 2 tasks in the last hour" in str(refused.value)
    with pytest.raises(TaskNotFound):
        await errands.task(task_id).status()


# -- nothing limited, nothing counted -----------------------------------------------------------


@pytest.mark.fast
async def test_a_principal_no_quota_limits_costs_no_store_or_temporal_call(
    tmp_path: Path,
) -> None:
    """A client with no Temporal connection and a store not yet opened: checking a principal
    nothing limits passes and opens nothing; checking a limited one opens the store and needs
    Temporal."""
    database = tmp_path / "sessions.db"
    settings = Settings(
        ERRANDS_DATABASE_URL=f"sqlite:///{database}",
        ERRANDS_QUOTAS=json.dumps({"dave": {"running_tasks": 1}}),
    )
    async with Client(None, settings) as unconnected:
        await check_start(unconnected, Principal(id="erin"))
        async with quota_checked(unconnected, Principal(id="erin")):
            pass
        assert not database.exists(), "the store was never opened"
        with pytest.raises(ConfigError, match="connect it to Temporal"):
            await check_start(unconnected, Principal(id="dave"))
        assert database.exists()


# -- cost per day -------------------------------------------------------------------------------


async def test_a_task_over_its_owners_daily_cost_stops_at_the_next_round_with_its_branches_work(
    client: TemporalClient,
    settings: Settings,
    store: SessionStore,
    scripted: ScriptedModelServer,
) -> None:
    """cost_per_day_usd: 0.01. Round 0 and its two branches spend $0.012: round 1 is the final
    one (only final_reply, the model told why, with the branches' results) and the task replies."""
    erin = someone("erin")
    own = settings.model_copy(
        update={
            "task_queue": f"quota-{uuid.uuid4().hex[:8]}",
            "prices": json.dumps(PRICES),
            "quotas": json.dumps({erin.id: {"cost_per_day_usd": 0.01}}),
        }
    )
    convo = Conversation(
        [
            delegate(
                general("the north side", 1),
                general("the south side", 1),
                usage=Usage(input_tokens=600),
            ),
            final("Both sides, summed up."),
        ],
        lambda request: answer_branch(request, usage=Usage(input_tokens=300)),
        branches=2,
    ).install(scripted, "gpt-quota")
    router = ModelRouter(own)
    try:
        async with build_worker(client, own, store=store, router=router):
            errands = Client(client, own, store=store).as_principal(erin)
            result = await errands.run("Survey both sides", model="openai:gpt-quota")
    finally:
        await router.aclose()
    assert result.status == "replied" and result.reply == "Both sides, summed up."
    assert result.rounds == 2
    await keep_history(client, result.task_id, "over_quota_final_round")
    last = convo.main_requests[-1].body
    assert [t["function"]["name"] for t in last["tools"]] == ["final_reply"]
    instructions = last["messages"][0]["content"]
    assert f"{erin.id}'s tasks have spent $0.012 today (UTC)" in instructions
    assert "over the $0.01 a day ERRANDS_QUOTAS allows them (cost_per_day_usd)" in instructions
    shown = json.dumps(last["messages"])
    assert "result for: the north side" in shown and "result for: the south side" in shown
    # And the next start of theirs is refused until the next UTC day.
    with pytest.raises(QuotaExceeded) as refused:
        await errands.start("more", model="openai:gpt-quota")
    assert refused.value.quota == "cost_per_day_usd"
    assert abs(refused.value.retry_after - seconds_to_next_day(datetime.now(UTC))) <= 5
    assert "the $0.01 a day ERRANDS_QUOTAS allows (cost_per_day_usd)" in str(refused.value)


# -- the rules, without a server ----------------------------------------------------------------


@pytest.mark.fast
def test_the_retry_after_arithmetic() -> None:
    now = datetime(2026, 12, 2, 23, 59, 30, 250_000, tzinfo=UTC)
    assert seconds_to_next_day(now) == 30
    assert seconds_to_next_day(datetime(2026, 12, 2, tzinfo=UTC)) == 86_400
    assert seconds_until_hour_frees(now - timedelta(minutes=59), now) == 60
    assert seconds_until_hour_frees(now - timedelta(hours=2), now) == 1, "at least a second"


@pytest.mark.fast
def test_a_quota_refusal_exits_the_cli_with_2() -> None:
    assert exit_code(QuotaExceeded("over", quota="running_tasks", retry_after=30)) == 2


@pytest.mark.fast
def test_the_round_boundary_takes_the_owners_role_from_their_api_key(tmp_path: Path) -> None:
    """A role entry decides an owner's daily cost only through a live key of theirs (a worker
    knows the owner's id, not how they signed in); no cost quota configured: no query at all."""
    store = open_store(f"sqlite:///{tmp_path / 'sessions.db'}")
    try:
        _, record = mint("frank", "admin", datetime.now(UTC))
        store.add_principal(record)
        quotas = CostQuotas(parse_quotas('{"role:admin": {"cost_per_day_usd": 0}}'), {})
        assert quotas.over(store, "frank") == (
            "frank's tasks have spent $0.00 today (UTC), over the $0.00 a day ERRANDS_QUOTAS "
            "allows them (cost_per_day_usd)"
        )
        assert quotas.over(store, "grace") is None, "no key: no role, so no role's limit"
        assert quotas.over(store, None) is None
    finally:
        store.close()
    closed = CostQuotas(parse_quotas('{"*": {"running_tasks": 1}}'), {})
    assert closed.over(store, "frank") is None, "no cost quota: the closed store is not read"


# -- queued messages are starts too -------------------------------------------------------------


async def test_a_queued_message_counts_as_a_start_on_a_running_task_and_after_an_ended_one(
    client: TemporalClient,
    settings: Settings,
    store: SessionStore,
    worker: Worker,
    scripted: ScriptedModelServer,
) -> None:
    """A message queued on a running task becomes a task once it ends: refused when its sender
    has no start left this hour. Queued after a task ended, it starts at once, as a start of its
    sender's, recorded and counted."""
    dana = someone("dana")
    errands = Client(client, limited(settings, {dana.id: {"starts_per_hour": 2}}), store=store)
    as_dana = errands.as_principal(dana)
    scripted.script("gpt-quota", final("first"), final("queued after it"))
    first = await as_dana.start("first", model="openai:gpt-quota")
    assert (await first.wait(timeout=60)).reply == "first"
    receipt = await first.say("then this", mode="queue")
    assert receipt.status == "started" and receipt.task_id is not None
    queued = errands.task(receipt.task_id)
    assert (await queued.wait(timeout=60)).reply == "queued after it"
    since = datetime.now(UTC) - timedelta(hours=1)
    assert [s.task_id for s in store.starts_since(dana.id, since)] == [
        first.task_id,
        receipt.task_id,
    ]
    with pytest.raises(QuotaExceeded) as refused:
        await as_dana.start("a third", model="openai:gpt-quota")
    assert refused.value.quota == "starts_per_hour"

    erin = someone("erin")
    errands = Client(client, limited(settings, {erin.id: {"starts_per_hour": 1}}), store=store)
    scripted.script("gpt-quota", ask(DATABASE))
    running = await errands.as_principal(erin).start("asks", model="openai:gpt-quota")
    await eventually(running.pending_question, "the task to ask")
    try:
        with pytest.raises(QuotaExceeded) as refused:
            await running.say("and after it, this", mode="queue")
        assert refused.value.quota == "starts_per_hour"
        received = [e for e in store.list_events(running.task_id) if e.type == "message_received"]
        assert not received, "nothing was queued"
    finally:
        await cancel_all([running])


async def test_messages_queued_at_once_are_each_counted_and_the_task_one_becomes_keeps_its_count(
    client: TemporalClient,
    settings: Settings,
    store: SessionStore,
    worker: Worker,
    scripted: ScriptedModelServer,
) -> None:
    """With two starts an hour: a running task, then one message queued on it (the second
    start, recorded under the message's id), then a second message refused. When the task ends
    the queued message becomes a task and takes that record over: still two starts."""
    fay = someone("fay")
    errands = Client(client, limited(settings, {fay.id: {"starts_per_hour": 2}}), store=store)
    scripted.script("gpt-quota", ask(DATABASE), final("first done"), final("the queued one"))
    task = await errands.as_principal(fay).start("asks first", model="openai:gpt-quota")
    await eventually(task.pending_question, "the task to ask")
    queued = await task.say("then this", mode="queue")
    assert queued.status == "queued"
    since = datetime.now(UTC) - timedelta(hours=1)
    assert [s.task_id for s in store.starts_since(fay.id, since)] == [
        task.task_id,
        f"queued/{queued.message_id}",
    ]
    with pytest.raises(QuotaExceeded) as refused:
        await task.say("and this", mode="queue")
    assert refused.value.quota == "starts_per_hour"

    await task.answer({"q1": "PostgreSQL"})
    result = await task.wait(timeout=60)
    assert result.next_task is not None
    assert (await errands.task(result.next_task).wait(timeout=60)).reply == "the queued one"
    assert [s.task_id for s in store.starts_since(fay.id, since)] == [
        task.task_id,
        result.next_task,
    ], "the queued message's record became its task's, counted once"
