"""errands as an MCP server (issue 28, acceptance 4 and 5): the real ``mcp`` client over stdio
(``errands mcp`` as a subprocess, acting as the operator) and over Streamable HTTP (a FastAPI
app with ``mount_mcp`` served by uvicorn on loopback, real API keys), against the real dev
server, a worker and the scripted model.

- the plain tools start, answer and finish a task that asks a question; a refused answer says
  why and changes nothing;
- a client declaring form elicitation gets the question as a form from ``run_task``, on both
  protocol eras (2026-07-28's InputRequiredResult, 2025-11-25's elicitation/create); accept,
  decline and cancel reach the task as answered, dismissed and cancelled;
- a client without elicitation gets the pending question in ``run_task``'s result;
- over HTTP, principal B can neither see nor answer A's task (word for word a missing one's);
- the tasks extension (SEP-2663): ``run_task`` answers with a handle whose id is the task's,
  ``tasks/get`` shows the question as inputRequests, ``tasks/update`` answers (a refused answer
  is an error and the task still waits), ``tasks/cancel`` cancels.

The stack has a session store of its own: API keys in a store turn anonymous access off, and
other tests use the suite's shared store without a token.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx
import mcp.types as types
import pytest
from fastapi import FastAPI
from mcp import Client, StdioServerParameters
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict, Field, SecretStr, TypeAdapter
from temporalio.client import Client as TemporalClient

from errands.adapters.identity.keys import mint
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import Call, Gate, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore, open_store
from errands.client import Authenticator
from errands.client import Client as ErrandsClient
from errands.gateway import serving
from errands.gateway._auth import PrincipalGuard, Throttle
from errands.protocols.mcp import TASKS_EXTENSION, mount_mcp
from errands.settings import Settings
from errands.workers import build_worker
from tests.conftest import ROOT
from tests.helpers import DATABASE, ask, eventually, final
from tests.mcp_notes import Servers

MODEL = "gpt-mcp-server"
ElicitCallback = Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult]]


@dataclass
class Stack:
    url: str
    store: SessionStore
    errands: ErrandsClient
    env: dict[str, str]
    keys: dict[str, str] = field(default_factory=dict)

    def add(self, who: str) -> None:
        token, record = mint(f"{who}-{uuid.uuid4().hex[:6]}", "user", datetime.now(UTC))
        self.store.add_principal(record)
        self.keys[who] = token

    @asynccontextmanager
    async def http(self, who: str, **options: Any) -> AsyncIterator[Client]:
        """An MCP client over Streamable HTTP acting as ``who``."""
        headers = {"Authorization": f"Bearer {self.keys[who]}"}
        async with httpx.AsyncClient(headers=headers, timeout=90) as http:
            transport = streamable_http_client(f"{self.url}/mcp", http_client=http)
            async with Client(transport, **options) as client:
                yield client

    @asynccontextmanager
    async def stdio(self, **options: Any) -> AsyncIterator[Client]:
        """An MCP client of `errands mcp`, run as a subprocess."""
        server = StdioServerParameters(
            command=sys.executable, args=_errands_mcp(), env=self.env, cwd=str(ROOT)
        )
        async with Client(server, **options) as client:
            yield client


def _errands_mcp() -> list[str]:
    """`errands mcp`, or the module that serves it until the command is wired in."""
    from errands.cli import _parser

    commands = next(
        a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices
    return ["-m", "errands.cli", "mcp"] if "mcp" in commands else ["-m", "errands.cli._mcp"]


@pytest.fixture(scope="module")
async def stack(
    client: TemporalClient,
    settings: Settings,
    cli_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
    servers: Servers,
) -> AsyncIterator[Stack]:
    where: Path = tmp_path_factory.mktemp("mcp-server")
    own = settings.model_copy(
        update={
            "task_queue": f"mcp-server-{uuid.uuid4().hex[:6]}",
            "database_url": f"sqlite:///{where / 'sessions.db'}",
            "model": f"openai:{MODEL}",
            # the notes server's search waits for approval
            "mcp_servers": json.dumps(
                {"web": {**servers.config["web"], "approval": {"search": "always"}}}
            ),
        }
    )
    env = {
        **cli_env,
        "ERRANDS_TASK_QUEUE": own.task_queue,
        "ERRANDS_DATABASE_URL": own.session_database_url(),
        "ERRANDS_MODEL": f"openai:{MODEL}",
    }
    store = open_store(own.session_database_url())
    router = ModelRouter(own)
    try:
        async with build_worker(client, own, store=store, router=router):
            errands = ErrandsClient(client, own, store=store)
            app = FastAPI()
            mount_mcp(app, errands)
            async with serving(app) as url:
                stack = Stack(url, store, errands, env)
                stack.add("a")
                stack.add("b")
                yield stack
    finally:
        await router.aclose()
        store.close()


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def last_tool_result(request: RecordedRequest) -> str:
    return str([m for m in request.body["messages"] if m["role"] == "tool"][-1]["content"])


async def waiting_question(mcp: Client, task_id: str) -> dict[str, Any]:
    async def pending() -> dict[str, Any] | None:
        status = structured(await mcp.call_tool("task_status", {"task_id": task_id}))
        return status["pending_question"]  # type: ignore[no-any-return]

    return await eventually(pending, f"task {task_id} to ask its question")


# -- the plain tools -------------------------------------------------------------------------


async def plain_tools_finish_a_task_that_asks(mcp: Client, scripted: ScriptedModelServer) -> None:
    scripted.script(MODEL, ask(DATABASE), final("PostgreSQL it is."))
    started = structured(await mcp.call_tool("start_task", {"text": "pick a database"}))
    task_id = started["task_id"]
    pending = await waiting_question(mcp, task_id)
    assert [q["header"] for q in pending["questions"]] == ["Database"]

    refused = await mcp.call_tool("answer", {"task_id": task_id, "answers": {"q1": "Oracle"}})
    assert refused.is_error and "Oracle" in text_of(refused), text_of(refused)
    assert (await waiting_question(mcp, task_id))["id"] == pending["id"], "nothing changed"

    answered = await mcp.call_tool("answer", {"task_id": task_id, "answers": {"q1": "PostgreSQL"}})
    assert structured(answered)["accepted"] is True

    async def replied() -> dict[str, Any] | None:
        status = structured(await mcp.call_tool("task_status", {"task_id": task_id}))
        return status if status["status"] == "replied" else None

    done = await eventually(replied, f"task {task_id} to reply")
    assert done["reply"] == "PostgreSQL it is." == done["summary"]
    history = structured(await mcp.call_tool("history", {"session_id": started["session_id"]}))
    assert [m["text"] for m in history["messages"]] == ["pick a database", "PostgreSQL it is."]
    assert "PostgreSQL" in last_tool_result(scripted.requests_for(MODEL)[-1])


async def test_over_stdio_the_plain_tools_start_answer_and_finish_a_task_that_asks(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    async with stack.stdio() as mcp:
        assert {t.name for t in (await mcp.list_tools()).tools} >= {
            "start_task", "task_status", "answer", "approve", "deny", "side_question", "say",
            "cancel", "history", "run_task",
        }  # fmt: skip
        await plain_tools_finish_a_task_that_asks(mcp, scripted)


async def test_over_http_the_plain_tools_start_answer_and_finish_a_task_that_asks(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    async with stack.http("a") as mcp:
        await plain_tools_finish_a_task_that_asks(mcp, scripted)


async def test_cancel_stops_a_task_waiting_on_its_question(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    scripted.script(MODEL, ask(DATABASE))
    async with stack.http("a") as mcp:
        task_id = structured(await mcp.call_tool("start_task", {"text": "q"}))["task_id"]
        await waiting_question(mcp, task_id)
        assert structured(await mcp.call_tool("cancel", {"task_id": task_id}))["status"]
        ended = await stack.errands.task(task_id).wait(timeout=60)
        assert ended.status == "canceled"


def searching(request: RecordedRequest) -> Reply:
    """The model searches the notes (a call that waits for approval), then replies."""
    if not [m for m in request.body["messages"] if m["role"] == "tool"]:
        return Reply(calls=[Call("mcp__web__search", {"query": "databases"})])
    return final("Searched.")


async def test_approve_runs_the_call_waiting_for_approval_only_with_its_digest(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    scripted.script(MODEL, searching, searching)
    async with stack.http("a") as mcp:
        task_id = structured(await mcp.call_tool("start_task", {"text": "search"}))["task_id"]

        async def approval() -> dict[str, Any] | None:
            status = structured(await mcp.call_tool("task_status", {"task_id": task_id}))
            return status["pending_approval"]  # type: ignore[no-any-return]

        pending = await eventually(approval, "the search to wait for approval")
        assert pending["tool"] == "mcp__web__search"
        wrong = await mcp.call_tool("approve", {"task_id": task_id, "sha256": "0" * 64})
        assert wrong.is_error, "another call's digest approves nothing"
        assert (await approval())["approval_id"] == pending["approval_id"]
        right = {"task_id": task_id, "sha256": pending["arguments_sha256"]}
        assert structured(await mcp.call_tool("approve", right))["tool"] == "mcp__web__search"
    assert (await stack.errands.task(task_id).wait(timeout=60)).reply == "Searched."


async def test_deny_tells_the_agent_why(stack: Stack, scripted: ScriptedModelServer) -> None:
    scripted.script(MODEL, searching, final("Not searching then."))
    async with stack.http("a") as mcp:
        task_id = structured(await mcp.call_tool("start_task", {"text": "search"}))["task_id"]

        async def approval() -> dict[str, Any] | None:
            status = structured(await mcp.call_tool("task_status", {"task_id": task_id}))
            return status["pending_approval"]  # type: ignore[no-any-return]

        pending = await eventually(approval, "the search to wait for approval")
        denied = {"task_id": task_id, "sha256": pending["arguments_sha256"], "reason": "not now"}
        assert not (await mcp.call_tool("deny", denied)).is_error
    assert (await stack.errands.task(task_id).wait(timeout=60)).reply == "Not searching then."
    assert "not now" in last_tool_result(scripted.requests_for(MODEL)[-1])


async def test_run_task_answers_still_working_once_its_wait_is_over(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    gate = Gate()
    scripted.script(MODEL, final("late", hold=gate))
    async with stack.http("a") as mcp:
        view = structured(await mcp.call_tool("run_task", {"text": "slow", "wait_seconds": 0.5}))
        assert view["status"] == "running", "the model call is held: the task cannot have ended"
        assert view["summary"].startswith("still working") and view["task_id"] in view["summary"]
        gate.release()
        again = await mcp.call_tool("run_task", {"task_id": view["task_id"], "wait_seconds": 40})
    assert structured(again)["reply"] == "late"


async def test_side_question_and_say_reach_the_task(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    scripted.script(
        MODEL, ask(DATABASE), Reply(text="It is choosing a database."), final("Both noted.")
    )
    async with stack.http("a") as mcp:
        task_id = structured(await mcp.call_tool("start_task", {"text": "q"}))["task_id"]
        await waiting_question(mcp, task_id)
        side = await mcp.call_tool("side_question", {"task_id": task_id, "question": "status?"})
        assert structured(side)["answer"] == "It is choosing a database."
        said = await mcp.call_tool("say", {"task_id": task_id, "text": "prefer managed services"})
        assert structured(said)["message_id"]
        await mcp.call_tool("answer", {"task_id": task_id, "answers": {"q1": "PostgreSQL"}})
    assert (await stack.errands.task(task_id).wait(timeout=60)).reply == "Both noted."


# -- principals over HTTP --------------------------------------------------------------------


async def test_over_http_b_can_neither_see_nor_answer_the_task_of_a(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    scripted.script(MODEL, ask(DATABASE), final("done"))
    async with stack.http("a") as a, stack.http("b") as b:
        task_id = structured(await a.call_tool("start_task", {"text": "A's"}))["task_id"]
        await waiting_question(a, task_id)
        missing = "task-" + uuid.uuid4().hex
        for tool, arguments in (
            ("task_status", {}),
            ("answer", {"answers": {"q1": "PostgreSQL"}}),
            ("side_question", {"question": "what so far?"}),
            ("say", {"text": "stop"}),
            ("cancel", {}),
        ):
            theirs = await b.call_tool(tool, {"task_id": task_id, **arguments})
            nothing = await b.call_tool(tool, {"task_id": missing, **arguments})
            assert theirs.is_error and nothing.is_error, tool
            assert text_of(theirs).replace(task_id, "ID") == text_of(nothing).replace(missing, "ID")
        assert (await waiting_question(a, task_id))["questions"], "A's task still waits"
        await a.call_tool("answer", {"task_id": task_id, "answers": {"q1": "PostgreSQL"}})
        assert (await stack.errands.task(task_id).wait(timeout=60)).reply == "done"


async def test_over_http_a_request_without_a_bearer_is_refused_with_a_challenge(
    stack: Stack,
) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{stack.url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Accept": "application/json, text/event-stream"},
        )
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert "Authorization: Bearer" in response.json()["detail"]


async def test_with_the_gateway_guard_wrong_bearers_in_a_row_are_slowed(stack: Stack) -> None:
    guard = PrincipalGuard(Authenticator.from_settings(stack.errands.settings, stack.store))
    app = FastAPI()
    mount_mcp(app, stack.errands, principal_of=guard)
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    accept = {"Accept": "application/json, text/event-stream"}
    async with serving(app) as url, httpx.AsyncClient(timeout=30) as http:
        statuses = []
        for n in range(Throttle.FREE_FAILURES + 1):
            wrong = {**accept, "Authorization": f"Bearer ek_wrong{n:03d}.nothing"}
            statuses.append((await http.post(f"{url}/mcp", json=ping, headers=wrong)).status_code)
    assert statuses == [401] * Throttle.FREE_FAILURES + [429]


# -- elicitation -----------------------------------------------------------------------------


def replies(*results: types.ElicitResult) -> tuple[ElicitCallback, list[types.ElicitRequestParams]]:
    """An elicitation callback that answers ``results`` in order, and the forms it was shown."""
    shown: list[types.ElicitRequestParams] = []

    async def callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        shown.append(params)
        return results[len(shown) - 1]

    return callback, shown


OUTCOMES = {
    "accept": (
        types.ElicitResult(action="accept", content={"q1": "PostgreSQL"}),
        "Going with PostgreSQL.",
        "PostgreSQL",
    ),
    "decline": (types.ElicitResult(action="decline"), "Understood.", "without choosing anything"),
    "cancel": (types.ElicitResult(action="cancel"), "Carrying on.", "cancelled"),
}


ERAS = {"auto": "2026-07-28", "legacy": "2025-11-25"}
"""The protocol version each connect mode negotiates with this server."""


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("action", list(OUTCOMES))
async def test_run_task_asks_through_the_form_and_the_outcome_reaches_the_task(
    stack: Stack,
    scripted: ScriptedModelServer,
    action: str,
    mode: Literal["auto", "legacy"],
) -> None:
    outcome, reply, told = OUTCOMES[action]
    scripted.script(MODEL, ask(DATABASE), final(reply))
    callback, shown = replies(outcome)
    async with stack.http("a", elicitation_callback=callback, mode=mode) as mcp:
        # auto: InputRequiredResult and a retried call; legacy: elicitation/create mid-call
        assert mcp.session.protocol_version == ERAS[mode]
        result = await mcp.call_tool("run_task", {"text": "pick one", "wait_seconds": 40})
    assert structured(result)["reply"] == reply, text_of(result)
    assert len(shown) == 1
    assert isinstance(shown[0], types.ElicitRequestFormParams)
    schema = shown[0].requested_schema
    assert schema["properties"]["q1"]["enum"] == ["PostgreSQL", "SQLite"]
    assert schema["properties"]["q1_other"]["type"] == "string"
    assert "Which database" in shown[0].message
    assert told in last_tool_result(scripted.requests_for(MODEL)[-1])


class Replicas(httpx.AsyncBaseTransport):
    """A load balancer in front of two gateway replicas that sends the retry carrying a form's
    answer (its ``requestState``) to the second and every other request to the first: the
    turn a round-robin balancer takes now and then."""

    def __init__(self, urls: list[str]) -> None:
        self.ports = [httpx.URL(u).port for u in urls]
        self.retries = 0
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        retry = b'"requestState"' in request.content
        self.retries += retry
        request.url = request.url.copy_with(port=self.ports[retry])
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@asynccontextmanager
async def behind_a_balancer(
    stack: Stack, keys: tuple[str | None, str | None]
) -> AsyncIterator[Client]:
    """An MCP client (2026-07-28, as ``a``, answering forms with PostgreSQL) of two gateway
    replicas whose ERRANDS_MCP_STATE_KEYS are ``keys``: each its own MCP server, as each process
    of a deployment has."""
    callback, _ = replies(OUTCOMES["accept"][0])
    async with AsyncExitStack() as running:
        urls = []
        for replica_keys in keys:
            settings = stack.errands.settings.model_copy(
                update={"mcp_state_keys": SecretStr(replica_keys) if replica_keys else None}
            )
            app = FastAPI()
            mount_mcp(app, ErrandsClient(stack.errands.temporal, settings, store=stack.store))
            urls.append(await running.enter_async_context(serving(app)))
        balancer = Replicas(urls)
        headers = {"Authorization": f"Bearer {stack.keys['a']}"}
        http = httpx.AsyncClient(headers=headers, timeout=90, transport=balancer)
        await running.enter_async_context(http)
        transport = streamable_http_client(f"{urls[0]}/mcp", http_client=http)
        client = await running.enter_async_context(
            Client(transport, elicitation_callback=callback, mode="auto")
        )
        assert client.session.protocol_version == "2026-07-28"
        yield client
        assert balancer.retries == 1, "the form's answer came back once, to the other replica"


OLD_KEY, NEW_KEY = "old-state-key-" + "o4" * 15, "new-state-key-" + "n5" * 15


@pytest.mark.parametrize(
    "keys",
    [
        (f"{OLD_KEY},{NEW_KEY}", f"{OLD_KEY},{NEW_KEY}"),
        (OLD_KEY, f"{OLD_KEY},{NEW_KEY}"),
        (f"{NEW_KEY},{OLD_KEY}", f"{OLD_KEY},{NEW_KEY}"),
    ],
    ids=["same keys", "rotation, first rollout", "rotation, second rollout"],
)
async def test_replicas_sharing_state_keys_take_each_others_form_answers(
    stack: Stack, scripted: ScriptedModelServer, keys: tuple[str, str]
) -> None:
    """The replica that asked seals with its first key; the other unseals with any of its own:
    the same ring, or, while a rotation rolls out, one a step behind or ahead of it (the new
    key added second, then moved first)."""
    scripted.script(MODEL, ask(DATABASE), final("Going with PostgreSQL."))
    async with behind_a_balancer(stack, keys) as mcp:
        result = await mcp.call_tool("run_task", {"text": "pick one", "wait_seconds": 40})
    assert structured(result)["reply"] == "Going with PostgreSQL.", text_of(result)
    assert "PostgreSQL" in last_tool_result(scripted.requests_for(MODEL)[-1])


async def test_replicas_without_shared_keys_refuse_the_answer_and_lose_nothing(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    """Each replica seals with a key of its own: the other cannot read the form's state. The
    retry is refused, saying so; the task still waits for its answer, which the plain tools
    give."""
    scripted.script(MODEL, ask(DATABASE), final("PostgreSQL it is."))
    async with behind_a_balancer(stack, (None, None)) as mcp:
        task_id = structured(await mcp.call_tool("start_task", {"text": "pick one"}))["task_id"]
        with pytest.raises(MCPError, match="Invalid or expired requestState"):
            await mcp.call_tool("run_task", {"task_id": task_id, "wait_seconds": 40})
        pending = await waiting_question(mcp, task_id)
        answered = await mcp.call_tool(
            "answer", {"task_id": task_id, "answers": {pending["questions"][0]["id"]: "SQLite"}}
        )
        assert structured(answered)["accepted"] is True
        done = structured(await mcp.call_tool("run_task", {"task_id": task_id, "wait_seconds": 40}))
    assert done["reply"] == "PostgreSQL it is."
    assert "SQLite" in last_tool_result(scripted.requests_for(MODEL)[-1])


async def test_over_stdio_run_task_asks_through_the_form(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    scripted.script(MODEL, ask(DATABASE), final("Going with SQLite."))
    other = types.ElicitResult(action="accept", content={"q1_other": "SQLite, for now"})
    callback, shown = replies(other)
    async with stack.stdio(elicitation_callback=callback) as mcp:
        result = await mcp.call_tool("run_task", {"text": "pick one", "wait_seconds": 40})
    assert structured(result)["reply"] == "Going with SQLite."
    assert len(shown) == 1
    assert "SQLite, for now" in last_tool_result(scripted.requests_for(MODEL)[-1])


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_refused_form_answer_is_asked_again_with_the_reason(
    stack: Stack, scripted: ScriptedModelServer, mode: Literal["auto", "legacy"]
) -> None:
    scripted.script(MODEL, ask(DATABASE), final("PostgreSQL then."))
    callback, shown = replies(
        types.ElicitResult(action="accept", content={"q1": "Oracle"}),
        types.ElicitResult(action="accept", content={"q1": "PostgreSQL"}),
    )
    async with stack.http("a", elicitation_callback=callback, mode=mode) as mcp:
        result = await mcp.call_tool("run_task", {"text": "pick one", "wait_seconds": 40})
    assert structured(result)["reply"] == "PostgreSQL then."
    assert len(shown) == 2
    assert "not accepted" in shown[1].message and "Oracle" in shown[1].message


async def test_a_client_without_elicitation_gets_the_question_in_the_result(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    scripted.script(MODEL, ask(DATABASE), final("ok"))
    async with stack.http("a") as mcp:
        result = await mcp.call_tool("run_task", {"text": "pick one", "wait_seconds": 40})
        view = structured(result)
        assert view["status"] == "waiting_for_user"
        assert view["pending_question"]["questions"][0]["header"] == "Database"
        assert "answer(" in view["summary"]
        task_id = view["task_id"]
        await mcp.call_tool("answer", {"task_id": task_id, "answers": {"q1": "SQLite"}})
        again = await mcp.call_tool("run_task", {"task_id": task_id, "wait_seconds": 40})
    assert structured(again)["reply"] == "ok"


async def test_run_task_of_a_waiting_task_returns_its_question_at_once(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    scripted.script(MODEL, ask(DATABASE), final("ok"))
    async with stack.http("a") as mcp:
        started = structured(await mcp.call_tool("start_task", {"text": "q"}))
        await waiting_question(mcp, started["task_id"])
        # No elicitation here, and the question is pending: a zero wait answers at once.
        view = structured(
            await mcp.call_tool("run_task", {"task_id": started["task_id"], "wait_seconds": 0})
        )
        assert view["status"] == "waiting_for_user" and view["task_id"] == started["task_id"]
        await mcp.call_tool("answer", {"task_id": started["task_id"], "dismiss": True})
    assert (await stack.errands.task(started["task_id"]).wait(timeout=60)).reply == "ok"


# -- the tasks extension (SEP-2663) ----------------------------------------------------------

ANY = TypeAdapter(dict[str, Any])


class TaskId(types.RequestParams):
    task_id: str = Field(alias="taskId")


class TaskUpdate(types.RequestParams):
    task_id: str = Field(alias="taskId")
    input_responses: dict[str, Any] = Field(alias="inputResponses")


class CreatedTask(types.Result):
    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str


class TasksClient(ClientExtension):
    """Declares the extension; keeps each task handle a call got, and resolves the call at once
    (the test drives tasks/get, tasks/update and tasks/cancel itself)."""

    identifier = TASKS_EXTENSION

    def __init__(self) -> None:
        self.handles: list[CreatedTask] = []

    def claims(self) -> list[ResultClaim[Any]]:
        async def keep(handle: CreatedTask, context: ClaimContext) -> types.CallToolResult:
            self.handles.append(handle)
            return types.CallToolResult(content=[types.TextContent(type="text", text="handle")])

        return [ResultClaim(result_type="task", model=CreatedTask, resolve=keep)]


async def send(mcp: Client, method: str, params: types.RequestParams) -> dict[str, Any]:
    request = types.Request[type(params), str](method=method, params=params)  # type: ignore[misc]
    return await mcp.session.send_request(request, ANY)  # type: ignore[no-any-return]


async def task_in(mcp: Client, task_id: str, *states: str) -> dict[str, Any]:
    async def got() -> dict[str, Any] | None:
        task = await send(mcp, "tasks/get", TaskId(taskId=task_id))
        return task if task["status"] in states else None

    return await eventually(got, f"task {task_id} to be {' or '.join(states)}")


async def test_tasks_extension_run_task_gives_a_handle_answered_through_tasks_update(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    scripted.script(MODEL, ask(DATABASE), final("PostgreSQL it is."))
    tasks = TasksClient()
    async with stack.http("a", extensions=[tasks]) as mcp:
        await mcp.call_tool("run_task", {"text": "pick one"})
        [handle] = tasks.handles
        assert (await stack.errands.task(handle.task_id).describe()).running  # the errands task
        task = await task_in(mcp, handle.task_id, "input_required")
        [(key, request)] = task["inputRequests"].items()
        assert request["method"] == "elicitation/create"
        assert request["params"]["requestedSchema"]["properties"]["q1"]["enum"] == [
            "PostgreSQL",
            "SQLite",
        ]

        wrong = {key: {"action": "accept", "content": {"q1": "Oracle"}}}
        with pytest.raises(MCPError, match="Oracle"):
            await send(mcp, "tasks/update", TaskUpdate(taskId=handle.task_id, inputResponses=wrong))
        assert (await task_in(mcp, handle.task_id, "input_required"))["inputRequests"]

        right = {key: {"action": "accept", "content": {"q1": "PostgreSQL"}}}
        await send(mcp, "tasks/update", TaskUpdate(taskId=handle.task_id, inputResponses=right))
        done = await task_in(mcp, handle.task_id, "completed", "failed", "cancelled")
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "PostgreSQL it is."
    assert done["result"]["structuredContent"]["reply"] == "PostgreSQL it is."


async def test_tasks_extension_cancel_cancels_and_b_cannot_reach_the_task(
    stack: Stack, scripted: ScriptedModelServer
) -> None:
    scripted.script(MODEL, ask(DATABASE))
    tasks = TasksClient()
    async with stack.http("a", extensions=[tasks]) as a, stack.http("b", extensions=[]) as b:
        await a.call_tool("run_task", {"text": "q"})
        [handle] = tasks.handles
        await task_in(a, handle.task_id, "input_required")
        with pytest.raises(MCPError):
            await send(b, "tasks/get", TaskId(taskId=handle.task_id))
        await send(a, "tasks/cancel", TaskId(taskId=handle.task_id))
        assert (await task_in(a, handle.task_id, "cancelled"))["status"] == "cancelled"


@pytest.mark.fast
def test_the_form_of_a_question_set_maps_choices_and_back() -> None:
    from errands.protocols.mcp._forms import answers_from, form_schema

    other = {"label": "Other", "free_text": True}
    pending = {
        "id": "qs-1",
        "questions": [
            {"id": "q1", "header": "DB", "question": "Which?", "options": [{"label": "A"}]},
            {"id": "q2", "header": "Extras", "question": "Which extras?", "multi_select": True,
             "options": [{"label": "x"}, {"label": "y"}, other]},
            {"id": "q3", "header": "Name", "question": "Its name?", "type": "text", "options": []},
        ],
    }  # fmt: skip
    schema = form_schema(pending)
    assert schema["properties"]["q1"] == {
        "type": "string", "enum": ["A"], "title": "DB", "description": "Which?"
    }  # fmt: skip
    assert schema["properties"]["q2"]["items"] == {"type": "string", "enum": ["x", "y"]}
    assert schema["properties"]["q3"]["type"] == "string" and "q3_other" not in schema["properties"]
    content = {"q1": "A", "q2": ["x", "y"], "q2_other": "z", "q3": "  "}
    assert answers_from(pending, content) == {"q1": ["A"], "q2": ["x", "y", "Other: z"]}
    assert json.dumps(schema)  # plain JSON, as the wire needs
