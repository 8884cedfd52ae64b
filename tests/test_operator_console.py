"""The Temporal UI as the operator console: every search attribute finds the right tasks, and
activities and children carry readable summaries in the exported history."""

from __future__ import annotations

import uuid

from temporalio.client import Client

from errands.adapters.scripted import Call, Reply, ScriptedModelServer
from tests.conftest import StartTask
from tests.helpers import Conversation, eventually


async def matching(client: Client, query: str, expected: set[str]) -> set[str]:
    """The workflows ``query`` finds, once they are ``expected`` (visibility lags a moment)."""

    async def found() -> set[str] | None:
        ids = {w.id async for w in client.list_workflows(query)}
        return ids if ids == expected else None

    return await eventually(found, f"visibility to find {sorted(expected)} for {query!r}")


async def test_each_search_attribute_finds_the_right_tasks_and_summaries_are_exported(
    client: Client, scripted: ScriptedModelServer, start: StartTask
) -> None:
    session = f"ops-{uuid.uuid4().hex[:6]}"
    delegate = Call(
        "delegate",
        {"reply": "on it", "subtasks": [{"type": "general", "prompt": "p", "references": [1]}]},
    )
    Conversation(
        [Reply(calls=[delegate]), Reply(calls=[Call("final_reply", {"text": "ok"})])],
        lambda r: Reply(text="branch"),
        branches=1,
    ).install(scripted, "gpt-ops")
    scripted.script("gpt-ops-fail", *[Reply(text="prose only")] * 4)  # repaired 3 times
    replied = await start("q", model="openai:gpt-ops", session=session)
    failed = await start("q", model="openai:gpt-ops-fail", session=session)
    await replied.result()
    await failed.result()

    in_session = f'ErrandsSession = "{session}"'
    assert await matching(client, in_session, {replied.id, failed.id}) == {replied.id, failed.id}
    assert await matching(client, f'{in_session} AND ErrandsState = "replied"', {replied.id}) == {
        replied.id
    }
    assert await matching(client, f'{in_session} AND ErrandsState = "failed"', {failed.id}) == {
        failed.id
    }
    assert await matching(client, f"{in_session} AND ErrandsRound >= 1", {replied.id}) == {
        replied.id
    }
    assert await matching(
        client, f"{in_session} AND ErrandsWaitingForUser = false", {replied.id, failed.id}
    )

    history = await replied.fetch_history()
    summaries = [
        e.user_metadata.summary.data.decode()
        for e in history.events
        if e.HasField("user_metadata") and e.user_metadata.HasField("summary")
    ]
    assert any("round 0 · primary · openai:gpt-ops" in s for s in summaries), summaries
    assert any("round 0 · subtask 1 · general" in s for s in summaries), summaries
