"""Targets given to a running task (an A2A push config, issue 28): stored with a fresh secret,
signalled to the task, and notified of each change from then on as A2A push notifications
(a ``StreamResponse`` status update, the config's token in ``X-A2A-Notification-Token``),
through the same signed, retried, guarded delivery as every notification."""

from __future__ import annotations

import json
import uuid
from typing import Any

from temporalio.client import Client

from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.client import Client as ErrandsClient
from errands.client import TaskHandle, add_target, remove_target, targets_of
from errands.settings import Settings
from errands.workers import build_worker
from tests.helpers import DATABASE, ask, eventually, final
from tests.webhook_receiver import LOOPBACK, receiving, verifies

MODEL = "gpt-push"
SECOND = {
    "question": "Which region should it run in?",
    "header": "Region",
    "options": [{"label": "eu-west"}, {"label": "us-east"}],
}


async def waiting(task: TaskHandle, header: str) -> bool:
    status = await task.status()
    pending = status.pending_question or {}
    questions = pending.get("questions", [])
    return status.status == "waiting_for_user" and any(q["header"] == header for q in questions)


async def test_a_target_given_to_a_running_task_hears_each_change_from_then_on_as_a2a(
    client: Client, settings: Settings, store: SessionStore, scripted: ScriptedModelServer
) -> None:
    scripted.script(MODEL, ask(DATABASE), ask(SECOND), final("PostgreSQL in eu-west."))
    async with receiving() as receiver:
        own = settings.model_copy(
            update={"task_queue": f"push-{uuid.uuid4().hex[:6]}", "webhook_allow": LOOPBACK}
        )
        router = ModelRouter(own)
        try:
            async with build_worker(client, own, store=store, router=router):
                errands = ErrandsClient(client, own, store=store)
                task = await errands.start("pick a database", model=f"openai:{MODEL}")
                await eventually(lambda: waiting(task, "Database"), "the first question")
                url = f"http://{LOOPBACK}:{receiver.port}/a2a/push"
                given = await add_target(task, url, token="push-token-1")
                assert [(t.ref, t.url, t.token) for t in await targets_of(task)] == [
                    (given.ref, url, "push-token-1")
                ]
                # Given while the first question waits: it hears the second, then the reply.
                await task.answer({"q1": "PostgreSQL"})
                await eventually(lambda: waiting(task, "Region"), "the second question")
                await eventually(lambda: len(receiver.hits) == 1, "the input-required push")
                await task.answer({"q1": "eu-west"})
                assert (await task.wait(timeout=60)).status == "replied"
                await eventually(lambda: len(receiver.hits) == 2, "the completed push")
                assert await remove_target(task, given.ref)
                assert await targets_of(task) == []
        finally:
            await router.aclose()

    bodies: list[dict[str, Any]] = [json.loads(hit.body) for hit in receiver.hits]
    states = [body["statusUpdate"]["status"]["state"] for body in bodies]
    assert states == ["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_COMPLETED"]
    assert {body["statusUpdate"]["taskId"] for body in bodies} == {task.task_id}
    assert all(hit.headers["x-a2a-notification-token"] == "push-token-1" for hit in receiver.hits)
    assert all(verifies(given.secret, hit.headers, hit.body) for hit in receiver.hits)
    assert len({hit.headers["webhook-id"] for hit in receiver.hits}) == 2
