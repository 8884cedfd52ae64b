"""Who a session belongs to (issue 25, SPEC §10): the principal that started its first task.
Nobody else may start a task in it (an admin may, and the task is then the owner's); a session
nobody owns that already has messages (one from before owners, or an operator's) is not handed
to the first user who names it, since claiming it would show them its history.

Driven through ``errands.Client(...).as_principal(...)`` on the suite's worker, with the
scripted model."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import Client

from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.client import Client as ErrandsClient
from errands.contracts.search import OWNER
from errands.errors import SessionNotFound
from tests.helpers import final
from tests.test_audit_events import ALICE, BOB, ROOT
from tests.test_audit_events import errands_client as errands_client  # noqa: F401  (the fixture)

MODEL = "openai:gpt-owners"


def session() -> str:
    return f"own-{uuid.uuid4().hex[:8]}"


async def owner_of(client: Client, task_id: str) -> str | None:
    described = await client.get_workflow_handle(task_id).describe()
    return described.typed_search_attributes.get(OWNER)


async def test_a_session_is_its_first_starters_and_only_an_admin_starts_another_task_in_it(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    errands_client: ErrandsClient,
) -> None:
    scripted.script("gpt-owners", final("one"), final("two"))
    sid = session()
    first = await errands_client.as_principal(ALICE).start("First.", session=sid, model=MODEL)
    assert store.session_owner(sid) == "alice"
    assert await owner_of(client, first.task_id) == "alice"
    await first.wait(timeout=60)

    with pytest.raises(SessionNotFound) as refused:
        await errands_client.as_principal(BOB).start("Mine now?", session=sid, model=MODEL)
    assert f"no session {sid!r}" in str(refused.value)
    with pytest.raises(SessionNotFound):
        await errands_client.as_principal(BOB).history(sid)
    assert store.session_owner(sid) == "alice", "a refused start claims nothing"

    by_admin = await errands_client.as_principal(ROOT).start("For her.", session=sid, model=MODEL)
    assert await owner_of(client, by_admin.task_id) == "alice", "the session's owner owns it"
    assert (await by_admin.wait(timeout=60)).reply == "two"
    assert [r.text for r in await errands_client.as_principal(ALICE).history(sid)][-1] == "two"


async def test_an_unowned_session_with_history_is_not_handed_to_the_first_user_who_names_it(
    client: Client,
    scripted: ScriptedModelServer,
    store: SessionStore,
    errands_client: ErrandsClient,
) -> None:
    scripted.script("gpt-owners", final("the operator's answer"), final("an admin's answer"))
    sid = session()
    operators = await errands_client.start("Operator's question.", session=sid, model=MODEL)
    assert await owner_of(client, operators.task_id) is None
    await operators.wait(timeout=60)
    assert store.session_owner(sid) is None

    with pytest.raises(SessionNotFound):
        await errands_client.as_principal(ALICE).start("Show me.", session=sid, model=MODEL)
    with pytest.raises(SessionNotFound):
        await errands_client.as_principal(ALICE).history(sid)
    assert store.session_owner(sid) is None, "the refused start claimed nothing"

    task = await errands_client.as_principal(ROOT).start("Go on.", session=sid, model=MODEL)
    assert (await task.wait(timeout=60)).reply == "an admin's answer"
    assert store.session_owner(sid) == "root"
