"""Events that record a human act name who acted (issue 25, SPEC §10): ``question_answered``
names who answered (the task's owner or an admin; anyone else is refused by the task itself),
``canceled`` names who asked; a principal appears by id and role, never more. A queued message's
task belongs to the same owner.

Driven through ``errands.Client(...).as_principal(...)`` on the suite's worker, with the
scripted model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.worker import Worker

from errands.adapters.scripted import Gate, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.client import Client as ErrandsClient
from errands.client import TaskHandle
from errands.contracts import ids
from errands.contracts.asking import Answer
from errands.contracts.principals import Principal
from errands.contracts.search import OWNER
from errands.contracts.workflows import AnswerReceipt
from errands.errors import TaskNotFound
from errands.settings import Settings
from tests.helpers import DATABASE, ask, eventually, final

MODEL = "openai:gpt-audit"
ALICE = Principal(id="alice", role="user")
BOB = Principal(id="bob", role="user")
ROOT = Principal(id="root", role="admin")


@pytest.fixture
def errands_client(
    client: Client, settings: Settings, store: SessionStore, worker: Worker
) -> ErrandsClient:
    return ErrandsClient(client, settings, store=store)


def logged(store: SessionStore, task_id: str, type_: str) -> list[dict[str, Any]]:
    return [e.data for e in store.list_events(task_id) if e.type == type_]


async def question(task: TaskHandle) -> dict[str, Any]:
    pending = await eventually(task.pending_question, f"{task.task_id} to ask its question")
    assert isinstance(pending, dict)
    return pending


async def test_a_question_answered_by_an_admin_names_them_and_another_user_is_refused(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    errands_client: ErrandsClient,
) -> None:
    scripted.script("gpt-audit", ask(DATABASE), final("Going with PostgreSQL."))
    task = await errands_client.as_principal(ALICE).start("Set up the service.", model=MODEL)
    pending = await question(task)

    raw = client.get_workflow_handle(task.task_id)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await raw.execute_update(
            "answer_question",
            Answer(question_set_id=pending["id"], answers={"q1": ["SQLite"]}, by=BOB),
            result_type=AnswerReceipt,
        )
    assert "bob (user) may not answer the questions of task" in str(refused.value.cause)
    assert (await task.pending_question()) == pending, "a refused answer changes nothing"
    assert not logged(store, task.task_id, "question_answered")

    await errands_client.as_principal(ROOT).task(task.task_id).answer({"q1": "PostgreSQL"})
    assert (await task.wait(timeout=60)).reply == "Going with PostgreSQL."
    assert logged(store, task.task_id, "question_answered") == [
        {
            "round": 0,
            "question_set_id": pending["id"],
            "status": "answered",
            "by": {"id": "root", "role": "admin"},
        }
    ]


async def test_the_owners_answer_is_named_too(
    scripted: ScriptedModelServer, store: SessionStore, errands_client: ErrandsClient
) -> None:
    scripted.script("gpt-audit", ask(DATABASE), final("SQLite then."))
    alice = errands_client.as_principal(ALICE)
    task = await alice.start("Set up the service.", model=MODEL)
    await question(task)
    await alice.task(task.task_id).answer({"q1": "SQLite"})
    await task.wait(timeout=60)
    (answered,) = logged(store, task.task_id, "question_answered")
    assert answered["by"] == {"id": "alice", "role": "user"}


async def test_the_canceled_event_names_who_asked_to_cancel(
    scripted: ScriptedModelServer, store: SessionStore, errands_client: ErrandsClient
) -> None:
    scripted.script("gpt-audit", ask(DATABASE))
    alice = errands_client.as_principal(ALICE)
    task = await alice.start("Set up the service, or not.", model=MODEL)
    await question(task)
    await alice.task(task.task_id).cancel()

    canceled = await eventually(
        lambda: logged(store, task.task_id, "canceled"), "the canceled event"
    )
    assert canceled == [{"by": {"id": "alice", "role": "user"}}]


async def test_a_queued_message_starts_a_task_that_belongs_to_the_same_owner(
    client: Client, scripted: ScriptedModelServer, errands_client: ErrandsClient
) -> None:
    first_call = Gate("the first task's model call")

    def main_agent(request: RecordedRequest) -> Reply:
        return final("answered", hold=first_call)

    scripted.script("gpt-audit", main_agent, main_agent)
    alice = errands_client.as_principal(ALICE)
    task = await alice.start("First question.", model=MODEL)
    await first_call.reached()
    await alice.task(task.task_id).say("Then this one.", mode="queue")
    first_call.release()
    first = await task.wait(timeout=60)

    assert first.next_task == ids.queued_task_id(task.task_id, 1)
    second = await asyncio.wait_for(alice.task(first.next_task).wait(), 60)
    assert second.reply == "answered"
    described = await client.get_workflow_handle(first.next_task).describe()
    assert described.typed_search_attributes.get(OWNER) == "alice"
    with pytest.raises(TaskNotFound):
        await errands_client.as_principal(BOB).task(first.next_task).status()
