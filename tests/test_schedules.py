"""Scheduled tasks on Temporal Schedules (SPEC §11, issue 27): each fire starts one task whose id
derives from the schedule and the fire time; overlap policies, trigger, pause, the catch-up
rule after a worker outage, ``show``, and ownership.

The time-skipping test server has no schedule service, so "a week passes" is a paused schedule
backfilled over one week on the dev server. Fires that must not reach a worker run on a task
queue no worker polls: Temporal starts a fire's workflow whether or not a worker is there.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI, Request
from temporalio.client import Client as TemporalClient
from temporalio.client import (
    ScheduleActionStartWorkflow,
    ScheduleBackfill,
    ScheduleOverlapPolicy,
    WorkflowExecutionStatus,
)
from temporalio.service import RPCError

from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.cli._schedules import add_command
from errands.client import Client
from errands.client._schedules import (
    add_schedule,
    delete_schedule,
    list_schedules,
    pause_schedule,
    resume_schedule,
    show_schedule,
    trigger_schedule,
)
from errands.contracts import search
from errands.contracts.principals import Principal
from errands.contracts.schedules import FireResult, ScheduledTask, fire_task_id, schedule_id
from errands.errors import Conflict, InvalidRequest, ScheduleNotFound
from errands.gateway._errors import install_handlers
from errands.gateway._schedules import schedules_router
from errands.settings import Settings
from errands.workers import build_worker
from tests.conftest import run_cli
from tests.helpers import DATABASE, ask, eventually, final, keep_history, until_waiting

MODEL = "openai:gpt-sched"
ALICE = Principal(id="alice", role="user")
BOB = Principal(id="bob", role="user")
ROOT = Principal(id="root", role="admin")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def queue_settings(settings: Settings, queue: str) -> Settings:
    return settings.model_copy(update={"task_queue": queue, "model": MODEL})


@asynccontextmanager
async def schedule_worker(
    client: TemporalClient, settings: Settings, store: SessionStore
) -> AsyncIterator[None]:
    """An errands worker on ``settings.task_queue``, its model router closed with it."""
    router = ModelRouter(settings)
    try:
        async with build_worker(client, settings, store=store, router=router):
            yield
    finally:
        await router.aclose()


@dataclass
class Stack:
    temporal: TemporalClient
    errands: Client
    settings: Settings
    store: SessionStore


@pytest.fixture
async def stack(
    client: TemporalClient, settings: Settings, store: SessionStore, model_server: object
) -> AsyncIterator[Stack]:
    """A worker with the schedules' workflow on a queue of this test's own."""
    mine = queue_settings(settings, unique("sched"))
    async with schedule_worker(client, mine, store):
        yield Stack(client, Client(client, mine, store=store), mine, store)


@pytest.fixture
def idle(client: TemporalClient, settings: Settings, store: SessionStore) -> Stack:
    """A queue nobody polls: fires start their workflows there and wait."""
    mine = queue_settings(settings, unique("idle"))
    return Stack(client, Client(client, mine, store=store), mine, store)


async def tasks_of(temporal: TemporalClient, name: str) -> list[str]:
    query = f'{search.SCHEDULE.name} = "{name}" AND WorkflowType = "TaskWorkflow"'
    return sorted([e.id async for e in temporal.list_workflows(query)])


async def fire_results(temporal: TemporalClient, name: str, count: int) -> list[FireResult]:
    query = f'WorkflowType = "ScheduleFireWorkflow" AND WorkflowId STARTS_WITH "fire-{name}-"'

    async def ended() -> list[str] | None:
        found = [
            e.id
            async for e in temporal.list_workflows(query)
            if e.status == WorkflowExecutionStatus.COMPLETED
        ]
        return found if len(found) >= count else None

    ids = await eventually(ended, f"{count} fires of {name} to end")
    return [
        await temporal.get_workflow_handle(i, result_type=FireResult).result() for i in sorted(ids)
    ]


async def terminate_fires(temporal: TemporalClient, name: str) -> None:
    query = f'WorkflowId STARTS_WITH "fire-{name}-" AND ExecutionStatus = "Running"'
    async for execution in temporal.list_workflows(query):
        try:
            await temporal.get_workflow_handle(execution.id).terminate("test over")
        except RPCError:
            pass


async def test_a_weekday_schedule_in_lisbon_fires_five_tasks_over_one_week(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    name = unique("week")
    scripted.script("gpt-sched", *[final(f"digest {n}") for n in range(5)])
    await add_schedule(
        stack.errands,
        name,
        "Summarise what changed",
        cron="0 8 * * 1-5",
        timezone="Europe/Lisbon",
        headless=True,
        paused=True,
    )
    monday = datetime(2026, 11, 2, tzinfo=UTC)  # Lisbon is on UTC in November
    await stack.temporal.get_schedule_handle(schedule_id(name)).backfill(
        ScheduleBackfill(
            start_at=monday,
            end_at=monday + timedelta(days=7),
            overlap=ScheduleOverlapPolicy.ALLOW_ALL,
        )
    )
    results = await fire_results(stack.temporal, name, 5)
    expected = [fire_task_id(name, monday + timedelta(days=d, hours=8)) for d in range(5)]
    assert sorted(r.task_id for r in results) == expected
    assert {r.status for r in results} == {"replied"}
    found = await eventually(
        lambda: _all(tasks_of(stack.temporal, name), 5), "the five tasks in visibility"
    )
    assert found == expected
    for task_id in expected:
        described = await stack.temporal.get_workflow_handle(task_id).describe()
        assert described.typed_search_attributes.get(search.SCHEDULE) == name
    view = await show_schedule(stack.errands, name)
    assert view.paused and view.timezone == "Europe/Lisbon" and view.cron == "0 8 * * 1-5"
    for fire in view.next_fires:  # next fires at 08:00 Lisbon time, whatever the offset
        at = datetime.fromisoformat(fire).astimezone(
            __import__("zoneinfo").ZoneInfo("Europe/Lisbon")
        )
        assert (at.hour, at.minute) == (8, 0) and at.weekday() < 5
    await delete_schedule(stack.errands, name)


async def _all(listing: object, count: int) -> list[str] | None:
    found: list[str] = await listing  # type: ignore[misc]
    return found if len(found) >= count else None


async def _first_task_waiting(stack: Stack, name: str) -> str:
    """Trigger a fire whose task asks a question, and wait until it waits for the answer."""
    await trigger_schedule(stack.errands, name)
    ids = await eventually(lambda: _all(tasks_of(stack.temporal, name), 1), "the first task")
    await until_waiting(stack.temporal.get_workflow_handle(ids[0]))
    return ids[0]


async def _next_second(after: float) -> None:
    """Until the wall clock's second is past ``after``'s (a fire's id has whole seconds)."""
    await eventually(lambda: int(time.time()) > int(after), "the next second", timeout=5)


async def test_by_default_a_fire_is_skipped_while_the_previous_task_still_runs(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    name = unique("skip")
    scripted.script("gpt-sched", ask(DATABASE), final("Going with PostgreSQL."))
    await add_schedule(stack.errands, name, "Set up the service", every=timedelta(days=1))
    await pause_schedule(stack.errands, name)
    first = await _first_task_waiting(stack, name)
    await _next_second(time.time())
    await trigger_schedule(stack.errands, name)

    async def skipped() -> bool:
        return (await show_schedule(stack.errands, name)).skipped_overlap >= 1

    await eventually(skipped, "the second fire to be skipped")
    await stack.errands.task(first).answer({"q1": ["PostgreSQL"]})
    [result] = await fire_results(stack.temporal, name, 1)
    assert (result.task_id, result.status) == (first, "replied")
    assert await tasks_of(stack.temporal, name) == [first]
    await delete_schedule(stack.errands, name)


async def test_buffer_one_holds_a_fire_until_the_previous_task_ends(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    name = unique("buf")
    scripted.script(
        "gpt-sched", ask(DATABASE), final("Going with PostgreSQL."), final("second run")
    )
    await add_schedule(
        stack.errands, name, "Set up the service", every=timedelta(days=1), overlap="buffer-one"
    )
    await pause_schedule(stack.errands, name)
    first = await _first_task_waiting(stack, name)
    await _next_second(time.time())
    await trigger_schedule(stack.errands, name)

    async def buffered() -> bool:
        return (await show_schedule(stack.errands, name)).buffered == 1

    await eventually(buffered, "the second fire to be buffered")
    assert await tasks_of(stack.temporal, name) == [first]
    await stack.errands.task(first).answer({"q1": ["PostgreSQL"]})
    results = await fire_results(stack.temporal, name, 2)
    assert [r.status for r in results] == ["replied", "replied"]
    assert results[0].task_id == first and results[1].task_id != first
    await delete_schedule(stack.errands, name)


async def test_cancel_previous_cancels_the_running_task_for_the_new_fire(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    name = unique("cancel")
    scripted.script("gpt-sched", ask(DATABASE), final("the new one"))
    await add_schedule(
        stack.errands,
        name,
        "Set up the service",
        every=timedelta(days=1),
        overlap="cancel-previous",
    )
    await pause_schedule(stack.errands, name)
    first = await _first_task_waiting(stack, name)
    await _next_second(time.time())
    await trigger_schedule(stack.errands, name)
    results = await fire_results(stack.temporal, name, 2)
    assert (await stack.errands.task(first).wait(timeout=60)).status == "canceled"
    second = [r for r in results if r.task_id != first]
    assert [r.status for r in second] == ["replied"], results
    await delete_schedule(stack.errands, name)


async def test_a_headless_scheduled_task_that_asks_goes_on_with_its_assumption(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    name = unique("headless")
    scripted.script("gpt-sched", ask(DATABASE), final("Assumed PostgreSQL."))
    await add_schedule(
        stack.errands, name, "Set up the service", cron="0 3 1 1 *", headless=True, paused=True
    )
    await trigger_schedule(stack.errands, name)
    [result] = await fire_results(stack.temporal, name, 1)
    assert result.status == "replied", "nobody answered: the task went on"
    assert (await stack.errands.task(result.task_id).wait()).reply == "Assumed PostgreSQL."
    await delete_schedule(stack.errands, name)


async def test_trigger_runs_one_now_and_show_lists_the_fire_with_its_task_and_outcome(
    stack: Stack, scripted: ScriptedModelServer, cli_env: dict[str, str]
) -> None:
    name = unique("now")
    scripted.script("gpt-sched", final("done now"))
    await add_schedule(stack.errands, name, "Do it now", cron="0 3 1 1 *", paused=True)
    await trigger_schedule(stack.errands, name)
    [result] = await fire_results(stack.temporal, name, 1)
    assert result.status == "replied" and result.task_id.startswith(f"task-{name}-")
    async for fire in stack.temporal.list_workflows(f'WorkflowId STARTS_WITH "fire-{name}-"'):
        await keep_history(stack.temporal, fire.id, "schedule_fire")
    reply = await stack.errands.task(result.task_id).wait()
    assert reply.reply == "done now"

    async def listed() -> list[object] | None:
        view = await show_schedule(stack.errands, name)
        return view.recent or None

    [fire] = await eventually(listed, "the fire in show")
    assert (fire.task_id, fire.outcome) == (result.task_id, "replied")
    # The command line shows the same: the fire, its task, its outcome.
    env = {**cli_env, "ERRANDS_TASK_QUEUE": stack.settings.task_queue}
    shown = await run_cli(env, "schedule", "show", name, "--json")
    assert shown.code == 0, shown.stderr
    fires = [(f["task_id"], f["outcome"]) for f in json.loads(shown.stdout)["recent"]]
    assert fires == [(result.task_id, "replied")]
    text = await run_cli(env, "schedule", "show", name)
    assert result.task_id in text.stdout and "replied" in text.stdout, text.stdout
    await delete_schedule(stack.errands, name)
    with pytest.raises(ScheduleNotFound):
        await show_schedule(stack.errands, name)


async def test_a_paused_schedule_fires_nothing_until_resumed(idle: Stack) -> None:
    paused, witness = unique("paused"), unique("witness")
    for name in (paused, witness):
        await add_schedule(
            idle.errands, name, "tick", every=timedelta(seconds=2), overlap="allow-all"
        )
    await pause_schedule(idle.errands, paused)
    try:
        assert (await show_schedule(idle.errands, paused)).paused

        async def witness_fired_twice() -> bool:
            view = await show_schedule(idle.errands, witness)
            return view.fires_total + view.skipped_overlap >= 2

        await eventually(witness_fired_twice, "two fires of the running schedule")
        view = await show_schedule(idle.errands, paused)
        assert (view.fires_total, view.skipped_overlap, view.buffered) == (0, 0, 0)
        await resume_schedule(idle.errands, paused)

        async def fired() -> bool:
            return (await show_schedule(idle.errands, paused)).fires_total >= 1

        await eventually(fired, "a fire once resumed")
        assert not (await show_schedule(idle.errands, paused)).paused
    finally:
        for name in (paused, witness):
            await delete_schedule(idle.errands, name)
            await terminate_fires(idle.temporal, name)


async def test_a_fire_that_first_runs_past_its_catch_up_window_is_missed(
    idle: Stack, store: SessionStore, model_server: object
) -> None:
    name = unique("late")
    await add_schedule(
        idle.errands,
        name,
        "Too late",
        cron="0 3 1 1 *",
        paused=True,
        catchup=timedelta(seconds=10),
    )
    await trigger_schedule(idle.errands, name)

    async def running() -> list[str] | None:
        return (await show_schedule(idle.errands, name)).running or None

    [fire_id] = await eventually(running, "the fire's workflow, with no worker to run it")
    started = (await idle.temporal.get_workflow_handle(fire_id).describe()).start_time
    assert started is not None
    # The worker outage: time is the behaviour here, the window being 10 s.
    await eventually(
        lambda: datetime.now(UTC) > started + timedelta(seconds=11),
        "the window to pass",
        timeout=30,
    )
    async with schedule_worker(idle.temporal, idle.settings, store):
        [result] = await fire_results(idle.temporal, name, 1)
    assert result.status == "missed" and result.late_seconds > 10
    with pytest.raises(RPCError):
        await idle.temporal.get_workflow_handle(result.task_id).describe()
    await delete_schedule(idle.errands, name)


async def test_another_principals_schedule_is_not_found(idle: Stack) -> None:
    name = unique("mine")
    alice, bob = idle.errands.as_principal(ALICE), idle.errands.as_principal(BOB)
    await add_schedule(alice, name, "Alice's digest", cron="0 8 * * 1-5", paused=True)
    try:
        for call in (show_schedule, pause_schedule, trigger_schedule, delete_schedule):
            with pytest.raises(ScheduleNotFound):
                await call(bob, name)
        assert (await show_schedule(alice, name)).owner == "alice"
        assert (await show_schedule(idle.errands.as_principal(ROOT), name)).owner == "alice"

        async def listed_for_alice() -> bool:
            return name in [v.name for v in await list_schedules(alice)]

        await eventually(listed_for_alice, "alice's schedule in her list")
        assert name not in [v.name for v in await list_schedules(bob)]
    finally:
        await delete_schedule(alice, name)


async def test_bad_schedules_are_refused_with_what_to_fix(idle: Stack) -> None:
    with pytest.raises(InvalidRequest, match="time zone") as bad_zone:
        await add_schedule(
            idle.errands, unique("tz"), "x", cron="0 8 * * *", timezone="Mars/Olympus"
        )
    assert bad_zone.value.field == "timezone"
    with pytest.raises(InvalidRequest) as bad_cron:
        await add_schedule(idle.errands, unique("cron"), "x", cron="every full moon")
    assert bad_cron.value.field == "cron"
    with pytest.raises(InvalidRequest, match="either cron"):
        await add_schedule(idle.errands, unique("both"), "x", cron="0 8 * * *", every=timedelta(1))
    with pytest.raises(InvalidRequest, match="schedule name"):
        await add_schedule(idle.errands, "no spaces", "x", cron="0 8 * * *")
    with pytest.raises(ScheduleNotFound, match="no schedule"):
        await show_schedule(idle.errands, unique("missing"))


@pytest.mark.fast
def test_the_schedule_command_parses_each_action() -> None:
    parser = argparse.ArgumentParser(prog="errands")
    add_command(parser.add_subparsers(required=True))
    args = parser.parse_args(
        ["schedule", "add", "digest", "--cron", "0 8 * * 1-5", "--timezone", "Europe/Lisbon"]
        + ["--overlap", "buffer-one", "--headless", "--json", "Summarise what changed"]
    )
    assert (args.name, args.cron, args.timezone, args.overlap) == (
        "digest",
        "0 8 * * 1-5",
        "Europe/Lisbon",
        "buffer-one",
    )
    assert args.headless and args.json and args.text == "Summarise what changed"
    for action in ("show", "pause", "resume", "trigger", "delete"):
        assert parser.parse_args(["schedule", action, "digest"]).name == "digest"
    with pytest.raises(SystemExit):
        parser.parse_args(["schedule", "add", "x", "--cron", "* * * * *", "--every", "1h", "t"])


async def test_the_gateway_routes_act_as_the_caller(stack: Stack) -> None:
    name = unique("http")
    callers = {"alice": stack.errands.as_principal(ALICE), "bob": stack.errands.as_principal(BOB)}
    app = FastAPI()
    install_handlers(app)

    def acting(request: Request) -> Client:
        return callers[request.headers["x-who"]]

    app.include_router(schedules_router(acting), prefix="/v1")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        as_alice, as_bob = {"x-who": "alice"}, {"x-who": "bob"}
        body = {"name": name, "text": "Weekly digest", "every": "7d", "paused": True}
        created = await http.post("/v1/schedules", json=body, headers=as_alice)
        assert created.status_code == 201, created.text
        assert created.json()["schedule_id"] == f"errands-{name}"
        shown = await http.get(f"/v1/schedules/{name}", headers=as_alice)
        assert shown.json()["paused"] and shown.json()["every_seconds"] == 7 * 86400
        assert (await http.get(f"/v1/schedules/{name}", headers=as_bob)).status_code == 404
        bad = {**body, "name": unique("bad"), "every": "soon"}
        refused = await http.post("/v1/schedules", json=bad, headers=as_alice)
        assert refused.status_code == 422
        again = await http.post("/v1/schedules", json=body, headers=as_alice)
        assert again.status_code == 409
        resumed = await http.post(f"/v1/schedules/{name}/resume", headers=as_alice)
        assert resumed.status_code == 204
        assert not (await http.get(f"/v1/schedules/{name}", headers=as_alice)).json()["paused"]
        assert (await http.delete(f"/v1/schedules/{name}", headers=as_bob)).status_code == 404
        assert (await http.delete(f"/v1/schedules/{name}", headers=as_alice)).status_code == 204
        assert (await http.get(f"/v1/schedules/{name}", headers=as_alice)).status_code == 404


async def test_a_schedules_notify_url_is_kept_in_the_store_and_its_fires_carry_the_ref(
    idle: Stack,
) -> None:
    name = unique("hook")
    url = "https://hooks.example.com/errands/digest"
    added = await add_schedule(
        idle.errands, name, "Digest", cron="0 8 * * 1-5", paused=True, notify=[url]
    )
    try:
        [given] = added.notify_secrets
        assert given["ref"] == f"stored:schedule:{name}:1" and given["url"] == url
        row = idle.store.get(f"notify:{given['ref']}")
        assert row is not None and row.text == url and row.meta["secret"] == given["secret"]
        described = await idle.temporal.get_schedule_handle(schedule_id(name)).describe()
        action = described.schedule.action
        assert isinstance(action, ScheduleActionStartWorkflow)
        [task] = await idle.temporal.data_converter.decode(action.args, [ScheduledTask])  # type: ignore[arg-type]
        assert [t.ref for t in task.notify] == [given["ref"]]
        assert given["secret"] not in task.model_dump_json()
    finally:
        await delete_schedule(idle.errands, name)


async def test_a_name_taken_is_a_conflict_that_keeps_no_new_secret(idle: Stack) -> None:
    name = unique("taken")
    await add_schedule(idle.errands, name, "Digest", cron="0 8 * * 1-5", paused=True)
    try:
        with pytest.raises(Conflict, match="exists already; delete it first"):
            await add_schedule(
                idle.errands,
                name,
                "Other",
                cron="0 9 * * *",
                paused=True,
                notify=["https://hooks.example.com/other"],
            )
        # The name was checked before any secret was made: no target is kept under it.
        assert idle.store.get(f"notify:stored:schedule:{name}:1") is None
    finally:
        await delete_schedule(idle.errands, name)
