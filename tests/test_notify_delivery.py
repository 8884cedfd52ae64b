"""Delivering a task's notifications (SPEC §11): ``NotificationWorkflow`` started directly with a
``Notice`` on the real dev server, its activities on a worker of the test's own, and receivers
on loopback (allowed through ``ERRANDS_WEBHOOK_ALLOW``). Signatures are checked by the Standard
Webhooks algorithm written here; a refusal is shown by a receiver that is never hit; what came
of each delivery is read from the task's event log."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import HttpUrl
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from activities._notify import commands
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.adapters.webhooks import new_secret
from errands.contracts.events import StoredEvent
from errands.contracts.messages import NewMessage
from errands.contracts.notifications import (
    Notice,
    NotifyEvent,
    NotifyTarget,
    notice_workflow_id,
    notification_id,
    stored_target_id,
    stored_target_ref,
)
from errands.settings import Settings
from errands.workers import build_worker
from tests.conftest import ProcessWorkers, kill_worker, spawn_worker, worker_process
from tests.helpers import (
    DATABASE,
    Conversation,
    ask,
    eventually,
    final,
    keep_history,
    start_task,
    until_waiting,
)
from tests.mcp_notes import Servers
from tests.test_work_tools import (
    MODEL,
    answer,
    call,
    delegating,
    pending_approval,
    told_branch,
)
from tests.webhook_receiver import LOOPBACK, receiving, verifies
from workflows._notify import span

SECRET = new_secret()
FINAL = ("notification_sent", "notification_failed")


def hooks(**urls: str) -> str:
    """``ERRANDS_WEBHOOKS`` naming each URL, all signed with ``SECRET``."""
    return json.dumps([{"name": name, "url": url, "secret": SECRET} for name, url in urls.items()])


@asynccontextmanager
async def notifier(
    client: Client,
    settings: Settings,
    store: SessionStore,
    *,
    allow: str | None = LOOPBACK,
    public_url: str | None = None,
    **urls: str,
) -> AsyncIterator[str]:
    """A worker on a queue of its own whose ``ERRANDS_WEBHOOKS`` names ``urls``; its queue."""
    own = settings.model_copy(
        update={
            "task_queue": f"notify-{uuid.uuid4().hex[:6]}",
            "webhook_allow": allow,
            "webhooks": hooks(**urls),
            "public_url": HttpUrl(public_url) if public_url else None,
        }
    )
    router = ModelRouter(own)
    try:
        async with build_worker(client, own, store=store, router=router):
            yield own.task_queue
    finally:
        await router.aclose()


def notice(
    *refs: str, event: NotifyEvent = "replied", key: str = "replied", retry_seconds: float = 600
) -> Notice:
    session = f"s-{uuid.uuid4().hex[:8]}"
    return Notice(
        task_id=f"task-{session}-1",
        session_id=session,
        event=event,
        key=key,
        at=datetime(2026, 12, 4, 8, 0, tzinfo=UTC),
        summary="Which database should the new service use?" if key != "replied" else None,
        targets=[NotifyTarget(ref=ref) for ref in refs],
        retry_seconds=retry_seconds,
    )


async def start(client: Client, queue: str, data: Notice) -> WorkflowHandle[Any, dict[str, str]]:
    return await client.start_workflow(
        "NotificationWorkflow",
        data,
        id=notice_workflow_id(data.task_id, data.key),
        task_queue=queue,
        result_type=dict[str, str],
    )


async def deliver(client: Client, queue: str, data: Notice) -> dict[str, str]:
    return await (await start(client, queue, data)).result()


def records(store: SessionStore, task_id: str) -> list[StoredEvent]:
    return [e for e in store.list_events(task_id) if e.type in FINAL]


def record_of(store: SessionStore, data: Notice, ref: str) -> dict[str, Any]:
    """The one record of ``data`` to ``ref``: its type and fields."""
    found = [e for e in records(store, data.task_id) if e.data["target"] == ref]
    assert len(found) == 1, found
    return {"type": found[0].type, **found[0].data}


async def test_a_receiver_failing_twice_gets_the_same_signed_notification_three_times(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    async with receiving(500, 500, 200) as receiver:
        url = receiver.url("/hook?token=tok-in-the-query")
        async with notifier(
            client, settings, store, public_url="https://errands.example.com", ops=url
        ) as queue:
            data = notice("config:ops", event="waiting_for_user", key="question:2:0")
            handle = await start(client, queue, data)
            assert await handle.result() == {"config:ops": "sent"}
            await keep_history(client, handle.id, "notification_retried")

    webhook_id = notification_id(data.task_id, data.key, "config:ops")
    assert [h.status for h in receiver.hits] == [500, 500, 200]
    assert {h.headers["webhook-id"] for h in receiver.hits} == {webhook_id}
    assert all(verifies(SECRET, h.headers, h.body) for h in receiver.hits)
    assert not verifies(new_secret(), receiver.hits[0].headers, receiver.hits[0].body)
    assert receiver.hits[0].json() == {
        "type": "task.waiting_for_user",
        "timestamp": "2026-12-04T08:00:00+00:00",
        "data": {
            "task_id": data.task_id,
            "session_id": data.session_id,
            "state": "waiting_for_user",
            "summary": "Which database should the new service use?",
            "links": {
                "task": f"https://errands.example.com/v1/tasks/{data.task_id}",
                "page": f"https://errands.example.com/#task={data.task_id}",
            },
            "commands": {
                "status": f"errands status {data.task_id}",
                "answer": f"errands answer {data.task_id}",
            },
        },
    }
    assert record_of(store, data, "config:ops") == {
        "type": "notification_sent",
        "id": webhook_id,
        "event": "waiting_for_user",
        "target": "config:ops",
        "host": LOOPBACK,
        "attempts": 3,
        "status": 200,
    }
    history = "".join(str(e) for e in (await handle.fetch_history()).events)
    for secret in (SECRET, SECRET.removeprefix("whsec_"), "tok-in-the-query"):
        assert secret not in history
        assert all(secret not in json.dumps(e.data) for e in store.list_events(data.task_id))


async def test_a_client_error_is_final_after_one_attempt(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    async with receiving(404) as receiver:
        async with notifier(client, settings, store, gone=receiver.url()) as queue:
            data = notice("config:gone")
            assert await deliver(client, queue, data) == {"config:gone": "failed"}
    assert len(receiver.hits) == 1
    found = record_of(store, data, "config:gone")
    assert (found["type"], found["attempts"], found["detail"]) == (
        "notification_failed",
        1,
        "404 Not Found",
    )
    assert "links" not in receiver.hits[0].json()["data"]  # no ERRANDS_PUBLIC_URL: no links


async def test_loopback_private_and_plain_http_targets_are_refused_without_a_connection(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    async with receiving(200) as receiver:
        named = {
            "plain": receiver.url(host="localhost"),
            "loopback": receiver.url(host="localhost").replace("http:", "https:"),
            "private": "https://10.1.2.3/hook",
            "public": "http://example.com/hook",
        }
        async with notifier(client, settings, store, allow=None, **named) as queue:
            data = notice(*(f"config:{name}" for name in named))
            outcome = await deliver(client, queue, data)
    assert outcome == {f"config:{name}": "failed" for name in named}
    assert receiver.hits == []
    details = {}
    for name in named:
        found = record_of(store, data, f"config:{name}")
        assert (found["type"], found["attempts"]) == ("notification_failed", 0), found
        details[name] = found["detail"]
    assert (
        details["plain"] == "refused: plain http:// to localhost; use https://, or allow the host"
    )
    # Refused after resolution: the first address localhost resolves to is named.
    assert details["loopback"] in {
        "refused: localhost resolves to 127.0.0.1, a loopback address",
        "refused: localhost resolves to ::1, a loopback address",
    }
    assert details["private"] == "refused: 10.1.2.3 is a private address"
    assert (
        details["public"]
        == "refused: plain http:// to example.com; use https://, or allow the host"
    )


async def test_a_redirect_from_an_allowed_receiver_is_not_followed(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    async with receiving(200) as elsewhere, receiving(302) as receiver:
        receiver.location = elsewhere.url(host="localhost")
        async with notifier(client, settings, store, moved=receiver.url()) as queue:
            data = notice("config:moved")
            assert await deliver(client, queue, data) == {"config:moved": "failed"}
    assert len(receiver.hits) == 1
    assert elsewhere.hits == []
    found = record_of(store, data, "config:moved")
    assert (found["type"], found["attempts"], found["detail"]) == (
        "notification_failed",
        1,
        "redirect (302) not followed",
    )


async def test_unknown_targets_fail_at_once_saying_what_is_missing(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    async with notifier(client, settings, store) as queue:
        data = notice("config:nobody", stored_target_ref("task-gone", 1))
        outcome = await deliver(client, queue, data)
    assert outcome == {"config:nobody": "failed", "stored:task-gone:1": "failed"}
    unknown = record_of(store, data, "config:nobody")
    assert unknown["detail"] == "the webhook 'nobody' is not in this worker's ERRANDS_WEBHOOKS"
    missing = record_of(store, data, "stored:task-gone:1")
    assert missing["detail"].startswith("the target was not found")
    for found in (unknown, missing):
        assert (found["type"], found["attempts"]) == ("notification_failed", 0)
        assert "host" not in found


async def test_a_stored_target_is_signed_with_its_own_secret(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    own_secret = new_secret()
    async with receiving(200) as receiver, notifier(client, settings, store) as queue:
        data = notice(stored_target_ref("task-stored", 1))
        ref = data.targets[0].ref
        session_id, message_id = stored_target_id(ref)
        store.append_once(
            NewMessage(
                id=message_id,
                session_id=session_id,
                role="system",
                kind="notify_target",
                text=receiver.url(f"/{uuid.uuid4().hex}"),
                meta={"secret": own_secret},
            )
        )
        assert await deliver(client, queue, data) == {ref: "sent"}
    (hit,) = receiver.hits
    assert verifies(own_secret, hit.headers, hit.body)
    assert not verifies(SECRET, hit.headers, hit.body)
    assert record_of(store, data, ref)["type"] == "notification_sent"


async def test_only_the_targets_that_want_the_event_are_notified(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    async with (
        receiving(200) as receiver,
        notifier(client, settings, store, a=receiver.url()) as queue,
    ):
        data = notice("config:a", event="failed", key="failed")
        data.targets.append(NotifyTarget(ref="config:quiet", events=["replied"]))
        data.targets.append(NotifyTarget(ref="config:a"))  # the same target twice: once
        assert await deliver(client, queue, data) == {"config:a": "sent"}
    assert len(receiver.hits) == 1
    assert [e.data["target"] for e in records(store, data.task_id)] == ["config:a"]


async def test_a_retry_window_that_closes_is_recorded_and_the_workflow_completes(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    async with receiving(503) as receiver:
        async with notifier(client, settings, store, down=receiver.url()) as queue:
            data = notice("config:down", retry_seconds=3)
            handle = await start(client, queue, data)
            assert await handle.result() == {"config:down": "failed"}
            assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
    assert len(receiver.hits) >= 2
    found = record_of(store, data, "config:down")
    assert found["type"] == "notification_failed"
    assert found["detail"] == "gave up after 3 s: last attempt 503 Service Unavailable"
    assert found["host"] == LOOPBACK
    assert found["attempts"] == len(receiver.hits)


async def test_a_receivers_retry_after_spaces_the_next_attempt(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    async with receiving(429, 200) as receiver:
        async with notifier(client, settings, store, busy=receiver.url()) as queue:
            data = notice("config:busy")
            assert await deliver(client, queue, data) == {"config:busy": "sent"}
    first, second = receiver.hits
    # Retry-After: 3, where the policy alone would have tried again after 1 s. A lower bound,
    # only: a loaded machine may take longer, never shorter.
    assert second.at - first.at >= 2.5
    assert record_of(store, data, "config:busy")["attempts"] == 2


# -- kill -9 of the worker between attempts -------------------------------------------------------


@contextmanager
def first_worker(env: dict[str, str]) -> Iterator[Any]:
    worker = spawn_worker(env)
    try:
        yield worker
    finally:
        if worker.poll() is None:
            kill_worker(worker)


async def test_kill_9_of_the_worker_between_attempts_still_delivers_once(
    client: Client, store: SessionStore, process_workers: ProcessWorkers
) -> None:
    killed = False

    def answer() -> int:
        # Nothing delivered before the kill: the 200 can only come from the new worker.
        return 200 if killed else 500

    async with receiving() as receiver:
        receiver.answer = answer
        env = {
            **process_workers.env,
            "ERRANDS_WEBHOOK_ALLOW": LOOPBACK,
            "ERRANDS_WEBHOOKS": hooks(ops=receiver.url()),
        }
        data = notice("config:ops")
        with first_worker(env) as first:
            handle = await start(client, process_workers.queue, data)
            await eventually(lambda: receiver.hits, "the first attempt", timeout=90)

            async def failed_once() -> bool:
                pending = (await handle.describe()).raw_description.pending_activities
                return any(a.HasField("last_failure") for a in pending)

            # The attempt's failure is with the server: the retry is what the next worker takes.
            await eventually(failed_once, "the first attempt's failure to reach the server")
            kill_worker(first)
            killed = True
        with worker_process(env):
            assert await handle.result() == {"config:ops": "sent"}

    assert {h.headers["webhook-id"] for h in receiver.hits} == {
        notification_id(data.task_id, data.key, "config:ops")
    }
    assert [h.status for h in receiver.hits][-1] == 200
    assert all(verifies(SECRET, h.headers, h.body) for h in receiver.hits)
    found = record_of(store, data, "config:ops")
    assert (found["type"], found["attempts"]) == ("notification_sent", len(receiver.hits))


# -- what a notification says (no server) ---------------------------------------------------------


@pytest.mark.fast
def test_an_approval_waiting_names_the_commands_that_approve_or_deny_it() -> None:
    data = notice("config:a", event="waiting_for_user", key="approval:call-7")
    assert commands(data) == {
        "status": f"errands status {data.task_id}",
        "approve": f"errands approve {data.task_id} --id call-7",
        "deny": f"errands deny {data.task_id} --id call-7",
    }
    assert commands(notice("config:a", event="canceled", key="canceled")).keys() == {"status"}


@pytest.mark.fast
def test_a_retry_window_is_named_in_the_unit_that_reads_best() -> None:
    assert [span(s) for s in (86400, 600, 3, 90, 1.5)] == ["24 h", "10 min", "3 s", "90 s", "1.5 s"]


# -- a task's own notifications ------------------------------------------------------------------


async def test_a_task_that_asks_then_replies_notifies_each_change_once(
    client: Client, settings: Settings, store: SessionStore, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-notify", ask(DATABASE), final("PostgreSQL it is."))
    async with (
        receiving(200) as receiver,
        notifier(client, settings, store, ops=receiver.url()) as queue,
    ):
        handle = await start_task(
            client,
            queue,
            "pick a database",
            model="openai:gpt-notify",
            notify=[NotifyTarget(ref="config:ops")],
        )
        status = await until_waiting(handle)
        await eventually(lambda: receiver.hits, "the waiting_for_user notification")
        qs_id = status.pending_question["id"]  # type: ignore[index]
        await handle.execute_update(
            "answer_question", {"question_set_id": qs_id, "answers": {"q1": ["PostgreSQL"]}}
        )
        assert (await handle.result()).reply == "PostgreSQL it is."
        await eventually(lambda: len(receiver.hits) == 2, "the replied notification")
        await keep_history(client, handle.id, "task_notified")

    waiting, replied = (hit.json() for hit in receiver.hits)
    assert (waiting["type"], replied["type"]) == ("task.waiting_for_user", "task.replied")
    assert waiting["data"]["summary"] == "Database"
    assert all(verifies(SECRET, h.headers, h.body) for h in receiver.hits)
    assert len({h.headers["webhook-id"] for h in receiver.hits}) == 2

    def both_recorded() -> list[StoredEvent]:
        found = records(store, handle.id)
        return found if len(found) == 2 else []

    sent = await eventually(both_recorded, "both deliveries in the task's log")
    assert [(e.type, e.data["event"]) for e in sent] == [
        ("notification_sent", "waiting_for_user"),
        ("notification_sent", "replied"),
    ]


async def test_two_calls_awaiting_approval_at_once_are_each_notified(
    client: Client,
    settings: Settings,
    store: SessionStore,
    scripted: ScriptedModelServer,
    servers: Servers,
) -> None:
    writes = [call("mcp__web__write", name=n, text="x") for n in ("left", "right")]
    Conversation(delegating(*writes), told_branch, branches=4).install(scripted, "gpt-tools")
    web = {**servers.config["web"], "approval": {"write": "ask"}}
    asking = settings.model_copy(update={"mcp_servers": json.dumps({"web": web})})
    async with (
        receiving(200) as receiver,
        notifier(client, asking, store, ops=receiver.url()) as queue,
    ):
        handle = await start_task(
            client, queue, "write both", model=MODEL, notify=[NotifyTarget(ref="config:ops")]
        )
        await eventually(lambda: len(receiver.hits) == 2, "a notification for each call")
        approved: list[str] = []
        for _ in range(2):  # the status shows one at a time
            other = approved[0] if approved else None
            pending = await pending_approval(handle, other_than=other)
            await answer(
                handle,
                approval_id=pending["approval_id"],
                decision="approve",
                arguments_sha256=pending["arguments_sha256"],
            )
            approved.append(pending["approval_id"])
        assert (await handle.result()).status == "replied"
        await eventually(lambda: len(receiver.hits) == 3, "the replied notification")
        await keep_history(client, handle.id, "task_notified_per_approval")

    sent = [hit.json() for hit in receiver.hits]
    assert [s["type"] for s in sent] == ["task.waiting_for_user"] * 2 + ["task.replied"]
    approve = {s["data"]["commands"]["approve"] for s in sent[:2]}
    assert approve == {f"errands approve {handle.id} --id {i}" for i in approved}
