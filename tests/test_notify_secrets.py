"""No secret of a notification in any history, event or log line (issue 27, acceptance 5).

One worker whose ``ERRANDS_WEBHOOKS`` signs with its own secret; a task given a URL of its own
(a secret returned once); a schedule given another (a third secret). The task asks, is answered
and replies; the schedule fires once and its task replies; every notification is delivered to a
receiver on loopback. Then every history started meanwhile (tasks, their delivery workflows,
the fire), with each payload decoded, every event of the tasks, and every log line of this
process (the worker's included) are scanned for the three secrets and the tokens in the URLs'
paths.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import Client

from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.client import Client as ErrandsClient
from errands.settings import Settings
from errands.workers import build_worker
from tests.helpers import DATABASE, ask, eventually, final
from tests.webhook_receiver import LOOPBACK, receiving

MODEL = "gpt-notify-secrets"


def secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(32)).decode()


def texts(value: Any) -> Iterator[str]:
    """Every string in a history's JSON, and each payload's data decoded from base64."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "data" and isinstance(item, str):
                try:
                    yield base64.b64decode(item).decode("utf-8", "replace")
                except ValueError:
                    pass
            yield from texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from texts(item)
    elif isinstance(value, str):
        yield value


async def test_no_notification_secret_reaches_a_history_an_event_or_a_log_line(
    client: Client,
    settings: Settings,
    store: SessionStore,
    scripted: ScriptedModelServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    since = datetime.now(UTC)
    configured, tokens = secret(), [f"tok{uuid.uuid4().hex}" for _ in range(3)]
    scripted.script(MODEL, ask(DATABASE), final("PostgreSQL it is."), final("Digest sent."))
    async with receiving() as receiver:
        base = f"http://{LOOPBACK}:{receiver.port}"
        own = settings.model_copy(
            update={
                "task_queue": f"secrets-{uuid.uuid4().hex[:6]}",
                "webhook_allow": LOOPBACK,
                "webhooks": json.dumps(
                    [{"name": "ops", "url": f"{base}/ops/{tokens[0]}", "secret": configured}]
                ),
            }
        )
        router = ModelRouter(own)
        try:
            async with build_worker(client, own, store=store, router=router):
                errands = ErrandsClient(client, own, store=store)
                task = await errands.start(
                    "pick a database", model=f"openai:{MODEL}", notify=f"{base}/task/{tokens[1]}"
                )
                [given] = task.notify_secrets
                await eventually(
                    lambda: _waiting(task), "the task to wait for its answer", timeout=60
                )
                await task.answer({"q1": "PostgreSQL"})
                assert (await task.wait(timeout=60)).status == "replied"

                name = f"secrets-{uuid.uuid4().hex[:6]}"
                added = await errands.add_schedule(
                    name,
                    "send the digest",
                    every=timedelta(hours=1),
                    model=f"openai:{MODEL}",
                    notify=f"{base}/schedule/{tokens[2]}",
                    paused=True,
                )
                [scheduled] = added.notify_secrets
                await errands.trigger_schedule(name)
                fired = await eventually(
                    lambda: _replied_fire(errands, name), "the fire's task to reply", timeout=60
                )
                # The task: ops and its own URL hear waiting and replied; the fire's task: ops
                # and the schedule's URL hear replied.
                await eventually(lambda: len(receiver.hits) >= 6, "every notification", timeout=60)
        finally:
            await router.aclose()

    secrets = [configured, given.secret, scheduled["secret"], *tokens]
    assert all(len(s) > 20 for s in secrets)
    scanned: dict[str, int] = {}
    async for execution in client.list_workflows(f'StartTime >= "{since.isoformat()}"'):
        history = await client.get_workflow_handle(
            execution.id, run_id=execution.run_id
        ).fetch_history()
        found = " ".join(texts(json.loads(history.to_json())))
        assert not [s for s in secrets if s in found], f"a secret in the history of {execution.id}"
        scanned[execution.workflow_type] = scanned.get(execution.workflow_type, 0) + 1
    assert scanned.get("TaskWorkflow", 0) >= 2, scanned
    assert scanned.get("NotificationWorkflow", 0) >= 3, scanned
    assert scanned.get("ScheduleFireWorkflow", 0) >= 1, scanned

    for task_id in (task.task_id, fired):
        events = store.list_events(task_id)
        assert {"notification_sent"} <= {e.type for e in events}
        logged = json.dumps([e.model_dump(mode="json") for e in events])
        assert not [s for s in secrets if s in logged], f"a secret in the events of {task_id}"

    assert any(r.name == "httpx" for r in caplog.records), "no delivery was logged to scan"
    # The receiver's own access log (aiohttp's) is the receiver's business, not errands'.
    ours = [r for r in caplog.records if r.name != "aiohttp.access"]
    leaked = {
        (r.name, r.getMessage()[:200]) for r in ours if any(s in r.getMessage() for s in secrets)
    }
    assert not leaked, f"a secret in a log line: {leaked}"


async def _waiting(task: Any) -> bool:
    return (await task.status()).status == "waiting_for_user"


async def _replied_fire(errands: ErrandsClient, name: str) -> str | None:
    view = await errands.schedule(name)
    done = [fire.task_id for fire in view.recent if fire.outcome == "replied"]
    return done[0] if done else None
