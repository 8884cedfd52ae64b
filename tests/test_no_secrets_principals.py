"""No token or JWT anywhere (issue 25, acceptance 5), scanned.

One run against the real dev server, an in-process worker, the scripted model, the notes MCP
server (its ``search`` needs two approvals) and the gateway served over loopback HTTP with every
credential configured at once: ERRANDS_API_TOKEN (the admin), errands API keys (users A and B,
an approver) and OIDC with a key set the test serves on loopback (user C, a JWT). Every human
act goes through the gateway: starts, an answer, a call approved by two principals, a call
denied, a steer, a side question, a cancel, the event streams, the lists, the histories; then
a batch of refusals (wrong tokens, a revoked key, an expired JWT, a wrong audience, ``alg:
none``, HS256 with the public key, another key's signature, B on A's task).

Then every secret (the admin token; each API key and its secret part; each JWT and each of its
three parts) is looked for in every workflow history (the JSON export, the protobuf bytes and the
decoded payloads), every workflow's memo and search attributes, every row of every table of the
session store, every log record of every logger at DEBUG (uvicorn's included) and the Temporal
dev server's log, every HTTP response of the run (refusals too, headers and bodies) and every
exception raised to the test.
The principals' ids, meanwhile, are where they belong: the scan is of a run that did things.

The gateway has a session store of its own: a store with API keys turns anonymous access off.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import secrets
import sqlite3
import traceback
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from pydantic import SecretStr
from temporalio.client import Client

from errands.adapters.devserver import DevServer
from errands.adapters.identity.keys import mint
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import Reply, ScriptedModelServer
from errands.adapters.store import SessionStore, open_store
from errands.client import Authenticator
from errands.client import Client as ErrandsClient
from errands.contracts.principals import ADMIN_TOKEN_ID, Principal, Role
from errands.errors import ErrandsError, TaskNotFound
from errands.gateway import create_app, serving
from errands.settings import Settings
from errands.workers import build_worker
from tests.helpers import DATABASE, Conversation, ask, eventually, final
from tests.mcp_notes import Servers
from tests.test_four_eyes import calls_once
from tests.test_gateway_principals import PROBES, UNSCOPED
from tests.test_oidc import AUDIENCE, Issuer, SigningKey, ec_key, hs256, rsa_key, unsigned
from tests.test_work_tools import call, delegating, told_branch

REGION = {
    "question": "Which region should it run in?",
    "header": "Region",
    "options": [{"label": "EU"}, {"label": "US"}],
}
SEARCH = "mcp__web__search"


# -- what the run saw ---------------------------------------------------------------------------


class Collecting(logging.Handler):
    """Every log record of the run, formatted (exception text and stack included) and with all
    its fields (a structured logger's extras are in ``vars(record)``, not in the message)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))
        self.lines.append(repr(vars(record)))


UVICORN = ("uvicorn", "uvicorn.access")
"""uvicorn's loggers that do not reach the root (each ``serving`` sets them up anew)."""


@contextmanager
def capturing_logs() -> Iterator[Collecting]:
    """Every logger at DEBUG into one ``Collecting``, for the block; restored after."""
    handler = Collecting()
    root = logging.getLogger()
    kept = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(kept)
        for name in UVICORN:
            logging.getLogger(name).removeHandler(handler)


def hear_uvicorn(handler: Collecting) -> None:
    """uvicorn's own loggers into ``handler`` at DEBUG, after a ``serving`` configured them."""
    for name in UVICORN:
        logger = logging.getLogger(name)
        if handler not in logger.handlers:
            logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)


def pieces(kind: str, token: str) -> dict[str, str]:
    """What of ``token`` must appear nowhere, by a name that says which piece it is: the whole
    token; an API key's secret part (its key id before the dot is public); each of a JWT's
    three parts (the signature above all)."""
    found = {f"{kind}: the token": token}
    if token.startswith("ek_"):
        found[f"{kind}: its secret part"] = token.split(".", 1)[1]
    elif token.count(".") == 2:
        for name, part in zip(("header", "claims", "signature"), token.split("."), strict=True):
            if part:
                found[f"{kind}: its {name}"] = part
    return found


def leaks(secret_pieces: dict[str, str], where: str, seen: str | bytes) -> list[str]:
    """Which pieces ``seen`` holds, each as "piece in where" (never the piece itself)."""
    if isinstance(seen, bytes):
        return [f"{n} in {where}" for n, p in secret_pieces.items() if p.encode() in seen]
    return [f"{n} in {where}" for n, p in secret_pieces.items() if p in seen]


def decoded_payloads(exported: Any) -> list[str]:
    """The data of every payload in a history's JSON export (which shows it in base64)."""
    found: list[str] = []
    if isinstance(exported, dict):
        for key, value in exported.items():
            if key == "data" and isinstance(value, str):
                try:
                    found.append(base64.b64decode(value, validate=True).decode(errors="replace"))
                except (binascii.Error, ValueError):
                    pass
            else:
                found += decoded_payloads(value)
    elif isinstance(exported, list):
        for item in exported:
            found += decoded_payloads(item)
    return found


def ids_in(by: Any) -> list[str]:
    """The principal ids an event's ``by`` (one principal or a list) names."""
    listed = by if isinstance(by, list) else [by]
    return [p["id"] for p in listed if isinstance(p, dict)]


@dataclass
class Run:
    """What the run did, and everything it showed."""

    client: Client
    store: SessionStore
    store_path: Path
    queue: str
    logs: Collecting
    secrets: dict[str, str] = field(default_factory=dict)
    """Piece name → piece (see ``pieces``)."""
    names: dict[str, str] = field(default_factory=dict)
    """Who (a, b, c, approver, admin) → principal id."""
    headers: dict[str, dict[str, str]] = field(default_factory=dict)
    """Who → their Authorization header."""
    tasks: dict[str, str] = field(default_factory=dict)
    """What the task was for → its id."""
    sessions: dict[str, str] = field(default_factory=dict)
    responses: list[httpx.Response] = field(default_factory=list)
    streams: list[str] = field(default_factory=list)
    """The text of every event stream read."""
    errors: list[str] = field(default_factory=list)
    """Every exception raised to the test: message, repr and traceback."""
    refusals: dict[str, int] = field(default_factory=dict)
    """Refused credential → the status it got."""

    def add(self, who: str, token: str, principal_id: str) -> None:
        self.secrets.update(pieces(who, token))
        self.names[who] = principal_id
        self.headers[who] = {"Authorization": f"Bearer {token}"}

    def caught(self, error: BaseException) -> None:
        self.errors += [str(error), repr(error), "".join(traceback.format_exception(error))]
        if challenge := getattr(error, "challenge", None):
            self.errors.append(challenge)

    async def seen(self, response: httpx.Response) -> None:
        self.responses.append(response)


def http_client(run: Run, url: str) -> httpx.AsyncClient:
    """A client whose every response (refusals too) the run keeps."""
    return httpx.AsyncClient(base_url=url, timeout=60, event_hooks={"response": [run.seen]})


# -- the stack ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def oidc() -> AsyncIterator[Issuer]:
    """An OIDC issuer on loopback (as tests/test_oidc.py's, for the whole module)."""
    issuer = Issuer(keys=[rsa_key(), ec_key()])
    app = web.Application()
    app.router.add_get("/.well-known/openid-configuration", issuer.discovery)
    app.router.add_get("/keys", issuer.jwks)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    issuer.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    yield issuer
    await runner.cleanup()


@pytest.fixture(scope="module")
async def run(
    client: Client,
    settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
    servers: Servers,
    model_server: ScriptedModelServer,
    oidc: Issuer,
) -> AsyncIterator[Run]:
    where = tmp_path_factory.mktemp("no-secrets")
    admin = f"errands-admin-{secrets.token_urlsafe(32)}"
    web_server = {**servers.config["web"], "approval": {"search": "two"}}
    own = settings.model_copy(
        update={
            "task_queue": f"no-secrets-{uuid.uuid4().hex[:6]}",
            "database_url": f"sqlite:///{where / 'sessions.db'}",
            "mcp_servers": json.dumps({"web": web_server}),
            "api_token": SecretStr(admin),
            "oidc_issuer": oidc.url,
            "oidc_audience": AUDIENCE,
        }
    )
    with capturing_logs() as logs:
        store = open_store(own.session_database_url())
        router = ModelRouter(own)
        try:
            async with build_worker(client, own, store=store, router=router):
                errands = ErrandsClient(client, own, store=store)
                run = Run(client, store, where / "sessions.db", own.task_queue, logs)
                run.add("admin", admin, ADMIN_TOKEN_ID)
                roles: dict[str, Role] = {"a": "user", "b": "user", "approver": "approver"}
                for who, role in roles.items():
                    name = f"{who}-{uuid.uuid4().hex[:6]}"
                    token, record = mint(name, role, datetime.now(UTC))
                    store.add_principal(record)
                    run.add(who, token, name)
                carol = f"carol-{uuid.uuid4().hex[:6]}"
                run.add("c", oidc.token(sub=carol), carol)
                async with serving(create_app(errands, token=None)) as url:
                    hear_uvicorn(logs)
                    async with http_client(run, url) as http:
                        await every_human_act(run, http, model_server)
                        await refused_credentials(run, http, errands, oidc)
                model_server.assert_done()
                await errors_raised_to_the_caller(run, errands, own, oidc)
                yield run
        finally:
            await router.aclose()
            store.close()


# -- the acts -----------------------------------------------------------------------------------


async def start(run: Run, http: httpx.AsyncClient, who: str, what: str, model: str) -> str:
    session = run.sessions.setdefault(who, f"ns-{who}-{uuid.uuid4().hex[:8]}")
    response = await http.post(
        f"/v1/sessions/{session}/tasks",
        json={"text": f"{what} (for {who})", "model": f"openai:{model}"},
        headers=run.headers[who],
    )
    assert response.status_code == 201, response.text
    run.tasks[what] = response.json()["task_id"]
    return run.tasks[what]


async def until(
    http: httpx.AsyncClient, headers: dict[str, str], task_id: str, status: str, shown: str = ""
) -> dict[str, Any]:
    """The task's state once it is ``status`` (and, given ``shown``, that field is set)."""

    async def reached() -> dict[str, Any] | None:
        state = (await http.get(f"/v1/tasks/{task_id}", headers=headers)).json()
        if state.get("status") != status or (shown and not state.get(shown)):
            return None
        return dict(state)

    return await eventually(reached, f"task {task_id} to be {status}")


async def read_stream(run: Run, http: httpx.AsyncClient, who: str, task_id: str) -> list[str]:
    """The task's whole event stream (it has ended, so the stream ends), as ``who`` reads it."""
    async with asyncio.timeout(60):
        async with http.stream(
            "GET", f"/v1/tasks/{task_id}/events", headers=run.headers[who]
        ) as response:
            assert response.status_code == 200
            lines = [line async for line in response.aiter_lines()]
    run.streams.append("\n".join(lines))
    return [line.removeprefix("event: ") for line in lines if line.startswith("event:")]


async def every_human_act(run: Run, http: httpx.AsyncClient, scripted: ScriptedModelServer) -> None:
    h = run.headers
    for who, principal_id in run.names.items():
        me = await http.get("/v1/me", headers=h[who])
        assert me.status_code == 200 and me.json()["id"] == principal_id, me.text

    # A's branch calls search (policy two): the approver, then the admin, approve it.
    Conversation(
        delegating(call(SEARCH, query="keys and tokens")), told_branch, branches=2
    ).install(scripted, "gpt-ns-two")
    two = await start(run, http, "a", "approved by two", "gpt-ns-two")
    await until(http, h["a"], two, "waiting_for_user", "pending_approval")
    assert (
        await http.post(f"/v1/tasks/{two}/approval", json={"decision": "approve"}, headers=h["b"])
    ).status_code == 404
    first = await http.post(
        f"/v1/tasks/{two}/approval", json={"decision": "approve"}, headers=h["approver"]
    )
    assert first.status_code == 200 and first.json()["waiting_for"] == 1, first.text
    second = await http.post(
        f"/v1/tasks/{two}/approval", json={"decision": "approve"}, headers=h["admin"]
    )
    assert second.status_code == 200 and second.json()["waiting_for"] == 0, second.text
    await until(http, h["a"], two, "replied")

    # B's own search, denied by B.
    agent = calls_once(SEARCH, {"query": "not this one"})
    scripted.script("gpt-ns-deny", agent, agent)
    denied = await start(run, http, "b", "denied by its owner", "gpt-ns-deny")
    await until(http, h["b"], denied, "waiting_for_user", "pending_approval")
    deny = await http.post(
        f"/v1/tasks/{denied}/approval",
        json={"decision": "deny", "reason": "not today"},
        headers=h["b"],
    )
    assert deny.status_code == 200, deny.text
    await until(http, h["b"], denied, "replied")

    # C (a JWT) answers their task's question.
    scripted.script("gpt-ns-ask", ask(DATABASE), final("PostgreSQL, as asked."))
    asked = await start(run, http, "c", "answered by OIDC", "gpt-ns-ask")
    await until(http, h["c"], asked, "waiting_for_user", "pending_question")
    answered = await http.post(
        f"/v1/tasks/{asked}/answer", json={"answers": {"q1": "PostgreSQL"}}, headers=h["c"]
    )
    assert answered.status_code == 200, answered.text
    await until(http, h["c"], asked, "replied")

    # A's second task waits on a question: B gets 404 on every route of it; A asks a side
    # question, steers and cancels.
    scripted.script("gpt-ns-steer", ask(REGION), Reply(text="It is about regions."))
    steered = await start(run, http, "a", "steered and canceled", "gpt-ns-steer")
    await until(http, h["a"], steered, "waiting_for_user", "pending_question")
    for route, probe in PROBES.items():
        got = await probe(http, h["b"], steered, run.sessions["a"])
        assert got.status_code == (200 if route in UNSCOPED else 404), (route, got.text)
    btw = await http.post(
        f"/v1/tasks/{steered}/btw", json={"question": "what is it about?"}, headers=h["a"]
    )
    assert btw.status_code == 200, btw.text
    said = await http.post(
        f"/v1/tasks/{steered}/messages", json={"text": "prefer the EU"}, headers=h["a"]
    )
    assert said.status_code == 200, said.text
    canceled = await http.post(f"/v1/tasks/{steered}/cancel", headers=h["a"])
    assert canceled.status_code == 202, canceled.text
    await until(http, h["a"], steered, "canceled")

    # The admin's own task.
    scripted.script("gpt-ns-admin", final("The admin's own."))
    mine = await start(run, http, "admin", "the admin's own", "gpt-ns-admin")
    await until(http, h["admin"], mine, "replied")

    # Everyone reads: event streams, lists, session histories.
    for who, task_id in (
        ("a", two),
        ("admin", two),
        ("b", denied),
        ("c", asked),
        ("a", steered),
        ("admin", mine),
    ):
        assert (await read_stream(run, http, who, task_id))[-1] in ("replied", "canceled")
    for who in run.headers:
        listed = await http.get("/v1/tasks", params={"limit": 500}, headers=h[who])
        assert listed.status_code == 200, listed.text
    for who, session in (*run.sessions.items(), ("admin", run.sessions["a"])):
        history = await http.get(f"/v1/sessions/{session}/messages", headers=h[who])
        assert history.status_code == 200 and history.json()["messages"], history.text


async def refused_credentials(
    run: Run, http: httpx.AsyncClient, errands: ErrandsClient, oidc: Issuer
) -> None:
    """Each refused with 401 and a reason, each on a gateway of its own (the throttle of wrong
    tokens would answer later ones 429 without looking); their pieces join the secrets."""
    leaver = f"leaver-{uuid.uuid4().hex[:6]}"
    token, record = mint(leaver, "user", datetime.now(UTC))
    run.store.add_principal(record)
    run.add("leaver", token, leaver)
    assert (await http.get("/v1/me", headers=run.headers["leaver"])).status_code == 200
    run.store.revoke_principal(leaver, datetime.now(UTC))

    admin = run.secrets["admin: the token"]
    a_key = run.secrets["a: the token"]
    kid, carol = oidc.keys[0].kid, run.names["c"]
    now = int(datetime.now(UTC).timestamp())
    bad = {  # what → (the bearer, what the refusal says)
        "a wrong token": (f"wrong-{secrets.token_urlsafe(24)}", "wrong or unknown"),
        "the admin token one character off": (
            admin[:-1] + ("B" if admin.endswith("A") else "A"),
            "wrong or unknown",
        ),
        "A's key id with another secret": (
            f"{a_key.split('.')[0]}.{secrets.token_urlsafe(30)}",
            "unknown API key",
        ),
        "a revoked key": (token, "was revoked"),
        "an expired JWT": (oidc.token(sub=carol, exp=now - 600), "expired"),
        "a JWT for another audience": (oidc.token(sub=carol, aud="another-api"), "audience"),
        "a JWT from another issuer": (
            oidc.token(sub=carol, iss="https://login.example.com"),
            "wrong issuer",
        ),
        "a JWT of an unknown kid": (
            oidc.token(sub=carol, kid=f"no-such-{uuid.uuid4().hex}"),
            "unknown kid",
        ),
        "a JWT with alg none": (unsigned(oidc.claims(sub=carol), kid), "alg none"),
        "HS256 signed with the public key": (
            hs256(oidc.claims(sub=carol), oidc.keys[0].public_pem(), kid),
            "symmetric alg",
        ),
        "a JWT signed by another key": (
            oidc.token(SigningKey(kid, rsa_key().private, "RS256"), sub=carol),
            "bad signature",
        ),
    }
    for what, (value, _) in bad.items():
        run.secrets.update(pieces(what, value))
    headers = {what: (f"Bearer {value}", reason) for what, (value, reason) in bad.items()}
    # The admin token under another scheme: refused as no bearer at all, and never repeated.
    basic = base64.b64encode(f"admin:{admin}".encode()).decode()
    headers["the admin token, not as a bearer"] = (f"Token {admin}", "Authorization: Bearer")
    headers["the admin token in a basic header"] = (f"Basic {basic}", "Authorization: Bearer")
    session = f"ns-refused-{uuid.uuid4().hex[:6]}"
    requests = [
        ("GET", "/v1/tasks", None),
        ("POST", f"/v1/sessions/{session}/tasks", {"text": "let me in", "model": "openai:x"}),
        ("GET", f"/v1/tasks/{run.tasks['approved by two']}/events", None),
        ("POST", f"/v1/tasks/{run.tasks['answered by OIDC']}/answer", {"answers": {"q1": "x"}}),
    ]
    refusing = list(headers.items())
    while refusing:
        batch, refusing = refusing[:4], refusing[4:]
        async with serving(create_app(errands, token=None)) as url, http_client(run, url) as h:
            hear_uvicorn(run.logs)
            for (what, (header, reason)), (method, path, body) in zip(
                batch, requests, strict=False
            ):
                got = await h.request(method, path, json=body, headers={"Authorization": header})
                assert got.status_code == 401, (what, got.text)
                assert reason in got.json()["detail"], (what, got.text)
                run.refusals[what] = got.status_code
    assert len(run.refusals) == len(headers)


async def errors_raised_to_the_caller(
    run: Run, errands: ErrandsClient, own: Settings, oidc: Issuer
) -> None:
    """The same credentials through ``errands.client.Authenticator`` directly, and B reaching
    for A's task through ``errands.Client``: every exception raised is kept."""
    authenticator = Authenticator.from_settings(own, run.store)
    refused = [n.removesuffix(": the token") for n in run.secrets if n.endswith(": the token")]
    refused = [n for n in refused if n not in ("admin", "a", "b", "c", "approver")]
    for what in refused:
        with pytest.raises(ErrandsError) as caught:
            await authenticator.authenticate(
                f"Bearer {run.secrets[f'{what}: the token']}", loopback_only=True
            )
        run.caught(caught.value)
    b = Principal(id=run.names["b"], role="user")
    for what, task_id in run.tasks.items():
        if what == "denied by its owner":
            continue  # B's own
        with pytest.raises(TaskNotFound) as missing:
            await errands.as_principal(b).task(task_id).status()
        run.caught(missing.value)


def secret_count(run: Run) -> str:
    """How much is looked for: "N pieces of M credentials"."""
    credentials = sum(name.endswith(": the token") for name in run.secrets)
    return f"{len(run.secrets)} pieces of {credentials} credentials"


# -- the scans ----------------------------------------------------------------------------------


async def test_every_human_act_ran_and_names_its_principal_never_a_token(run: Run) -> None:
    n, tasks = run.names, run.tasks

    def events(what: str) -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = {}
        for event in run.store.list_events(tasks[what]):
            found.setdefault(event.type, []).append(event.data)
        return found

    two = events("approved by two")
    assert ids_in(two["approval_recorded"][0]["by"]) == [n["approver"]]
    assert ids_in(two["approval_answered"][0]["approved_by"]) == [n["approver"], n["admin"]]
    assert ids_in(two["tool_approved"][0]["by"]) == [n["approver"], n["admin"]]
    denied = events("denied by its owner")
    assert ids_in(denied["approval_answered"][0]["by"]) == [n["b"]]
    assert ids_in(denied["tool_denied"][0]["by"]) == [n["b"]]
    assert ids_in(events("answered by OIDC")["question_answered"][0]["by"]) == [n["c"]]
    steered = events("steered and canceled")
    assert ids_in(steered["message_received"][0]["by"]) == [n["a"]]
    assert ids_in(steered["canceled"][0]["by"]) == [n["a"]]
    assert "side_question_answered" in steered
    owners = {what: events(what)["task_started"][0]["owner"] for what in tasks}
    assert owners == {
        "approved by two": n["a"],
        "denied by its owner": n["b"],
        "answered by OIDC": n["c"],
        "steered and canceled": n["a"],
        "the admin's own": n["admin"],
    }
    assert set(run.refusals.values()) == {401} and len(run.refusals) == 13


async def test_no_history_memo_or_search_attribute_holds_a_secret(run: Run) -> None:
    async def everything_listed() -> list[Any] | None:
        found = [e async for e in run.client.list_workflows(f"TaskQueue = '{run.queue}'")]
        return found if set(run.tasks.values()) <= {e.id for e in found} else None

    executions = await eventually(everything_listed, "every task of the run to be listed")
    assert any("/" in e.id for e in executions), "the branch's child workflow is scanned too"
    found: list[str] = []
    owners: dict[str, Any] = {}
    scanned = 0
    for execution in executions:
        handle = run.client.get_workflow_handle(execution.id, run_id=execution.run_id)
        history = await handle.fetch_history()
        exported = history.to_json()
        scanned += len(exported)
        where = f"the history of {execution.id}"
        found += leaks(run.secrets, where, exported)
        found += leaks(
            run.secrets,
            f"{where} (protobuf)",
            b"".join(e.SerializeToString() for e in history.events),
        )
        for data in decoded_payloads(json.loads(exported)):
            found += leaks(run.secrets, f"{where} (payload data)", data)
        described = await handle.describe()
        found += leaks(
            run.secrets,
            f"the description of {execution.id}",
            described.raw_description.SerializeToString(),
        )
        found += leaks(run.secrets, f"the memo of {execution.id}", repr(await described.memo()))
        attributes = {p.key.name: p.value for p in described.typed_search_attributes}
        found += leaks(run.secrets, f"the search attributes of {execution.id}", repr(attributes))
        owners[execution.id] = attributes.get("ErrandsOwner")
    print(
        f"\n{len(executions)} workflows, {scanned} bytes of history exported, "
        f"for {secret_count(run)}"
    )
    assert not found, found
    assert {owners[t] for t in run.tasks.values()} == {
        run.names[w] for w in ("a", "b", "c", "admin")
    }


async def test_no_row_of_the_session_store_holds_a_secret(run: Run) -> None:
    found: list[str] = []
    tables: dict[str, int] = {}
    with sqlite3.connect(f"file:{run.store_path}?mode=ro", uri=True) as db:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in names:
            cursor = db.execute(f'SELECT * FROM "{table}"')  # noqa: S608 (the store's own names)
            columns = [c[0] for c in cursor.description]
            rows = cursor.fetchall()
            tables[table] = len(rows)
            for row in rows:
                for column, value in zip(columns, row, strict=True):
                    seen = value if isinstance(value, bytes) else str(value)
                    found += leaks(run.secrets, f"{table}.{column}", seen)
    print(f"\nrows scanned: {tables}, for {secret_count(run)}")
    assert not found, found
    for table in ("events", "messages", "principals", "session_owners", "task_starts"):
        assert tables.get(table), f"the run left no row in {table}"
    assert tables["principals"] == 4  # A, B, the approver and the revoked leaver: hashes only


async def test_no_log_line_holds_a_secret(run: Run, dev_server: DevServer) -> None:
    found = [leak for line in run.logs.lines for leak in leaks(run.secrets, "a log record", line)]
    assert dev_server.log_file is not None
    server_log = Path(dev_server.log_file).read_bytes()
    found += leaks(run.secrets, "the Temporal dev server's log", server_log)
    print(
        f"\n{len(run.logs.lines) // 2} log records and {len(server_log)} bytes of the dev "
        f"server's log scanned, for {secret_count(run)}"
    )
    assert not found, found[:20]
    assert any("uvicorn.access" in line for line in run.logs.lines), "uvicorn's log was heard"
    assert any(line.startswith("errands") for line in run.logs.lines), "errands' log was heard"


async def test_no_response_stream_or_error_message_holds_a_secret(run: Run) -> None:
    found: list[str] = []
    for response in run.responses:
        where = f"the response to {response.request.method} {response.request.url.path}"
        found += leaks(run.secrets, f"{where} (headers)", repr(response.headers.multi_items()))
        try:
            found += leaks(run.secrets, f"{where} (body)", response.content)
        except httpx.ResponseNotRead:
            pass  # an event stream: its text is in run.streams
    for stream in run.streams:
        found += leaks(run.secrets, "an event stream", stream)
    for error in run.errors:
        found += leaks(run.secrets, "an exception raised to the test", error)
    print(
        f"\n{len(run.responses)} responses, {len(run.streams)} event streams and "
        f"{len(run.errors)} exception texts scanned, for {secret_count(run)}"
    )
    assert not found, found
    assert len(run.streams) == 6
    assert sum(r.status_code == 401 for r in run.responses) == 13
    assert len(run.errors) >= 4 * 11, "every refusal raised an exception to read"
