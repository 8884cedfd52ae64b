"""The frontends of notifications (issue 27): ``Client.start(notify=…)``, ``POST …/tasks`` with
``notify``, ``errands run --notify`` and ``errands notifications``, against the real dev server,
a worker, the scripted model and the gateway served on loopback.

A task carries its targets by reference: the configured ones that hear its owner, then one
``stored:task:TASK:K`` per URL given, whose URL and fresh secret the store keeps before the task
starts; the secret is returned once, to whoever gave the URL. The deliveries a task made are
read from its event log, and those still trying from their delivery workflows.

The stack here has a session store of its own (API keys in it turn anonymous access off) and
its own ``ERRANDS_WEBHOOKS``. Every URL is on 192.0.2.0/24 (TEST-NET-1): a delivery the worker
attempts is refused before any connection, so no test reaches the network.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from errands.adapters.identity.keys import mint
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore, open_store
from errands.client import Client as ErrandsClient
from errands.client import Delivery, TaskHandle, task_input
from errands.contracts.events import NewEvent
from errands.contracts.notifications import (
    Notice,
    NotifyTarget,
    notice_workflow_id,
    notification_id,
    stored_target_id,
)
from errands.contracts.principals import Principal, Role
from errands.contracts.workflows import TaskInput
from errands.errors import InvalidRequest, TaskNotFound
from errands.gateway import create_app, serving
from errands.settings import Settings
from errands.workers import build_worker
from tests.conftest import run_cli
from tests.helpers import eventually, final

MODEL = "gpt-notify"
SECRET = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODk="  # 33 bytes, test only
WEBHOOKS = [
    {"name": "everyone", "url": "https://192.0.2.1/all", "secret": SECRET},
    {"name": "ops", "url": "https://192.0.2.2/ops", "secret": SECRET, "for": ["role:admin"]},
]
HOOK = "https://192.0.2.10/hook?token=t0k3n"


@dataclass
class Stack:
    settings: Settings
    store: SessionStore
    errands: ErrandsClient
    url: str
    keys: dict[str, str] = field(default_factory=dict)
    principals: dict[str, Principal] = field(default_factory=dict)

    def add(self, who: str, role: Role = "user") -> None:
        name = f"{who}-{uuid.uuid4().hex[:6]}"
        token, record = mint(name, role, datetime.now(UTC))
        self.store.add_principal(record)
        self.keys[who] = token
        self.principals[who] = Principal(id=name, role=role, via="key")

    def as_(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[who]}"}

    def acting(self, who: str) -> ErrandsClient:
        return self.errands.as_principal(self.principals[who])


@pytest.fixture(scope="module")
async def stack(
    client: Client, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    where: Path = tmp_path_factory.mktemp("notify")
    own = settings.model_copy(
        update={
            "task_queue": f"notify-{uuid.uuid4().hex[:6]}",
            "database_url": f"sqlite:///{where / 'sessions.db'}",
            "webhooks": json.dumps(WEBHOOKS),
        }
    )
    store = open_store(own.session_database_url())
    router = ModelRouter(own)
    try:
        async with build_worker(client, own, store=store, router=router):
            errands = ErrandsClient(client, own, store=store)
            async with serving(create_app(errands, token=None)) as url:
                stack = Stack(own, store, errands, url)
                stack.add("a")
                stack.add("b")
                stack.add("admin", "admin")
                yield stack
    finally:
        await router.aclose()
        store.close()


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as h:
        yield h


def session_id() -> str:
    return f"nf-{uuid.uuid4().hex[:8]}"


async def started_input(errands: ErrandsClient, task_id: str) -> TaskInput:
    """The input the task's workflow was started with: its first history event."""
    handle = errands.temporal.get_workflow_handle(task_id)
    async for event in handle.fetch_history_events():
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        [data] = await errands.temporal.data_converter.decode(payloads, [TaskInput])
        assert isinstance(data, TaskInput)
        return data
    raise AssertionError(f"task {task_id} has no history")


async def replied(task: TaskHandle) -> None:
    assert (await task.wait(timeout=60)).status == "replied"


@pytest.mark.parametrize(
    ("who", "configured"),
    [("a", ["config:everyone"]), ("admin", ["config:everyone", "config:ops"])],
)
async def test_a_start_with_notify_carries_the_owners_targets_and_a_stored_one_with_its_secret(
    stack: Stack, scripted: ScriptedModelServer, who: str, configured: list[str]
) -> None:
    scripted.script(MODEL, final("Done."))
    task = await stack.acting(who).start(
        "Tidy the notes", session=session_id(), model=f"openai:{MODEL}", notify=HOOK
    )
    [given] = task.notify_secrets
    assert given.url == HOOK and given.ref == f"stored:task:{task.task_id}:1"
    assert given.secret.startswith("whsec_") and given.secret != SECRET
    data = await started_input(stack.errands, task.task_id)
    assert [t.ref for t in data.notify] == [*configured, given.ref]
    assert all(
        t.events == ["waiting_for_user", "replied", "failed", "canceled"] for t in data.notify
    )
    row = stack.store.get(stored_target_id(given.ref)[1])
    assert row is not None and row.kind == "notify_target"
    assert row.text == HOOK and row.meta == {"secret": given.secret}
    history = [
        e
        async for e in stack.errands.temporal.get_workflow_handle(
            task.task_id
        ).fetch_history_events()
    ]
    assert given.secret not in str(history) and "t0k3n" not in str(history)
    await replied(task)
    again = stack.errands.task(task.task_id)
    assert again.notify_secrets == [], "the secret is on the handle start returned, only"


@pytest.mark.parametrize(
    "notify",
    [
        "ftp://192.0.2.10/hook",
        "hooks.example.com/errands",
        "https:///no-host",
        "https://user:pass@192.0.2.10/hook",
        "javascript:alert(1)",
        ["https://192.0.2.10/a", "https://192.0.2.10/a"],
        [f"https://192.0.2.10/{n}" for n in range(5)],
    ],
)
@pytest.mark.fast
def test_a_notify_url_errands_could_not_deliver_to_is_refused_naming_notify(
    notify: str | list[str],
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        task_input(Settings(), "Tidy the notes", notify=notify)
    assert refused.value.field == "notify"
    said = str(refused.value)
    assert "user:pass" not in said and "192.0.2.10" not in said, "a refusal never quotes the URL"


@pytest.mark.fast
def test_a_public_looking_or_private_url_passes_the_start_checked_only_at_delivery() -> None:
    urls = ["https://hooks.example.com/x?token=1", "http://10.0.0.5:8080/hook", HOOK]
    task_input(Settings(), "Tidy the notes", notify=urls)


async def test_a_malformed_notify_url_starts_nothing_and_stores_nothing(stack: Stack) -> None:
    task_id = f"task-{session_id()}"
    with pytest.raises(InvalidRequest, match="notify URL 2"):
        await stack.acting("a").start(
            "Tidy the notes",
            session=session_id(),
            model=f"openai:{MODEL}",
            task_id=task_id,
            notify=[HOOK, "ftp://192.0.2.10/hook"],
        )
    with pytest.raises(TaskNotFound):
        await stack.errands.task(task_id).describe()
    assert stack.store.get(stored_target_id(f"stored:task:{task_id}:1")[1]) is None


async def test_the_gateway_returns_each_secret_once_and_refuses_a_bad_url(
    stack: Stack, http: httpx.AsyncClient, scripted: ScriptedModelServer
) -> None:
    scripted.script(MODEL, final("Done."))
    urls = [HOOK, "https://192.0.2.11/other"]
    body = {"text": "Tidy the notes", "model": f"openai:{MODEL}", "notify": urls}
    response = await http.post(
        f"/v1/sessions/{session_id()}/tasks", json=body, headers=stack.as_("a")
    )
    assert response.status_code == 201, response.text
    created = response.json()
    task_id = created["task_id"]
    assert [n["url"] for n in created["notify"]] == urls
    for n, given in enumerate(created["notify"], 1):
        assert given["ref"] == f"stored:task:{task_id}:{n}"
        row = stack.store.get(stored_target_id(given["ref"])[1])
        assert row is not None and row.meta["secret"] == given["secret"]
    await replied(stack.errands.task(task_id))
    state = await http.get(f"/v1/tasks/{task_id}", headers=stack.as_("a"))
    assert state.status_code == 200
    assert not any(g["secret"] in state.text for g in created["notify"]), "shown once"
    bad = {**body, "notify": "ftp://192.0.2.10/hook"}
    refused = await http.post(
        f"/v1/sessions/{session_id()}/tasks", json=bad, headers=stack.as_("a")
    )
    assert refused.status_code == 422 and "notify" in refused.text


def events_of(task_id: str) -> list[NewEvent]:
    """A sent and a failed notification, as the delivery activity records them."""
    sent = notification_id(task_id, "question:0:1", "config:everyone")
    failed = notification_id(task_id, "replied", f"stored:task:{task_id}:1")
    return [
        NewEvent(
            task_id=task_id,
            key="notification:question:0:1:config:everyone",
            type="notification_sent",
            cause="question:0:1",
            data={
                "id": sent,
                "event": "waiting_for_user",
                "target": "config:everyone",
                "host": "192.0.2.1",
                "attempts": 3,
                "status": 200,
            },
        ),
        NewEvent(
            task_id=task_id,
            key=f"notification:replied:stored:task:{task_id}:1",
            type="notification_failed",
            cause="replied",
            data={
                "id": failed,
                "event": "replied",
                "target": f"stored:task:{task_id}:1",
                "host": "192.0.2.10",
                "attempts": 1,
                "detail": "final status 410 Gone",
            },
        ),
    ]


async def a_replied_task(stack: Stack, scripted: ScriptedModelServer, who: str) -> str:
    """A task of ``who`` that notifies nobody (its log holds only what a test appends)."""
    scripted.script(MODEL, final("Done."))
    acting = ErrandsClient(
        stack.errands.temporal,
        stack.settings.model_copy(update={"webhooks": None}),
        store=stack.store,
        acting=stack.principals[who],
    )
    task = await acting.start("Tidy the notes", session=session_id(), model=f"openai:{MODEL}")
    await replied(task)
    return task.task_id


async def test_errands_notifications_lists_a_sent_and_a_failed_delivery(
    stack: Stack, scripted: ScriptedModelServer, cli_env: dict[str, str]
) -> None:
    task_id = await a_replied_task(stack, scripted, "a")
    stack.store.append_events(events_of(task_id))
    env = {
        **cli_env,
        "ERRANDS_DATABASE_URL": stack.settings.session_database_url(),
        "ERRANDS_TASK_QUEUE": stack.settings.task_queue,
    }
    listed = await run_cli(env, "notifications", task_id, "--json")
    assert listed.code == 0, listed.stderr
    deliveries = listed.json()["deliveries"]
    assert [(d["event"], d["state"], d["attempts"]) for d in deliveries] == [
        ("waiting_for_user", "sent", 3),
        ("replied", "failed", 1),
    ]
    sent, failed = deliveries
    assert (sent["target"], sent["host"], sent["status"]) == ("config:everyone", "192.0.2.1", 200)
    assert sent["webhook_id"] == notification_id(task_id, "question:0:1", "config:everyone")
    assert (failed["target"], failed["detail"]) == (
        f"stored:task:{task_id}:1",
        "final status 410 Gone",
    )
    text = await run_cli(env, "notifications", task_id)
    assert text.code == 0, text.stderr
    lines = text.stdout.splitlines()
    assert len(lines) == 2
    assert "waiting_for_user → config:everyone (192.0.2.1) sent, 3 attempts: HTTP 200" in lines[0]
    assert "replied" in lines[1] and "failed, 1 attempt: final status 410 Gone" in lines[1]


async def test_a_delivery_still_trying_is_listed_from_its_delivery_workflow(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    task_id = await a_replied_task(stack, scripted, "a")
    notice = Notice(
        task_id=task_id,
        session_id="s",
        event="waiting_for_user",
        key="question:0:1",
        at=datetime.now(UTC),
        targets=[NotifyTarget(ref="config:everyone"), NotifyTarget(ref="config:ops")],
    )
    temporal = stack.errands.temporal
    # On a queue no worker polls: it stays running, as a delivery that keeps retrying does.
    delivery = await temporal.start_workflow(
        "NotificationWorkflow",
        notice,
        id=notice_workflow_id(task_id, notice.key),
        task_queue=f"nobody-{uuid.uuid4().hex[:6]}",
    )
    try:

        async def trying() -> list[Delivery]:
            return await stack.acting("a").notifications(task_id)

        found: list[Delivery] = await eventually(
            trying, "the running delivery workflow to be listed"
        )
        assert [(d.target, d.state, d.host) for d in found] == [
            ("config:everyone", "retrying", "192.0.2.1"),
            ("config:ops", "retrying", "192.0.2.2"),
        ]
        assert found[0].webhook_id == notification_id(task_id, notice.key, "config:everyone")
    finally:
        await delivery.terminate("test over")


async def test_user_b_cannot_read_user_as_notifications(
    stack: Stack, http: httpx.AsyncClient, scripted: ScriptedModelServer
) -> None:
    task_id = await a_replied_task(stack, scripted, "a")
    stack.store.append_events(events_of(task_id))
    path = f"/v1/tasks/{task_id}/notifications"
    mine = await http.get(path, headers=stack.as_("a"))
    assert mine.status_code == 200 and len(mine.json()["deliveries"]) == 2
    assert (await http.get(path, headers=stack.as_("admin"))).status_code == 200
    theirs = await http.get(path, headers=stack.as_("b"))
    missing = await http.get(f"/v1/tasks/task-{session_id()}/notifications", headers=stack.as_("b"))
    assert theirs.status_code == missing.status_code == 404
    with pytest.raises(TaskNotFound):
        await stack.acting("b").notifications(task_id)


async def test_errands_run_notify_prints_each_secret_once_on_stderr(
    stack: Stack, scripted: ScriptedModelServer, cli_env: dict[str, str]
) -> None:
    scripted.script(MODEL, final("Done."))
    env = {
        **cli_env,
        "ERRANDS_DATABASE_URL": stack.settings.session_database_url(),
        "ERRANDS_TASK_QUEUE": stack.settings.task_queue,
    }
    ran = await run_cli(
        env,
        "run",
        "--model",
        f"openai:{MODEL}",
        "--notify",
        HOOK,
        "--notify",
        "https://192.0.2.11/other",
        "--detach",
        "Tidy the notes",
    )
    assert ran.code == 0, ran.stderr
    task_id = ran.stdout.strip()
    await replied(stack.errands.task(task_id))
    assert "shown this once" in ran.stderr and "Standard Webhooks" in ran.stderr
    for n, url in enumerate([HOOK, "https://192.0.2.11/other"], 1):
        row = stack.store.get(stored_target_id(f"stored:task:{task_id}:{n}")[1])
        assert row is not None and row.text == url
        [line] = [line for line in ran.stderr.splitlines() if row.meta["secret"] in line]
        assert url in line
        assert ran.stderr.count(row.meta["secret"]) == 1
