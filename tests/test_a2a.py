"""A2A 1.0 on the gateway (issue 28): the a2a-sdk client against the real gateway served over
loopback, the real dev server, a worker and the scripted model. Tasks start, stream their live
text, ask and are answered (a wrong answer refused, the task still waiting), are steered and
canceled; a stream cut by a killed gateway resumes on another gateway process with
Last-Event-ID, losing nothing; and every request acts as its principal (B gets, for A's task,
exactly what a missing task gets)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import Client as A2AClient
from a2a.client import ClientCallContext, ClientConfig, ClientFactory
from a2a.helpers import get_data_parts, get_text_parts, new_data_part, new_text_part
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
)
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from sse_starlette.sse import EventSourceResponse
from temporalio.client import Client

from errands.adapters.identity.keys import mint
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import Call, Fail, Gate, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore, open_store
from errands.adapters.webhooks import new_secret
from errands.client import Client as ErrandsClient
from errands.contracts.events import StoredEvent
from errands.errors import InvalidRequest
from errands.gateway import create_app, serving
from errands.protocols.a2a import RESUME_EXTENSION, agent_card
from errands.protocols.a2a import _handler as a2a_handler
from errands.protocols.a2a._mapping import Incoming, Progress
from errands.protocols.a2a._refusals import resume_point
from errands.settings import Settings
from errands.workers import build_worker
from tests.conftest import (
    ProcessWorkers,
    kill_worker,
    read_stderr_until,
    running_cli,
    spawn_worker,
    worker_process,
)
from tests.helpers import DATABASE, Conversation, ask, delegate, eventually, final
from tests.mcp_notes import Servers
from tests.webhook_receiver import LOOPBACK, receiving, verifies

WORKING = TaskState.TASK_STATE_WORKING
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
COMPLETED = TaskState.TASK_STATE_COMPLETED
CANCELED = TaskState.TASK_STATE_CANCELED
REPLY = ("Lisbon first, then Porto by train: wine, bridges and tiles. " * 14).strip()


@dataclass
class Stack:
    url: str
    store: SessionStore
    keys: dict[str, str] = field(default_factory=dict)

    names: dict[str, str] = field(default_factory=dict)

    def add(self, who: str) -> None:
        token, record = mint(f"{who}-{uuid.uuid4().hex[:6]}", "user", datetime.now(UTC))
        self.store.add_principal(record)
        self.keys[who], self.names[who] = token, record.name


@pytest.fixture(scope="module")
async def stack(
    client: Client, settings: Settings, tmp_path_factory: pytest.TempPathFactory, servers: Servers
) -> AsyncIterator[Stack]:
    """A gateway with a store of its own (its API keys make every caller say who they are), and
    a worker whose MCP ``search`` waits for approval."""
    where: Path = tmp_path_factory.mktemp("a2a")
    web = {**servers.config["web"], "approval": {"search": "always"}}
    own = settings.model_copy(
        update={
            "task_queue": f"a2a-{uuid.uuid4().hex[:6]}",
            "database_url": f"sqlite:///{where / 'sessions.db'}",
            "mcp_servers": json.dumps({"web": web}),
            "webhook_allow": LOOPBACK,  # the push receiver
        }
    )
    store = open_store(own.session_database_url())
    router = ModelRouter(own)
    try:
        async with build_worker(client, own, store=store, router=router):
            app = create_app(ErrandsClient(client, own, store=store), token=None)
            async with serving(app) as url:
                stack = Stack(url, store)
                stack.add("a")
                stack.add("b")
                yield stack
    finally:
        await router.aclose()
        store.close()


@asynccontextmanager
async def connect(
    url: str, token: str | None = None, *, streaming: bool = True, binding: str = "JSONRPC"
) -> AsyncIterator[A2AClient]:
    """The a2a-sdk client of the agent card at ``url``, sending ``token`` as its bearer."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=120) as http:
        config = ClientConfig(
            httpx_client=http, streaming=streaming, supported_protocol_bindings=[binding]
        )
        a2a = await ClientFactory(config).create_from_url(url)
        try:
            yield a2a
        finally:
            await a2a.close()


@pytest.fixture
async def alice(stack: Stack) -> AsyncIterator[A2AClient]:
    """A's client, sending without streaming (each SendMessage answers with the task)."""
    async with connect(stack.url, stack.keys["a"], streaming=False) as a:
        yield a


@pytest.fixture
async def bob(stack: Stack) -> AsyncIterator[A2AClient]:
    async with connect(stack.url, stack.keys["b"]) as b:
        yield b


def say(
    text: str = "",
    *,
    model: str | None = None,
    task_id: str = "",
    data: dict[str, Any] | None = None,
    now: bool = False,
    **metadata: Any,
) -> SendMessageRequest:
    parts = [new_text_part(text)] if text else []
    if data is not None:
        parts.append(new_data_part(data))
    message = Message(
        role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=parts, task_id=task_id
    )
    if model:
        metadata["errands.model"] = f"openai:{model}"
    message.metadata.update(metadata)
    request = SendMessageRequest(message=message)
    request.configuration.return_immediately = now
    return request


async def one_task(client: A2AClient, request: SendMessageRequest) -> Task:
    """The task a non-streaming SendMessage answers with."""
    [response] = [r async for r in client.send_message(request)]
    assert response.WhichOneof("payload") == "task", response
    return response.task


def seq_of(event: StreamResponse) -> int:
    kind = event.WhichOneof("payload")
    return int(getattr(event, kind).metadata["errands.seq"])


def text_of(events: list[StreamResponse]) -> str:
    """The reply artifact as a client puts it together from the stream's updates."""
    text = ""
    for event in events:
        if event.WhichOneof("payload") == "artifact_update":
            update = event.artifact_update
            piece = "".join(get_text_parts(update.artifact.parts))
            text = text + piece if update.append else piece
    return text


def assert_each_event_once(seqs: list[int], store: SessionStore, task_id: str) -> None:
    """The stream carried every event of the task's log, in order, each once (``replied``
    becomes two A2A events, the whole reply and ``completed``, under its one seq)."""
    logged = store.list_events(task_id)
    assert seqs == sorted(seqs), f"in order: {seqs}"
    assert sorted(set(seqs)) == [e.seq for e in logged], "every event of the log"
    twice = {s for s in seqs if seqs.count(s) > 1}
    assert twice == {logged[-1].seq} and seqs.count(logged[-1].seq) == 2, "nothing else twice"


def model_name() -> str:
    return f"gpt-a2a-{uuid.uuid4().hex[:6]}"


async def test_a_delegating_task_streams_its_live_text_and_completes_with_the_reply(
    stack: Stack, alice: A2AClient, scripted: ScriptedModelServer
) -> None:
    name = model_name()
    Conversation(
        [delegate("part 1", "part 2"), final(REPLY, chunk_chars=20, chunk_delay=0.03)],
        lambda request: Reply(text="branch done"),
        branches=2,
    ).install(scripted, name)
    async with connect(stack.url, stack.keys["a"]) as streaming:
        events = [e async for e in streaming.send_message(say("Plan a week.", model=name))]

    first, rest = events[0], events[1:]
    assert first.WhichOneof("payload") == "task"
    task_id = first.task.id
    logged = stack.store.list_events(task_id)
    seqs = [seq_of(e) for e in rest]
    assert_each_event_once(seqs, stack.store, task_id)
    types = [e.type for e in logged]
    assert types.count("branch_finished") == 2 and types[-1] == "replied"
    live = [e.artifact_update for e in rest if e.WhichOneof("payload") == "artifact_update"]
    assert any(u.append for u in live), "the reply streamed in pieces"
    assert live[-1].last_chunk and not live[-1].append, "then whole"
    assert text_of(rest) == REPLY
    last = rest[-1]
    assert last.WhichOneof("payload") == "status_update"
    assert last.status_update.status.state == COMPLETED

    done = await alice.get_task(GetTaskRequest(id=task_id, history_length=1))
    assert done.status.state == COMPLETED
    assert done.context_id == first.task.context_id
    [artifact] = done.artifacts
    assert artifact.name == "reply" and get_text_parts(artifact.parts) == [REPLY]
    [newest] = done.history
    assert newest.role == Role.ROLE_AGENT and get_text_parts(newest.parts) == [REPLY]

    async with connect(stack.url, stack.keys["a"]) as streaming:
        follow = SubscribeToTaskRequest(id=task_id)
        [ended] = [e async for e in streaming.subscribe(follow, context=resumed(seqs[-1]))]
        assert ended.task.status.state == COMPLETED, "resumed after the end: how it ended"
        with pytest.raises(UnsupportedOperationError):
            await _drain(streaming.subscribe(follow))


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_a_task_that_asks_refuses_a_wrong_answer_and_completes_on_the_right_one(
    stack: Stack, scripted: ScriptedModelServer, binding: str
) -> None:
    name = model_name()
    scripted.script(name, ask(DATABASE), final("PostgreSQL it is."))
    async with connect(stack.url, stack.keys["a"], streaming=False, binding=binding) as polling:
        waiting = await one_task(polling, say("Set up the new service.", model=name))
        assert waiting.status.state == INPUT_REQUIRED
        [asked] = get_data_parts(waiting.status.message.parts)
        [question] = asked["pending_question"]["questions"]
        assert question["question"] == DATABASE["question"]
        assert "PostgreSQL" in [o["label"] for o in question["options"]]
        assert get_text_parts(waiting.status.message.parts), "and words to read"

        wrong = say(task_id=waiting.id, data={"answers": {question["id"]: ["MySQL"]}})
        with pytest.raises(InvalidParamsError) as refused:
            await one_task(polling, wrong)
        assert "MySQL" in str(refused.value), refused.value
        still = await polling.get_task(GetTaskRequest(id=waiting.id))
        assert still.status.state == INPUT_REQUIRED, "the task still waits"

        done = await one_task(polling, say("PostgreSQL, we run it already", task_id=waiting.id))
        assert done.status.state == COMPLETED
        assert get_text_parts(done.artifacts[0].parts) == ["PostgreSQL it is."]
        answered = json.dumps(scripted.requests_for(name)[1].body)
        assert "PostgreSQL, we run it already" in answered, "plain text, as the Other answer"


async def test_a_push_config_hears_input_required_and_completed_signed_once_each(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    name = model_name()
    scripted.script(name, ask(DATABASE), final("PostgreSQL it is."))
    secret = new_secret()
    async with (
        receiving(500, 200) as receiver,
        connect(stack.url, stack.keys["a"], streaming=False) as polling,
    ):
        request = say("Set up the new service.", model=name)
        push = request.configuration.task_push_notification_config
        push.url, push.token = receiver.url("/a2a/push"), "tok-a"
        push.authentication.scheme, push.authentication.credentials = "standard-webhooks", secret
        waiting = await one_task(polling, request)
        assert waiting.status.state == INPUT_REQUIRED
        listed = await polling.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=waiting.id)
        )
        assert [(c.url, c.token) for c in listed.configs] == [(push.url, "")], "no token shown"
        # The receiver answers 500 first: the input-required push comes again, same id.
        await eventually(lambda: len(receiver.hits) == 2, "the input-required push, retried")
        done = await one_task(polling, say("PostgreSQL", task_id=waiting.id))
        assert done.status.state == COMPLETED
        await eventually(lambda: len(receiver.hits) == 3, "the completed push")

    states = [hit.json()["statusUpdate"]["status"]["state"] for hit in receiver.hits]
    assert states == ["TASK_STATE_INPUT_REQUIRED"] * 2 + ["TASK_STATE_COMPLETED"]
    ids = [hit.headers["webhook-id"] for hit in receiver.hits]
    assert ids[0] == ids[1] != ids[2], "a retry keeps its webhook-id"
    assert all(hit.headers["x-a2a-notification-token"] == "tok-a" for hit in receiver.hits)
    assert all(verifies(secret, hit.headers, hit.body) for hit in receiver.hits)
    sent = [e for e in stack.store.list_events(waiting.id) if e.type == "notification_sent"]
    assert [e.data["event"] for e in sent] == ["waiting_for_user", "replied"], "once each"


async def test_a_call_waiting_for_approval_is_input_required_until_a_decision_answers_it(
    alice: A2AClient, scripted: ScriptedModelServer
) -> None:
    name = model_name()

    def searching(request: RecordedRequest) -> Reply:
        if not [m for m in request.body["messages"] if m["role"] == "tool"]:
            return Reply(calls=[Call("mcp__web__search", {"query": "databases"})])
        return final("Searched.")

    scripted.script(name, searching, searching)
    waiting = await one_task(alice, say("Search the notes.", model=name))
    assert waiting.status.state == INPUT_REQUIRED
    [call] = get_data_parts(waiting.status.message.parts)
    pending = call["pending_approval"]
    assert pending["tool"] == "mcp__web__search" and "databases" in pending["arguments"]

    with pytest.raises(InvalidParamsError, match="decision"):
        await one_task(alice, say("yes, go ahead", task_id=waiting.id))
    other = {"decision": "approve", "arguments_sha256": "0" * 64}
    with pytest.raises(InvalidParamsError):
        await one_task(alice, say(task_id=waiting.id, data=other))
    still = await alice.get_task(GetTaskRequest(id=waiting.id))
    assert still.status.state == INPUT_REQUIRED, "a refused decision changes nothing"

    yes = {"decision": "approve", "arguments_sha256": pending["arguments_sha256"]}
    done = await one_task(alice, say(task_id=waiting.id, data=yes))
    assert done.status.state == COMPLETED
    assert get_text_parts(done.artifacts[0].parts) == ["Searched."]


async def test_a_task_that_fails_is_failed_with_its_error(
    alice: A2AClient, scripted: ScriptedModelServer
) -> None:
    name = model_name()
    scripted.script(name, Fail(401, "key revoked"))
    failed = await one_task(alice, say("Anything.", model=name))
    assert failed.status.state == TaskState.TASK_STATE_FAILED
    [said] = get_text_parts(failed.status.message.parts)
    assert "key revoked" in said or "credential" in said, said
    assert not failed.artifacts


async def test_a_message_to_a_working_task_steers_it(
    stack: Stack, alice: A2AClient, scripted: ScriptedModelServer
) -> None:
    name = model_name()
    gate = Gate("the first reply, written before the steer")
    scripted.script(name, final("Only Lisbon.", hold=gate), final("Lisbon and Porto."))
    try:
        started = await one_task(alice, say("Plan the trip.", model=name, now=True))
        assert started.status.state == WORKING
        await gate.reached()
        steered = await one_task(alice, say("Also cover Porto.", task_id=started.id, now=True))
        assert steered.status.state == WORKING
        await eventually(
            lambda: any(e.type == "message_received" for e in stack.store.list_events(started.id)),
            "the steer received",
        )
    finally:
        gate.release()
    done = await eventually(lambda: _ended(alice, started.id), "the task completed after the steer")
    assert get_text_parts(done.artifacts[0].parts) == ["Lisbon and Porto."]
    assert "Also cover Porto." in json.dumps(scripted.requests_for(name)[1].body)


async def _ended(client: A2AClient, task_id: str) -> Task | None:
    task = await client.get_task(GetTaskRequest(id=task_id))
    return task if task.status.state in (COMPLETED, CANCELED) else None


async def test_cancel_task_cancels_and_an_ended_task_is_not_cancelable(
    alice: A2AClient, scripted: ScriptedModelServer
) -> None:
    name = model_name()
    gate = Gate("a model call the task waits on")
    scripted.script(name, final("never sent", hold=gate))
    try:
        started = await one_task(alice, say("Take your time.", model=name, now=True))
        await gate.reached()
        await alice.cancel_task(CancelTaskRequest(id=started.id))
        ended = await eventually(partial(_ended, alice, started.id), "the task canceled")
        assert ended.status.state == CANCELED
        with pytest.raises(TaskNotCancelableError):
            await alice.cancel_task(CancelTaskRequest(id=started.id))
    finally:
        gate.release()


async def test_b_cannot_see_get_answer_cancel_or_follow_a_task_of_a(
    stack: Stack, alice: A2AClient, bob: A2AClient, scripted: ScriptedModelServer
) -> None:
    name = model_name()
    scripted.script(name, ask(DATABASE), final("Done."))
    waiting = await one_task(alice, say("Set up the service.", model=name))
    assert waiting.status.state == INPUT_REQUIRED
    theirs, missing = waiting.id, f"task-nobody-{uuid.uuid4().hex[:8]}"

    async def refusals(task_id: str) -> list[str]:
        said = []
        calls = [
            bob.get_task(GetTaskRequest(id=task_id)),
            bob.cancel_task(CancelTaskRequest(id=task_id)),
            one_task(bob, say("PostgreSQL", task_id=task_id)),
            _drain(bob.subscribe(SubscribeToTaskRequest(id=task_id))),
        ]
        for call in calls:
            with pytest.raises(TaskNotFoundError) as refused:
                await call
            said.append(str(refused.value).replace(task_id, "TASK"))
        return said

    assert await refusals(theirs) == await refusals(missing), "word for word a missing one's"

    mine = await eventually(
        partial(_listed, alice, theirs), "A's task in A's list (visibility lags a little)"
    )
    listed = await bob.list_tasks(ListTasksRequest())
    assert not {t.id for t in mine} & {t.id for t in listed.tasks}, "none of A's in B's list"

    done = await one_task(alice, say("PostgreSQL", task_id=theirs))
    assert done.status.state == COMPLETED, "A still answers their own"
    assert any(e.type == "question_answered" for e in stack.store.list_events(theirs))


async def _listed(client: A2AClient, task_id: str) -> list[Task] | None:
    found = await client.list_tasks(ListTasksRequest())
    return list(found.tasks) if task_id in [t.id for t in found.tasks] else None


async def _drain(stream: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    return [e async for e in stream]


async def test_an_open_stream_ends_when_its_key_is_revoked(
    stack: Stack, scripted: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(a2a_handler, "RECHECK_SECONDS", 0.0)  # asked again before every event
    name = model_name()
    gate = Gate("the reply, held until the key is revoked")
    scripted.script(name, final("Too late.", hold=gate))
    stack.add("leaver")
    got: list[StreamResponse] = []
    try:
        async with connect(stack.url, stack.keys["leaver"]) as a2a:

            async def follow() -> None:
                async for event in a2a.send_message(say("Anything.", model=name)):
                    got.append(event)

            reading = asyncio.create_task(follow())
            await gate.reached()
            stack.store.revoke_principal(stack.names["leaver"], datetime.now(UTC))
            gate.release()
            [ended] = await asyncio.gather(reading, return_exceptions=True)
    finally:
        gate.release()
    assert isinstance(ended, Exception) and "revoked" in str(ended), ended
    states = [e.status_update.status.state for e in got if e.HasField("status_update")]
    assert COMPLETED not in states, "nothing after the revocation"


async def test_a_stream_with_nothing_to_say_outlives_httpxs_default_read_timeout(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    # The a2a-sdk client reads through httpx, whose default client gives up on a read after
    # 5 s: an A2A stream sends a comment every 2 s while the task waits quietly.
    name = model_name()
    scripted.script(name, ask(DATABASE), final("PostgreSQL it is."))
    async with connect(stack.url, stack.keys["a"], streaming=False) as polling:
        waiting = await one_task(polling, say("Set up the new service.", model=name))
        assert waiting.status.state == INPUT_REQUIRED
        headers = {"Authorization": f"Bearer {stack.keys['a']}"}
        async with httpx.AsyncClient(headers=headers, timeout=5.0) as http:
            config = ClientConfig(httpx_client=http, supported_protocol_bindings=["JSONRPC"])
            a2a = await ClientFactory(config).create_from_url(stack.url)
            events = a2a.subscribe(SubscribeToTaskRequest(id=waiting.id))
            try:
                pending = asyncio.ensure_future(anext(events))
                while (await asyncio.wait({pending}, timeout=8))[0]:
                    pending.result()  # the task as it stands; a cut stream raises here
                    pending = asyncio.ensure_future(anext(events))
                # 8 s with nothing to say, and the stream still open: the answer comes through.
                await one_task(polling, say("PostgreSQL", task_id=waiting.id))
                assert (await asyncio.wait_for(pending, 30)).WhichOneof("payload")
            finally:
                await events.aclose()
                await a2a.close()
    assert EventSourceResponse.DEFAULT_PING_INTERVAL == 15, "other event streams keep theirs"


async def test_the_agent_card_names_both_bindings_streaming_auth_and_the_resume_extension(
    stack: Stack,
) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        card = (await http.get("/.well-known/agent-card.json")).json()
        anonymous = await http.post("/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "x"})
    assert {i["protocolBinding"]: i["url"] for i in card["supportedInterfaces"]} == {
        "JSONRPC": f"{stack.url}/a2a",
        "HTTP+JSON": f"{stack.url}/a2a/rest",
    }
    assert card["capabilities"]["streaming"] is True
    assert card["capabilities"]["pushNotifications"] is True
    assert [e["uri"] for e in card["capabilities"]["extensions"]] == [RESUME_EXTENSION]
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert anonymous.status_code == 401, "no A2A call without a credential"


def resumed(seq: int) -> ClientCallContext:
    """How a client that knows errands' resume extension follows on after ``seq``."""
    return ClientCallContext(
        service_parameters={"Last-Event-ID": str(seq), "A2A-Extensions": RESUME_EXTENSION}
    )


@asynccontextmanager
async def gateway(env: dict[str, str]) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """`errands serve` on a free loopback port: its URL and its process (killed at the end)."""
    async with running_cli(env, "serve", "--host", "127.0.0.1", "--port", "0") as proc:
        started = await read_stderr_until(proc, "errands gateway on")
        url = started.split("errands gateway on ")[1].split()[0]
        assert proc.stderr is not None
        draining = asyncio.create_task(proc.stderr.read())  # a full pipe would stall it
        try:
            yield url, proc
        finally:
            draining.cancel()


async def test_a_stream_cut_by_a_killed_gateway_and_worker_resumes_on_another_gateway(
    store: SessionStore,
    scripted: ScriptedModelServer,
    process_workers: ProcessWorkers,
    cli_env: dict[str, str],
) -> None:
    """Two `errands serve` processes and a `python worker.py` on one dev server and store: the
    first gateway is killed -9 while it streams the task, then the worker while two branches
    run; the client subscribes to the second gateway with the Last-Event-ID of the last event
    it received and gets every later event once, in order, to completed."""
    name = model_name()
    in_flight = Gate("the two branch calls in flight when the worker dies")

    def branch(request: Any) -> Reply:
        first_two = len(convo.branch_requests) <= 2
        return Reply(text="branch done", hold=in_flight if first_two else None)

    convo = Conversation(
        [delegate("part 1", "part 2"), final(REPLY, chunk_chars=20, chunk_delay=0.03)],
        branch,
        branches=4,  # the two cut off by the kill, each asked once more
    ).install(scripted, name)
    env = {**cli_env, "ERRANDS_TASK_QUEUE": process_workers.queue, "ERRANDS_MODEL_TIMEOUT": "4"}
    got: list[StreamResponse] = []

    def branch_calls_logged(task_id: str) -> bool:
        events = store.list_events(task_id)
        started = [
            e for e in events if e.type == "model_call_started" and e.data["where"] != "main"
        ]
        return len(started) == 2 and bool(got) and seq_of(got[-1]) >= started[-1].seq

    worker = spawn_worker(process_workers.env)
    try:
        async with gateway(env) as (first_url, first), gateway(env) as (second_url, _):
            async with connect(first_url) as a2a:

                async def follow() -> None:
                    async for event in a2a.send_message(say("A long job.", model=name)):
                        got.append(event)

                reading = asyncio.create_task(follow())
                await in_flight.reached(2)
                await eventually(lambda: got, "the task, first on the stream")
                task_id = got[0].task.id
                await eventually(
                    lambda: branch_calls_logged(task_id), "the branch calls streamed to the client"
                )
                first.kill()  # kill -9 of the gateway mid-stream
                await first.wait()
                [cut] = await asyncio.gather(reading, return_exceptions=True)
                assert isinstance(cut, Exception), "the stream was cut, not ended"
            kill_worker(worker)
            with worker_process(process_workers.env):
                async with connect(second_url) as again:
                    after = seq_of(got[-1])
                    follow_on = again.subscribe(
                        SubscribeToTaskRequest(id=task_id), context=resumed(after)
                    )
                    rest = [e async for e in follow_on]
    finally:
        in_flight.release()
        if worker.poll() is None:
            kill_worker(worker)

    streamed = got[1:] + rest
    assert_each_event_once([seq_of(e) for e in streamed], store, task_id)
    assert all(e.WhichOneof("payload") != "task" for e in rest), "no snapshot on a resume"
    appended = [e for e in rest if e.WhichOneof("payload") == "artifact_update"]
    assert any(e.artifact_update.append for e in appended), "the live text, on the second"
    last = streamed[-1]
    assert last.WhichOneof("payload") == "status_update"
    assert last.status_update.status.state == COMPLETED
    assert text_of(streamed) == REPLY
    assert len(convo.branch_requests) == 4, "the two cut off were asked again"


# -- the mapping alone (no server) ----------------------------------------------------------------


def logged(seq: int, type_: str, **data: Any) -> StoredEvent:
    at = "2026-12-04T10:00:00+00:00"
    return StoredEvent(task_id="t", key=f"k{seq}", type=type_, data=data, seq=seq, at=at)


def delta(seq: int, text: str, attempt: int = 1, superseded: bool = False) -> StoredEvent:
    fields = {"where": "main", "step": 0, "attempt": attempt, "superseded": superseded}
    return logged(seq, "reply_delta", text=text, **fields)


@pytest.mark.fast
def test_live_text_appends_and_a_superseded_attempt_resets_the_reply_artifact() -> None:
    read = Progress("t", "s")
    out = [
        read.apply(e)
        for e in (
            delta(1, "Hel"),
            delta(2, "lo"),
            delta(3, "", attempt=2, superseded=True),
            delta(4, "Bye", attempt=2),
            delta(5, "late", attempt=1),
        )
    ]
    kinds = [type(u).__name__ for [u] in out]
    assert kinds[:4] == ["TaskArtifactUpdateEvent"] * 4
    assert [u.append for [u] in out[:4]] == [False, True, False, True]  # type: ignore[union-attr]
    assert kinds[4] == "TaskStatusUpdateEvent", "a late delta of an earlier attempt shows nothing"
    assert read.text == "Bye" and read.state == WORKING
    whole, completed = read.apply(logged(6, "replied", replied_by="model"), "Bye.")
    assert isinstance(whole, TaskArtifactUpdateEvent) and whole.last_chunk and not whole.append
    assert completed.status.state == COMPLETED and completed.metadata["errands.seq"] == "6"
    assert get_text_parts(read.task().artifacts[0].parts) == ["Bye."]


@pytest.mark.fast
def test_a_question_or_an_approval_is_input_required_until_answered() -> None:
    read = Progress("t", "s")
    [asked] = read.apply(logged(1, "question_asked", question_set_id="qs1", headers=["DB"]))
    assert asked.status.state == INPUT_REQUIRED
    read.apply(logged(2, "question_answered", question_set_id="qs1", status="answered"))
    assert read.state == WORKING
    [waits] = read.apply(logged(3, "approval_requested", approval_id="ap1", tool="search"))
    [call] = get_data_parts(waits.status.message.parts)  # type: ignore[union-attr]
    assert call["pending_approval"]["tool"] == "search"
    read.apply(logged(4, "approval_answered", approval_id="ap1", decision="approve"))
    assert read.state == WORKING


@pytest.mark.fast
def test_plain_text_answers_the_one_question_as_other() -> None:
    choice = {"questions": [{"id": "q1", "type": "multiple_choice"}]}
    text = {"questions": [{"id": "q1", "type": "text"}]}
    two = {"questions": [{"id": "q1"}, {"id": "q2"}]}
    said = Incoming("a managed one", None, {})
    assert said.answers(choice) == {"q1": ["Other: a managed one"]}
    assert said.answers(text) == {"q1": "a managed one"}
    with pytest.raises(InvalidRequest, match="plain text answers one question"):
        said.answers(two)
    given = Incoming("", {"answers": {"q2": ["SQLite"]}}, {})
    assert given.answers(two) == {"q2": ["SQLite"]}


@pytest.mark.fast
def test_last_event_id_is_a_sequence_number() -> None:
    assert resume_point(None) is None
    assert resume_point("42") == 42
    with pytest.raises(InvalidParamsError, match="Last-Event-ID"):
        resume_point("42; DROP")


@pytest.mark.fast
def test_the_card_declares_oidc_when_an_issuer_is_configured() -> None:
    issuer = "https://login.example.org/realm"
    settings = Settings(ERRANDS_OIDC_ISSUER=issuer, ERRANDS_OIDC_AUDIENCE="errands")
    card = agent_card("https://tasks.example.org/", settings, "/a2a")
    oidc = card.security_schemes["oidc"].open_id_connect_security_scheme
    assert oidc.open_id_connect_url == f"{issuer}/.well-known/openid-configuration"
    assert card.supported_interfaces[0].url == "https://tasks.example.org/a2a"
    assert card.capabilities.push_notifications and card.capabilities.streaming
