"""The HTTP gateway against the real dev server, worker and scripted model (issue 6, parts 1-2)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from errands.adapters.scripted import RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.client import Client as ErrandsClient
from errands.errors import ConfigError
from errands.gateway import check_binding, create_app, is_loopback, serve, serving
from errands.settings import Settings
from tests.helpers import DATABASE, Conversation, ask, delegate, eventually, final, history_events

WORKFLOW_TASK_EVENTS = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
}


def answer_branch(request: RecordedRequest) -> Reply:
    prompt = next(m["content"] for m in request.body["messages"] if m["role"] == "user")
    return Reply(text=f"found: {prompt.splitlines()[0]}")


def session_id() -> str:
    return f"gw-{uuid.uuid4().hex[:8]}"


# -- the running gateway --------------------------------------------------------------------


@dataclass
class Gateway:
    app: FastAPI
    url: str


@pytest.fixture(scope="module")
async def gateway(
    client: Client, settings: Settings, store: SessionStore, worker: Any
) -> AsyncIterator[Gateway]:
    app = create_app(ErrandsClient(client, settings, store=store), token=None)
    async with serving(app) as url:
        yield Gateway(app, url)


@pytest.fixture
async def http(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as h:
        yield h


@dataclass
class Event:
    id: str | None
    type: str
    data: dict[str, Any]


@dataclass
class Watcher:
    """One SSE client reading a task's stream in the background."""

    events: list[Event] = field(default_factory=list)
    status: int = 0
    task: asyncio.Task[None] | None = None

    stream: str = "events"

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    async def until(self, type_: str, timeout: float = 60) -> Event:
        """The latest ``type_`` event, once the stream has brought one."""

        def found() -> Event | None:
            events = [e for e in self.events if e.type == type_]
            if not events and self.task is not None and self.task.done():
                self.task.result()
                raise AssertionError(f"the stream ended without {type_}: {self.types()}")
            return events[-1] if events else None

        return await eventually(found, f"a {type_} event on the stream", timeout=timeout)

    async def finished(self, timeout: float = 30) -> list[str]:
        assert self.task is not None
        await asyncio.wait_for(self.task, timeout)
        return self.types()


async def read_stream(
    http: httpx.AsyncClient, task_id: str, into: Watcher, headers: dict[str, str] | None = None
) -> None:
    path = f"/v1/tasks/{task_id}/{into.stream}"
    async with http.stream("GET", path, headers=headers) as response:
        into.status = response.status_code
        frame: dict[str, Any] = {}
        async for line in response.aiter_lines():
            if line == "":
                if "data" in frame:
                    into.events.append(
                        Event(
                            frame.get("id"),
                            frame.get("event", "message"),
                            json.loads(frame["data"]),
                        )
                    )
                frame = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                frame[name] = value[1:] if value.startswith(" ") else value


def watch(http: httpx.AsyncClient, task_id: str, stream: str = "events", **kwargs: Any) -> Watcher:
    """Read ``/v1/tasks/{task_id}/{stream}``: the event log (``events``, or ``events?after=N``)."""
    watcher = Watcher(stream=stream)
    watcher.task = asyncio.create_task(read_stream(http, task_id, watcher, **kwargs))
    return watcher


async def start(http: httpx.AsyncClient, session: str, text: str, model: str) -> str:
    response = await http.post(f"/v1/sessions/{session}/tasks", json={"text": text, "model": model})
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["session_id"] == session and body["status"] == "running"
    return str(body["task_id"])


async def until_state(http: httpx.AsyncClient, task_id: str, status: str) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        state = (await http.get(f"/v1/tasks/{task_id}")).json()
        return dict(state) if state.get("status") == status else None

    return await eventually(reached, f"task {task_id} to be {status}")


# -- the whole flow -------------------------------------------------------------------------


MAIN_STEPS = ("round_started", "delegated", "question_asked", "question_answered", "replied")


async def test_a_delegating_task_that_asks_streams_its_log_in_order_and_replies(
    http: httpx.AsyncClient, scripted: ScriptedModelServer, store: SessionStore
) -> None:
    Conversation(
        [delegate("About Lisbon", "About Porto"), ask(DATABASE), final("Lisbon, on PostgreSQL.")],
        answer_branch,
        branches=2,
    ).install(scripted, "gpt-gw")
    session = session_id()
    task = await start(http, session, "Plan the trip service", "openai:gpt-gw")
    watcher = watch(http, task)

    asked = await watcher.until("question_asked")
    assert asked.data["headers"] == ["Database"]
    # The card's question comes from the task, which opens it once the log says it asked.
    state = await until_state(http, task, "waiting_for_user")
    question = state["pending_question"]
    assert question["id"] == asked.data["question_set_id"]
    assert [o["label"] for o in question["questions"][0]["options"]] == [
        "PostgreSQL",
        "SQLite",
        "Other",
    ]

    answered = await http.post(f"/v1/tasks/{task}/answer", json={"answers": {"q1": ["PostgreSQL"]}})
    assert answered.status_code == 200, answered.text
    assert answered.json() == {
        "task_id": task,
        "accepted": True,
        "question_set_id": question["id"],
        "status": "answered",
    }

    types = await watcher.finished()
    assert [t for t in types if t in MAIN_STEPS] == [
        "round_started",
        "delegated",
        "round_started",
        "question_asked",
        "question_answered",
        "replied",
    ]
    assert Counter(types)["branch_started"] == Counter(types)["branch_finished"] == 2
    assert watcher.status == 200
    by_type = {e.type: e for e in watcher.events}
    assert by_type["delegated"].data["subtasks"] == 2
    assert by_type["delegated"].data["types"] == ["general", "general"]
    assert {e.data["status"] for e in watcher.events if e.type == "branch_finished"} == {
        "completed"
    }
    assert [e.data["round"] for e in watcher.events if e.type == "round_started"] == [0, 1]
    assert by_type["question_answered"].data["question_set_id"] == question["id"]
    assert by_type["replied"].data["chars"] == len("Lisbon, on PostgreSQL.")

    state = (await http.get(f"/v1/tasks/{task}")).json()
    assert state["status"] == "replied" and state["reply"] == "Lisbon, on PostgreSQL."
    assert {"task_id", "session_id", "status", "reply", "error", "usage"} <= set(state)

    messages = (await http.get(f"/v1/sessions/{session}/messages")).json()["messages"]
    assert [m["id"] for m in messages] == [m.id for m in store.list_session(session)]
    assert f"task:{task}:reply" in [m["id"] for m in messages]
    later = (await http.get(f"/v1/sessions/{session}/messages?after=1")).json()["messages"]
    assert [m["seq"] for m in later] == [m["seq"] for m in messages[1:]]
    gone = await http.get(f"/v1/tasks/{task}/progress")
    assert gone.status_code == 404, "the stream polled from task state is gone: /events it is"


async def test_the_event_log_streams_a_delegating_task_once_in_order_and_resumes_after_an_id(
    http: httpx.AsyncClient, scripted: ScriptedModelServer
) -> None:
    Conversation(
        [delegate("One", "Two", "Three"), final("All three.")], answer_branch, branches=3
    ).install(scripted, "gpt-gw-log")
    task = await start(http, session_id(), "three parts", "openai:gpt-gw-log")
    full = watch(http, task, "events")
    types = await full.finished()

    assert full.status == 200
    assert [e.id for e in full.events] == [str(e.data["seq"]) for e in full.events]
    assert [e.data["seq"] for e in full.events] == list(range(1, len(full.events) + 1))
    assert all(e.type == e.data["type"] and e.data["task_id"] == task for e in full.events)
    counts = Counter(types)
    assert (counts["round_started"], counts["delegated"], counts["replied"]) == (2, 1, 1)
    assert (counts["branch_started"], counts["branch_finished"]) == (3, 3)
    main_calls = [e for e in full.events if e.type == "model_call_finished"]
    assert [e.data["where"] for e in main_calls].count("main") == 2
    delegated = next(e for e in full.events if e.type == "delegated")
    assert delegated.data["subtasks"] == 3
    # In causal order: round 0, its delegation, each branch's start before its end, all of
    # them before round 1, and the reply last.
    at = {
        (e.type, e.data.get("ordinal"), e.data.get("round")): k for k, e in enumerate(full.events)
    }
    assert at[("round_started", None, 0)] < at[("delegated", None, 0)]
    for ordinal in (1, 2, 3):
        started, finished = at[("branch_started", ordinal, 0)], at[("branch_finished", ordinal, 0)]
        assert at[("delegated", None, 0)] < started < finished < at[("round_started", None, 1)]
    assert types[-1] == "replied"

    resumed = watch(http, task, "events", headers={"Last-Event-ID": "5"})
    await resumed.finished()
    assert [e.data["seq"] for e in resumed.events] == list(range(6, len(full.events) + 1))
    assert [e.data for e in resumed.events] == [e.data for e in full.events[5:]]
    after = watch(http, task, "events?after=5")
    await after.finished()
    assert [e.data for e in after.events] == [e.data for e in full.events[5:]]
    last = full.events[-1].id or ""
    ended = await http.get(f"/v1/tasks/{task}/events", headers={"Last-Event-ID": last})
    assert ended.status_code == 204, "an EventSource stops reconnecting once all is read"
    bad = await http.get(f"/v1/tasks/{task}/events", headers={"Last-Event-ID": "end"})
    assert bad.status_code == 422 and "sequence number" in bad.json()["detail"]


async def test_watching_a_task_adds_no_history_events(
    http: httpx.AsyncClient, client: Client, scripted: ScriptedModelServer
) -> None:
    tasks = {}
    for name in ("watched", "alone"):
        model = f"gpt-gw-{name}"
        Conversation(
            [delegate("A", "B"), ask(DATABASE), final("ok")], answer_branch, branches=2
        ).install(scripted, model)
        tasks[name] = await start(http, session_id(), "history", f"openai:{model}")
    watcher = watch(http, tasks["watched"])
    for task in tasks.values():
        await until_state(http, task, "waiting_for_user")
        reply = await http.post(f"/v1/tasks/{task}/answer", json={"answers": {"q1": ["SQLite"]}})
        assert reply.status_code == 200, reply.text
    await watcher.finished()
    await until_state(http, tasks["alone"], "replied")

    counts = {}
    for name, task in tasks.items():
        events = await history_events(client.get_workflow_handle(task))
        # Workflow-task events depend on how the branches' completions happened to batch.
        counts[name] = Counter(
            e.event_type for e in events if e.event_type not in WORKFLOW_TASK_EVENTS
        )
    assert counts["watched"] == counts["alone"], "the stream added no event to the history"


# -- side questions, cancel -----------------------------------------------------------------


async def test_a_side_question_is_answered_while_the_task_waits(
    http: httpx.AsyncClient, scripted: ScriptedModelServer, store: SessionStore
) -> None:
    scripted.script("gpt-gw-btw", ask(DATABASE), Reply(text="Waiting on your choice."), final("ok"))
    session = session_id()
    task = await start(http, session, "btw", "openai:gpt-gw-btw")
    await until_state(http, task, "waiting_for_user")
    before = store.list_session(session)

    answered = await http.post(f"/v1/tasks/{task}/btw", json={"question": "status?"})
    assert answered.status_code == 200, answered.text
    assert answered.json()["answer"] == "Waiting on your choice."
    assert store.list_session(session) == before, "a side question adds nothing to the session"
    assert (await http.get(f"/v1/tasks/{task}")).json()["status"] == "waiting_for_user"

    await http.post(f"/v1/tasks/{task}/answer", json={"answers": {"q1": "PostgreSQL"}})
    await until_state(http, task, "replied")


async def test_a_task_is_canceled_through_the_api_and_its_stream_says_so(
    http: httpx.AsyncClient, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-gw-cancel", ask(DATABASE))
    session = session_id()
    task = await start(http, session, "cancel", "openai:gpt-gw-cancel")
    watcher = watch(http, task)
    await watcher.until("question_asked")

    canceled = await http.post(f"/v1/tasks/{task}/cancel")
    assert canceled.status_code == 202, canceled.text
    assert (await watcher.finished())[-1] == "canceled"
    state = await until_state(http, task, "canceled")
    assert state["error"]["kind"] == "canceled" and state["session_id"] == session
    again = await http.post(f"/v1/tasks/{task}/cancel")
    assert again.status_code == 409 and "has ended" in again.json()["detail"]


# -- refusals -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def parked(gateway: Gateway, model_server: ScriptedModelServer) -> AsyncIterator[str]:
    """A task parked on a question for the refusal tests; answered and finished at the end."""
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as h:
        model_server.script("gpt-gw-parked", ask(DATABASE))
        task = await start(h, session_id(), "parked", "openai:gpt-gw-parked")
        await until_state(h, task, "waiting_for_user")
        yield task
        await h.post(f"/v1/tasks/{task}/cancel")
        await until_state(h, task, "canceled")


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "says"),
    [
        ("GET", "/v1/tasks/task-nope-1", None, 404, "check the task id"),
        ("POST", "/v1/tasks/task-nope-1/answer", {"answers": {}}, 404, "check the task id"),
        ("POST", "/v1/tasks/task-nope-1/btw", {"question": "hi"}, 404, "check the task id"),
        ("POST", "/v1/tasks/task-nope-1/cancel", None, 404, "check the task id"),
        ("GET", "/v1/tasks/task-nope-1/events", None, 404, "check the task id"),
        ("POST", "/v1/sessions/s1/tasks", b"{not json", 422, "JSON decode error"),
        ("POST", "/v1/sessions/s1/tasks", {}, 422, "body.text: Field required"),
        ("POST", "/v1/sessions/s1/tasks", [1], 422, "Content-Type: application/json"),
        ("POST", "/v1/sessions/s1/tasks", {"text": "  "}, 422, "text is blank"),
        ("POST", "/v1/sessions/s1/tasks", {"text": "x", "modle": "a"}, 422, "body.modle"),
        ("POST", "/v1/sessions/s1/tasks", {"text": "x", "model": "gpt"}, 422, "provider:model"),
        ("POST", "/v1/sessions/bad%20id/tasks", {"text": "x"}, 422, "path.session_id"),
        ("GET", "/v1/sessions/s1/messages?after=-1", None, 422, "query.after"),
        ("GET", "/v1/nothing-here", None, 404, "see /openapi.json"),
        ("DELETE", "/v1/tasks/task-nope-1", None, 405, "not allowed"),
        ("POST", "/v1/tasks/{parked}/answer", {"answers": {"q1": "MongoDB"}}, 422, "PostgreSQL"),
        ("POST", "/v1/tasks/{parked}/answer", {"status": "answered"}, 422, 'give "answers"'),
        ("POST", "/v1/tasks/{parked}/answer", {"answers": {}, "question_set_id": "x"}, 409, "x"),
        ("POST", "/v1/tasks/{parked}/btw", {"question": ""}, 422, "side question is blank"),
    ],
)
async def test_a_bad_request_gets_a_4xx_saying_what_to_fix(
    http: httpx.AsyncClient,
    parked: str,
    method: str,
    path: str,
    body: Any,
    status: int,
    says: str,
) -> None:
    kwargs: dict[str, Any] = {"json": body}
    if isinstance(body, bytes):
        kwargs = {"content": body, "headers": {"content-type": "application/json"}}
    response = await http.request(method, path.replace("{parked}", parked), **kwargs)
    assert response.status_code == status, response.text
    assert says in response.json()["detail"]
    assert (await http.get(f"/v1/tasks/{parked}")).json()["status"] == "waiting_for_user"


async def test_answering_a_task_with_no_question_is_a_conflict(
    http: httpx.AsyncClient, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-gw-noq", final("no questions"))
    task = await start(http, session_id(), "noq", "openai:gpt-gw-noq")
    await until_state(http, task, "replied")
    response = await http.post(f"/v1/tasks/{task}/answer", json={"answers": {}})
    assert response.status_code == 409 and "has ended (completed)" in response.json()["detail"]


async def test_a_side_question_to_a_task_no_worker_serves_is_a_503_naming_the_queue(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    """Without a worker the update would wait for one for ever; the request must come back."""
    queue = f"nobody-{uuid.uuid4().hex[:6]}"
    lonely = settings.model_copy(update={"task_queue": queue})
    app = create_app(ErrandsClient(client, lonely, store=store), token=None)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as h:
        task = await start(h, session_id(), "anyone there?", "openai:gpt-gw-lonely")
        try:
            response = await h.post(f"/v1/tasks/{task}/btw", json={"question": "status?"})
            assert response.status_code == 503, response.text
            assert f"no worker on task queue {queue}" in response.json()["detail"]
        finally:
            await client.get_workflow_handle(task).terminate("test cleanup")


# -- property: nothing malformed gets a 5xx or changes anything ----------------------------

LABELS = {"postgresql", "sqlite"}
junk = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
any_id = st.text(min_size=0, max_size=40)
raw_bodies = st.binary(max_size=40) | st.just(b"") | st.just(b"{") | st.just(b"[1,")
bad_task = (
    st.fixed_dictionaries({}, optional={"model": junk, "headless": junk})
    | st.fixed_dictionaries({"text": junk.filter(lambda v: not isinstance(v, str))})
    | st.fixed_dictionaries({"text": st.sampled_from(["", " ", "\n\t"])})
    | st.fixed_dictionaries({"text": st.text(min_size=1)}, optional={"extra": junk}).filter(
        lambda d: "extra" in d
    )
    | junk.filter(lambda v: not isinstance(v, dict))
)
bad_value = st.text(max_size=12).filter(
    lambda v: (
        v.strip().lower() not in LABELS
        and not v.strip().lower().startswith("other:")
        and v.strip() != ""
    )
)
bad_answer = (
    st.fixed_dictionaries({"answers": st.dictionaries(st.just("q1"), bad_value, min_size=1)})
    | st.fixed_dictionaries(
        {
            "answers": st.dictionaries(
                st.text(max_size=4).filter(lambda k: k != "q1"), bad_value, min_size=1
            )
        }
    )
    | st.fixed_dictionaries({"answers": junk.filter(lambda v: not isinstance(v, dict))})
    | st.fixed_dictionaries({"answers": st.just({}), "status": st.text(max_size=8)}).filter(
        lambda d: d["status"] not in ("answered", "cancelled")
    )
    | st.fixed_dictionaries({}, optional={"question_set_id": junk, "extra": junk})
    | junk.filter(lambda v: not isinstance(v, dict))
)
bad_btw = (
    st.fixed_dictionaries({"question": st.sampled_from(["", "   "])})
    | st.fixed_dictionaries({"question": junk.filter(lambda v: not isinstance(v, str))})
    | st.fixed_dictionaries({}, optional={"q": junk})
    | junk.filter(lambda v: not isinstance(v, dict))
)


def requests(parked: str, ended: str, session: str) -> st.SearchStrategy[tuple[str, str, Any]]:
    """(method, path, body): a body of bytes is sent raw, anything else as JSON."""
    body = raw_bodies | junk
    seg = any_id.map(lambda s: quote(s, safe=""))
    return st.one_of(
        st.tuples(st.just("POST"), seg.map(lambda s: f"/v1/sessions/{s}/tasks"), bad_task),
        st.tuples(st.just("POST"), st.just(f"/v1/sessions/{session}/tasks"), bad_task | raw_bodies),
        st.tuples(st.just("GET"), seg.map(lambda s: f"/v1/tasks/{s}"), st.none()),
        st.tuples(st.just("POST"), seg.map(lambda s: f"/v1/tasks/{s}/answer"), body),
        st.tuples(st.just("POST"), st.just(f"/v1/tasks/{parked}/answer"), bad_answer | raw_bodies),
        st.tuples(st.just("POST"), st.just(f"/v1/tasks/{ended}/answer"), body),
        st.tuples(st.just("POST"), seg.map(lambda s: f"/v1/tasks/{s}/btw"), body),
        st.tuples(st.just("POST"), st.just(f"/v1/tasks/{parked}/btw"), bad_btw | raw_bodies),
        st.tuples(st.just("POST"), seg.map(lambda s: f"/v1/tasks/{s}/cancel"), body),
        st.tuples(st.just("POST"), st.just(f"/v1/tasks/{ended}/cancel"), body),
        st.tuples(st.just("GET"), seg.map(lambda s: f"/v1/sessions/{s}/messages"), st.none()),
        st.tuples(
            st.just("GET"),
            st.text(max_size=6)
            .filter(lambda s: not s.isdigit())
            .map(lambda a: f"/v1/sessions/{session}/messages?after={quote(a)}"),
            st.none(),
        ),
        st.tuples(st.just("GET"), seg.map(lambda s: f"/v1/tasks/{s}/events"), st.none()),
        st.tuples(
            st.sampled_from(["PUT", "DELETE", "PATCH"]),
            st.sampled_from([f"/v1/tasks/{parked}", f"/v1/sessions/{session}/tasks"]),
            body,
        ),
    )


async def test_malformed_requests_to_every_endpoint_get_a_4xx_and_change_nothing(
    gateway: Gateway, client: Client, store: SessionStore, scripted: ScriptedModelServer
) -> None:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as h:
        scripted.script("gpt-gw-prop", ask(DATABASE), final("finished"))
        ended = await start(h, session_id(), "ended", "openai:gpt-gw-prop")
        parked_session = session_id()
        scripted.script("gpt-gw-prop2", ask(DATABASE))
        parked = await start(h, parked_session, "parked", "openai:gpt-gw-prop2")
        await until_state(h, ended, "waiting_for_user")
        await h.post(f"/v1/tasks/{ended}/answer", json={"answers": {"q1": "SQLite"}})
        await until_state(h, ended, "replied")
        before = (await h.get(f"/v1/tasks/{parked}")).json()
    histories = {
        t: len(await history_events(client.get_workflow_handle(t))) for t in (parked, ended)
    }
    rows = {s: store.list_session(s) for s in (parked_session, before["session_id"])}
    session = session_id()
    strategy = requests(parked, ended, session)
    seen: Counter[int] = Counter()

    @hypothesis_settings(
        max_examples=150,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(strategy)
    def property_(request: tuple[str, str, Any]) -> None:
        method, path, body = request
        kwargs: dict[str, Any] = {}
        if isinstance(body, bytes):
            kwargs = {"content": body, "headers": {"content-type": "application/json"}}
        elif body is not None:
            kwargs = {"json": body}
        response = sync.request(method, path, **kwargs)
        seen[response.status_code] += 1
        assert response.status_code < 500, (request, response.status_code, response.text)
        if response.status_code >= 400:
            detail = response.json()["detail"]
            assert isinstance(detail, str) and detail

    # Run off the event loop: the gateway and the worker serve from it meanwhile.
    with httpx.Client(base_url=gateway.url, timeout=60) as sync:
        await asyncio.to_thread(property_)

    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as h:
        after = (await h.get(f"/v1/tasks/{parked}")).json()
        assert after == before, "no rejected request changed the parked task"
        assert (await h.get(f"/v1/tasks/{ended}")).json()["status"] == "replied"
        for task, count in histories.items():
            assert len(await history_events(client.get_workflow_handle(task))) == count
        assert {s: store.list_session(s) for s in rows} == rows
        assert store.list_session(session) == [], "no rejected request started a task"
        assert set(seen) <= {200, 404, 405, 409, 422}, seen  # 200: reads of empty sessions
        await h.post(f"/v1/tasks/{parked}/cancel")
        await until_state(h, parked, "canceled")


# -- auth and binding -----------------------------------------------------------------------


async def test_a_configured_token_is_required_on_every_api_call(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    app = create_app(ErrandsClient(client, settings, store=store), token="s3cret-token")
    session = session_id()
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as h:
        for method, path, body in [
            ("POST", f"/v1/sessions/{session}/tasks", {"text": "hi"}),
            ("GET", "/v1/tasks/task-x-1", None),
            ("POST", "/v1/tasks/task-x-1/answer", {"answers": {}}),
            ("POST", "/v1/tasks/task-x-1/btw", {"question": "q"}),
            ("POST", "/v1/tasks/task-x-1/cancel", None),
            ("GET", f"/v1/sessions/{session}/messages", None),
            ("GET", "/v1/tasks/task-x-1/events", None),
            ("GET", "/v1/tasks", None),
            ("GET", "/v1/info", None),
        ]:
            missing = await h.request(method, path, json=body)
            assert missing.status_code == 401, (path, missing.text)
            assert "Authorization: Bearer" in missing.json()["detail"]
            assert missing.headers["www-authenticate"].startswith("Bearer")
        # Four wrong tokens, the right one between them: a right token forgives nothing, or a
        # holder of a valid key could guess on at full speed. The fifth wrong one is slowed.
        for method, path, body in [
            ("GET", "/v1/tasks/task-x-1", None),
            ("POST", "/v1/tasks/task-x-1/answer", {"answers": {}}),
            ("POST", "/v1/tasks/task-x-1/cancel", None),
            ("GET", "/v1/tasks", None),
        ]:
            wrong = await h.request(
                method, path, json=body, headers={"Authorization": "Bearer nope"}
            )
            assert wrong.status_code == 401 and "wrong" in wrong.json()["detail"]
            right = await h.get("/v1/info", headers={"Authorization": "Bearer s3cret-token"})
            assert right.status_code == 200
        assert store.list_session(session) == []
        right = await h.get("/v1/tasks/task-x-1", headers={"Authorization": "Bearer s3cret-token"})
        assert right.status_code == 404
        fifth = await h.get("/v1/info", headers={"Authorization": "Bearer nope"})
        assert fifth.status_code == 401
        slowed = await h.get("/v1/info", headers={"Authorization": "Bearer s3cret-token"})
        assert slowed.status_code == 429 and "retry-after" in slowed.headers
        assert (await h.get("/")).status_code == 200, "the page itself holds no data"
        assert (await h.get("/openapi.json")).status_code == 200


@pytest.mark.fast
def test_the_openapi_document_lists_every_operation() -> None:
    app = create_app(ErrandsClient(None, Settings()), token=None)
    paths = app.openapi()["paths"]
    assert set(paths) == {
        "/v1/sessions/{session_id}/tasks",
        "/v1/tasks/{task_id}",
        "/v1/tasks/{task_id}/answer",
        "/v1/tasks/{task_id}/approval",
        "/v1/tasks/{task_id}/messages",
        "/v1/tasks/{task_id}/btw",
        "/v1/tasks/{task_id}/cancel",
        "/v1/sessions/{session_id}/messages",
        "/v1/tasks/{task_id}/events",
        "/v1/tasks/{task_id}/notifications",
        "/v1/schedules",
        "/v1/schedules/{name}",
        "/v1/schedules/{name}/pause",
        "/v1/schedules/{name}/resume",
        "/v1/schedules/{name}/trigger",
        "/v1/tasks",
        "/v1/info",
        "/v1/me",
    }


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.5", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("gateway.internal", False),
    ],
)
@pytest.mark.fast
def test_only_loopback_addresses_count_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.fast
async def test_the_gateway_refuses_to_bind_beyond_loopback_without_a_token() -> None:
    with pytest.raises(ConfigError, match="ERRANDS_API_TOKEN"):
        await serve(Settings(), "0.0.0.0", 0, None)
    check_binding("0.0.0.0", "a-token")
    check_binding("127.0.0.1", None)


async def test_the_task_list_shows_a_sessions_tasks_newest_first_and_info_links_the_ui(
    http: httpx.AsyncClient, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-gw-list", final("first"), final("second"))
    session = session_id()
    first = await start(http, session, "the first task", "openai:gpt-gw-list")
    await until_state(http, first, "replied")
    second = await start(http, session, "the second task", "openai:gpt-gw-list")
    await until_state(http, second, "replied")

    async def both_listed() -> list[dict[str, Any]] | None:
        response = await http.get(f"/v1/tasks?session={session}")
        assert response.status_code == 200, response.text
        listed: list[dict[str, Any]] = response.json()["tasks"]
        done = len(listed) == 2 and all(t["status"] == "completed" for t in listed)
        return listed if done else None

    # Visibility lags a start by a moment.
    listed = await eventually(both_listed, "both tasks completed in visibility")
    assert [t["task_id"] for t in listed] == [second, first]
    assert [t["summary"] for t in listed] == ["the second task", "the first task"]
    assert {t["session_id"] for t in listed} == {session}
    assert (await http.get("/v1/tasks?session=bad/one")).status_code == 422

    info = (await http.get("/v1/info")).json()
    assert info["namespace"] == "default"
    assert info["temporal_ui"] is None or info["temporal_ui"].startswith("http")


async def test_a_message_queued_on_an_ended_task_over_http_starts_the_next_task(
    http: httpx.AsyncClient, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-gw-queue", final("first"), final("second"))
    session = session_id()
    first = await start(http, session, "the first task", "openai:gpt-gw-queue")
    await until_state(http, first, "replied")

    queued = await http.post(
        f"/v1/tasks/{first}/messages", json={"text": "and then this", "mode": "queue"}
    )
    steered = await http.post(f"/v1/tasks/{first}/messages", json={"text": "too late"})

    assert queued.status_code == 200, queued.text
    assert queued.json()["status"] == "started"
    next_task = queued.json()["task_id"]
    state = await until_state(http, next_task, "replied")
    assert (state["session_id"], state["reply"]) == (session, "second")
    assert steered.status_code == 409, steered.text
    assert f"errands run --session {session} TEXT" in steered.text
