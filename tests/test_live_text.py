"""Live text (issue 17): model calls stream from the provider on both wires, their text reaches the
event log as batched ``reply_delta`` events while the task runs, and a retried attempt's text is
superseded, so what a frontend shows ends equal to the stored reply."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from temporalio.client import Client

from activities._calls import JsonStringField
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.client import Client as ErrandsClient
from errands.contracts.events import LiveText, StoredEvent
from errands.settings import Settings
from errands.workers import build_worker
from tests.conftest import StartTask
from tests.helpers import Conversation, delegate, final, start_task

# 2,000 characters of a reply, with what JSON must escape in it.
REPLY = ('Lisbon first: the "old town" and Belém.\nThen Porto — wine, bridges, tiles. ' * 26)[:2000]


def streamed_reply(**stream: Any) -> Reply:
    """The reply in 40-character pieces; ``chunk_delay`` spreads them, as a model's tokens come,
    which is what the 100 ms batching of deltas is tested against."""
    return final(REPLY, chunk_chars=40, **stream)


async def read_log(
    client: Client, settings: Settings, store: SessionStore, task_id: str
) -> list[StoredEvent]:
    """Every event of the task, read live while it runs, until its last."""
    return [e async for e in ErrandsClient(client, settings, store=store).task(task_id).events()]


def reply_of(store: SessionStore, task_id: str) -> str:
    row = store.get(f"task:{task_id}:reply")
    assert row is not None
    return row.text


@pytest.mark.parametrize("model", ["openai:gpt-live", "anthropic:claude-live"])
async def test_a_streamed_reply_reaches_a_watcher_in_deltas_before_the_task_ends(
    client: Client,
    settings: Settings,
    store: SessionStore,
    scripted: ScriptedModelServer,
    model: str,
    start: StartTask,
) -> None:
    name = model.split(":")[1]
    scripted.script(name, streamed_reply(chunk_delay=0.04))
    handle = await start("Plan the trip.", model=model)
    log = await read_log(client, settings, store, handle.id)

    request = scripted.requests_for(name)[0]
    assert request.body["stream"] is True, "the round's call streams"
    deltas = [e for e in log if e.type == "reply_delta" and e.data["where"] == "main"]
    replied = next(e for e in log if e.type == "replied")
    assert len(deltas) >= 10, f"{len(deltas)} deltas"
    assert all(e.seq < replied.seq for e in deltas), "every delta came before the end"
    assert all(e.data["attempt"] == 1 and not e.data["superseded"] for e in deltas)
    assert "".join(e.data["text"] for e in deltas) == REPLY
    live = LiveText()
    for event in log:
        live.apply(event.public())
    assert live.text() == reply_of(store, handle.id) == REPLY.strip()
    # The response the round acted on is the stream put together, usage included.
    finished = next(e for e in log if e.type == "model_call_finished")
    assert finished.data["usage"]["input_tokens"] == request.reported_usage.input_tokens


async def test_after_a_500_in_mid_stream_the_retry_supersedes_the_text_written(
    client: Client,
    settings: Settings,
    store: SessionStore,
    scripted: ScriptedModelServer,
    start: StartTask,
) -> None:
    scripted.script(
        "gpt-live-broken",
        streamed_reply(chunk_delay=0.02, fail_after=20, fail_message="upstream 500 in mid-stream"),
        streamed_reply(),
    )
    handle = await start("Plan the trip.", model="openai:gpt-live-broken")
    log = await read_log(client, settings, store, handle.id)

    assert len(scripted.requests_for("gpt-live-broken")) == 2
    deltas = [e.data for e in log if e.type == "reply_delta"]
    first = "".join(d["text"] for d in deltas if d["attempt"] == 1)
    assert first and REPLY.startswith(first) and first != REPLY, "attempt 1 wrote part of it"
    markers = [d for d in deltas if d["superseded"]]
    assert [(m["attempt"], m["text"]) for m in markers] == [(2, "")]
    second = "".join(d["text"] for d in deltas if d["attempt"] == 2)
    assert second == REPLY
    live = LiveText()
    for event in log:
        live.apply(event.public())
    assert live.text() == reply_of(store, handle.id) == REPLY.strip()


async def test_a_branchs_answer_streams_under_its_branch(
    client: Client,
    settings: Settings,
    store: SessionStore,
    scripted: ScriptedModelServer,
    start: StartTask,
) -> None:
    answer = "The almanac says: Lisbon has 2,800 hours of sun a year. " * 8
    Conversation(
        [delegate("Look up the sun.", reply="Looking."), final("Sunny.")],
        lambda request: Reply(text=answer, chunk_chars=20, chunk_delay=0.02),
        branches=1,
    ).install(scripted, "gpt-live-branch")
    handle = await start("How sunny?", model="openai:gpt-live-branch")
    log = await read_log(client, settings, store, handle.id)

    live = LiveText()
    for event in log:
        live.apply(event.public())
    assert live.text("r0/b1") == answer.strip()
    finished = next(e for e in log if e.type == "branch_finished")
    deltas = [e for e in log if e.type == "reply_delta" and e.data["where"] == "r0/b1"]
    assert len(deltas) >= 2 and all(e.seq < finished.seq for e in deltas)
    assert live.text() == "Sunny."


async def test_with_streaming_off_calls_are_not_streamed_and_nothing_is_written_live(
    client: Client,
    settings: Settings,
    store: SessionStore,
    scripted: ScriptedModelServer,
) -> None:
    quiet = settings.model_copy(update={"streaming": False, "task_queue": "errands-no-stream"})
    router = ModelRouter(quiet)
    try:
        async with build_worker(client, quiet, store=store, router=router):
            scripted.script("gpt-live-off", streamed_reply())
            handle = await start_task(
                client, quiet.task_queue, "Plan the trip.", model="openai:gpt-live-off"
            )
            log = await read_log(client, quiet, store, handle.id)
    finally:
        await router.aclose()
    assert "stream" not in scripted.requests_for("gpt-live-off")[0].body
    assert [e for e in log if e.type == "reply_delta"] == []
    assert log[-1].type == "replied"


@pytest.mark.fast
@given(st.text(max_size=60), st.lists(st.integers(min_value=0, max_value=200), max_size=8))
def test_a_json_string_field_is_decoded_the_same_however_its_text_is_cut(
    text: str, cuts: list[int]
) -> None:
    arguments = json.dumps({"other": 'a "text": "decoy"', "text": text, "after": 1})
    points = sorted({min(c, len(arguments)) for c in cuts})
    pieces = [arguments[a:b] for a, b in zip([0, *points], [*points, len(arguments)], strict=True)]
    field = JsonStringField("text")
    assert "".join(field.feed(p) for p in pieces) == text


@pytest.mark.fast
def test_live_text_keeps_the_latest_attempt_of_each_step() -> None:
    def delta(step: int, attempt: int, text: str, superseded: bool = False) -> dict[str, Any]:
        return {
            "type": "reply_delta",
            "where": "main",
            "step": step,
            "attempt": attempt,
            "text": text,
            "superseded": superseded,
        }

    live = LiveText()
    for event in [
        delta(1, 1, "Hel"),
        delta(1, 1, "lo"),
        {"type": "model_call_started", "where": "main", "step": 1, "attempt": 2},
        delta(1, 1, " late"),  # an earlier attempt's delta arriving late: ignored
        delta(1, 2, "", superseded=True),
        delta(1, 2, "Hi"),
        delta(1, 2, " there"),
    ]:
        live.apply(event)
    assert live.text() == "Hi there"
    live.apply(delta(2, 1, "Next step"))
    assert live.text() == "Next step", "a later step's text is the one shown"
