"""What users write is theirs (issue 24, DESIGN invariant 12): with encryption keys set, nothing a
user wrote, nor the session id, is readable in a raw Temporal history; errands itself reads it
all back; keys rotate under running tasks; a worker missing a key says which and loses nothing.

The raw histories are read with the real Temporal CLI (``temporal workflow show --output json``),
as anyone with access to the cluster would; payload data is base64 in that JSON, so every base64
string is decoded and searched too.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import SecretStr
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowQueryFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

import errands
from errands.adapters.devserver import DevServer
from errands.adapters.encryption import KEY_ID, data_converter, new_key
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import Fail, Gate, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.client import TaskSummary
from errands.contracts.search import SESSION, SESSION_MEMO
from errands.contracts.workflows import TaskResult
from errands.errors import ConfigError
from errands.plugin import ErrandsPlugin
from errands.settings import Settings
from errands.workers import build_worker
from tests.conftest import ROOT, run_cli
from tests.helpers import DATABASE, ask, delegate, eventually, final, general
from tests.histories_raw import readable

MODEL = "openai:gpt-private"
KEY_A, KEY_B = new_key(), new_key()
TEMPORAL_CLI = ROOT / ".venv" / "bin" / "temporal"


@dataclass
class Stack:
    """An errands client and a worker on one queue, both with the same keys."""

    client: errands.Client
    temporal: TemporalClient
    worker: Worker


@asynccontextmanager
async def stack(
    dev_server: DevServer,
    settings: Settings,
    store: SessionStore,
    keys: str | None,
    queue: str,
    **overrides: Any,
) -> AsyncIterator[Stack]:
    """errands as a deployment with ``keys`` runs it: the client and worker share a converter
    (``overrides``: other settings)."""
    own = settings.model_copy(
        update={
            "encryption_keys": SecretStr(keys) if keys else None,
            "task_queue": queue,
            **overrides,
        }
    )
    temporal = await TemporalClient.connect(dev_server.address, data_converter=data_converter(own))
    router = ModelRouter(own)
    try:
        async with build_worker(temporal, own, store=store, router=router) as worker:
            yield Stack(errands.Client(temporal, own, store=store), temporal, worker)
    finally:
        await router.aclose()


async def raw_history(dev_server: DevServer, workflow_id: str, run_id: str = "") -> str:
    """The history as the Temporal CLI shows it to anyone who can reach the server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    run = ["--run-id", run_id] if run_id else []
    proc = await asyncio.create_subprocess_exec(
        str(TEMPORAL_CLI),
        "workflow",
        "show",
        "--workflow-id",
        workflow_id,
        *run,
        "--address",
        dev_server.address,
        "--namespace",
        "default",
        "--output",
        "json",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


def key_ids(raw: str) -> set[str]:
    """The key ids named by the encrypted payloads of a raw history."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            metadata = value.get("metadata")
            if isinstance(metadata, dict) and KEY_ID in metadata:
                found.add(base64.b64decode(metadata[KEY_ID]).decode())
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(json.loads(raw))
    return found


async def runs_of(temporal: TemporalClient, workflow_id: str) -> list[tuple[str, str]]:
    """Every run of ``workflow_id`` (it continues as new), latest first, and every run of each
    child workflow they started (branches, a queued task): (workflow id, run id) pairs."""
    found: list[tuple[str, str]] = []
    run_id = (await temporal.get_workflow_handle(workflow_id).describe()).run_id
    while run_id:
        found.append((workflow_id, run_id))
        previous = ""
        handle = temporal.get_workflow_handle(workflow_id, run_id=run_id)
        async for event in handle.fetch_history_events():
            if event.HasField("workflow_execution_started_event_attributes"):
                previous = (
                    event.workflow_execution_started_event_attributes.continued_execution_run_id
                )
            if event.HasField("child_workflow_execution_started_event_attributes"):
                child = event.child_workflow_execution_started_event_attributes.workflow_execution
                found += await runs_of(temporal, child.workflow_id)
        run_id = previous
    return found


def canary(what: str) -> str:
    return f"canary-{what}-{uuid.uuid4().hex[:10]}"


def is_side(request: RecordedRequest, question: str) -> bool:
    return any(question in (m.get("content") or "") for m in request.body["messages"])


def is_branch(request: RecordedRequest) -> bool:
    return "final_reply" not in [t["function"]["name"] for t in request.body.get("tools", [])]


async def test_nothing_a_user_wrote_nor_the_session_id_is_readable_in_raw_histories(
    dev_server: DevServer, settings: Settings, store: SessionStore, scripted: ScriptedModelServer
) -> None:
    session, text, answer = canary("session"), canary("text"), canary("answer")
    refused, steer, queued = canary("refused"), canary("steer"), canary("queued")
    side, failure = canary("side"), canary("provider-error")
    branches_held = Gate("the branches' model calls")
    main = [
        ask(DATABASE),
        delegate(general("check the logs"), general("check the metrics"), reply="Looking."),
        final("All checked."),
        Fail(400, message=f"the provider refused: {failure}"),  # the queued task's round
    ]

    def model(request: RecordedRequest) -> Any:
        if is_side(request, side):
            return Reply(text="Waiting on your answer.")
        if is_branch(request):
            return Reply(text="nothing odd", hold=branches_held)
        return main.pop(0)

    scripted.script("gpt-private", *[model] * 7)
    queue = f"enc-{uuid.uuid4().hex[:6]}"
    # A short run: the task continues as new at each round boundary, and each run keeps it private.
    async with stack(dev_server, settings, store, f"A={KEY_A}", queue, max_history_events=10) as s:
        handle = await s.client.start(text, session=session, model=MODEL)
        assert session not in handle.task_id

        await eventually(lambda: handle.pending_question(), "the question")
        assert (await handle.btw(side)).answer == "Waiting on your answer."
        with pytest.raises(errands.AnswerRejected) as rejected:  # the update's validator refuses
            await handle.answer({"q1": refused})
        assert refused in str(rejected.value), "the client reads the refusal, decrypted"
        await handle.answer({"q1": f"Other: {answer}"})
        await branches_held.reached(2)
        await handle.say(steer)
        await handle.say(queued, mode="queue")
        branches_held.release()

        result = await handle.wait(timeout=60)
        assert result.status == "replied" and result.reply == "All checked."
        assert result.session_id == session and result.next_task
        following = await s.client.task(result.next_task).wait(timeout=60)
        assert following.error is not None and failure in following.error.message

        runs = await runs_of(s.temporal, handle.task_id)
        workflows = {workflow_id for workflow_id, _ in runs}
        assert len(workflows) == 4, f"the task, its two branches and the queued task: {runs}"
        raws = {}
        for workflow_id, run_id in runs:
            raw = raws[workflow_id, run_id] = await raw_history(dev_server, workflow_id, run_id)
            shown = readable(raw)
            for secret in (session, text, answer, refused, steer, queued, side, failure):
                assert secret not in shown, f"{secret} is readable in the history of {workflow_id}"
            assert key_ids(raw) == {"A"}, "every payload is encrypted, under the first key"
        # What was checked is there: the task's summary (its text) and the failed model call.
        task_runs = [r for r in runs if r[0] == handle.task_id]
        assert len(task_runs) > 1, "it continued as new"
        assert "userMetadata" in raws[task_runs[-1]]
        queued_runs = [raw for (w, _), raw in raws.items() if w == result.next_task]
        assert any("activityTaskFailedEventAttributes" in raw for raw in queued_runs)
        assert all("Encoded failure" in raw for raw in queued_runs)
        described = await s.temporal.get_workflow_handle(handle.task_id).describe()
        tag = described.typed_search_attributes.get(SESSION)
        assert tag == s.client.session_tags.written(session), "the latest run keeps the digest"

        # errands, holding the key, reads it all back.
        assert (await handle.status()).reply == "All checked."
        texts = [m.text for m in await s.client.history(session)]
        for secret in (text, steer, queued):
            assert any(secret in t for t in texts), secret
        asked = [r.raw.decode() for r in scripted.requests_for("gpt-private")]
        assert any(answer in body for body in asked), "the answer reached the model"
        listed = await eventually(
            lambda: _both_listed(s.client, session, {handle.task_id, result.next_task}),
            "the session's two tasks in visibility",
        )
        assert {t.session_id for t in listed} == {session}
        assert (await handle.describe()).session_id == session


async def _both_listed(
    client: errands.Client, session: str, wanted: set[str | None]
) -> list[TaskSummary] | None:
    listed = await client.tasks(session=session)
    return listed if {t.task_id for t in listed} == wanted else None


async def test_a_message_queued_after_the_end_starts_a_private_task_of_the_same_session(
    dev_server: DevServer, settings: Settings, store: SessionStore, scripted: ScriptedModelServer
) -> None:
    session, late = canary("session"), canary("late")
    scripted.script("gpt-private", final("First done."), final("Second done."))
    async with stack(
        dev_server, settings, store, f"A={KEY_A}", f"late-{uuid.uuid4().hex[:6]}"
    ) as s:
        first = await s.client.start(canary("text"), session=session, model=MODEL)
        assert (await first.wait(timeout=60)).reply == "First done."
        receipt = await first.say(late, mode="queue")
        assert receipt.status == "started" and receipt.task_id
        second = s.client.task(receipt.task_id)
        assert (await second.wait(timeout=60)).reply == "Second done."

        raw = await raw_history(dev_server, receipt.task_id)
        assert late not in readable(raw) and session not in readable(raw)
        described = await s.temporal.get_workflow_handle(receipt.task_id).describe()
        assert described.typed_search_attributes.get(SESSION) == s.client.session_tags.written(
            session
        )
        # The session id in the successor's (encrypted) memo: listing it fetches no history.
        assert await described.memo_value(SESSION_MEMO, type_hint=str) == session
        listed = await eventually(
            lambda: _both_listed(s.client, session, {first.task_id, receipt.task_id}),
            "the session's two tasks in visibility",
        )
        assert {t.session_id for t in listed} == {session}


async def test_keys_rotate_under_parked_tasks_and_plain_histories_still_read(
    dev_server: DevServer, settings: Settings, store: SessionStore, scripted: ScriptedModelServer
) -> None:
    queue = f"rot-{uuid.uuid4().hex[:6]}"
    plain_text, old_text, new_text = canary("plain"), canary("old"), canary("new")
    scripted.script(
        "gpt-private",
        ask(DATABASE),
        ask(DATABASE),
        final("Plain done."),
        final("Old done."),
        final("New done."),
    )
    async with stack(dev_server, settings, store, None, queue) as s:
        plain = await s.client.start(plain_text, model=MODEL)
        await eventually(lambda: plain.pending_question(), "the plain task's question")
    plain_raw = await raw_history(dev_server, plain.task_id)
    assert plain_text in readable(plain_raw), "written with no keys: readable (the check works)"

    async with stack(dev_server, settings, store, f"A={KEY_A}", queue) as s:
        old = await s.client.start(old_text, model=MODEL)
        await eventually(lambda: old.pending_question(), "the old task's question")
    assert key_ids(await raw_history(dev_server, old.task_id)) == {"A"}

    async with stack(dev_server, settings, store, f"B={KEY_B},A={KEY_A}", queue) as s:
        for task_id, reply in ((plain.task_id, "Plain done."), (old.task_id, "Old done.")):
            handle = s.client.task(task_id)
            await handle.answer({"q1": "PostgreSQL"})
            result = await handle.wait(timeout=60)
            assert result.status == "replied" and result.reply == reply
        new = await s.client.start(new_text, model=MODEL)
        assert (await new.wait(timeout=60)).reply == "New done."
        new_raw = await raw_history(dev_server, new.task_id)
        assert key_ids(new_raw) == {"B"}, "a new task is encrypted under the new first key"
        assert new_text not in readable(new_raw)
        assert {"A", "B"} <= key_ids(await raw_history(dev_server, old.task_id))


async def test_a_worker_missing_a_key_says_which_and_the_task_carries_on_once_it_is_back(
    dev_server: DevServer, settings: Settings, store: SessionStore, scripted: ScriptedModelServer
) -> None:
    queue = f"lost-{uuid.uuid4().hex[:6]}"
    scripted.script("gpt-private", ask(DATABASE), final("Done."))
    async with stack(dev_server, settings, store, f"A={KEY_A}", queue) as s:
        handle = await s.client.start(canary("text"), model=MODEL)
        pending = await eventually(lambda: handle.pending_question(), "the question")

    async with stack(dev_server, settings, store, f"B={KEY_B}", queue) as s:
        task = s.temporal.get_workflow_handle(handle.task_id)
        with pytest.raises(WorkflowQueryFailedError) as failed:
            await task.query("status", result_type=TaskResult)
        message = str(failed.value)
        assert "'A'" in message and "ERRANDS_ENCRYPTION_KEYS" in message
        assert "\n" not in message
        # An answer arrives: the worker cannot read the task's history, and says why in it.
        answer = {"question_set_id": pending["id"], "answers": {"q1": ["PostgreSQL"]}}
        await task.signal("submit_answer", answer)

        async def failed_task() -> bool:
            raw = await raw_history(dev_server, handle.task_id)
            return "workflowTaskFailedEventAttributes" in raw and "with key 'A'" in raw

        await eventually(failed_task, "a failed workflow task naming key A", interval=0.5)

    async with stack(dev_server, settings, store, f"B={KEY_B},A={KEY_A}", queue) as s:
        result = await s.client.task(handle.task_id).wait(timeout=60)
        assert result.status == "replied" and result.reply == "Done."


async def test_a_worker_given_keys_refuses_a_client_that_does_not_encrypt_with_them(
    dev_server: DevServer, settings: Settings
) -> None:
    keyed = settings.model_copy(update={"encryption_keys": SecretStr(f"A={KEY_A}")})
    other = settings.model_copy(update={"encryption_keys": SecretStr(f"A={KEY_B}")})
    for converter in (pydantic_data_converter, data_converter(other)):
        client = await TemporalClient.connect(dev_server.address, data_converter=converter)
        with pytest.raises(ConfigError) as refused:
            Worker(client, task_queue="never-polled", plugins=[ErrandsPlugin(keyed)])
        message = str(refused.value)
        assert "does not encrypt with those keys" in message and "\n" not in message


async def test_the_cli_with_the_keys_runs_and_reads_a_private_task_of_a_session(
    dev_server: DevServer,
    settings: Settings,
    store: SessionStore,
    scripted: ScriptedModelServer,
    cli_env: dict[str, str],
) -> None:
    session, text = canary("session"), canary("text")
    scripted.script("gpt-private", final("Done from the CLI."))
    queue = f"cli-{uuid.uuid4().hex[:6]}"
    env = {**cli_env, "ERRANDS_TASK_QUEUE": queue, "ERRANDS_ENCRYPTION_KEYS": f"A={KEY_A}"}
    async with stack(dev_server, settings, store, f"A={KEY_A}", queue):
        started = await run_cli(
            env, "run", text, "--session", session, "--detach", "--json", "--model", MODEL
        )
        assert started.code == 0, started.stderr
        task_id = started.json()["task_id"]
        assert session not in task_id
        done = await run_cli(env, "wait", task_id, "--json", "--timeout", "60")
        assert done.json()["reply"] == "Done from the CLI." and done.json()["session_id"] == session
    assert text not in readable(await raw_history(dev_server, task_id))
    history = await run_cli(env, "history", session, "--json")
    assert [m["text"] for m in history.json()["messages"]][-2:] == [text, "Done from the CLI."]
