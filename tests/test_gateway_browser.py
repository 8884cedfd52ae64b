"""The gateway against a hostile browser (issue 23, item 7 and the gateway cases of item 8): a
real gateway on loopback, the real dev server and worker, the scripted model. DNS rebinding (a
foreign Host), cross-site requests (CSRF), non-JSON bodies, the security headers on every
response, the OpenAPI bearer scheme, the token's length, the slowdown of wrong tokens, and event
positions beyond what a store holds."""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from playwright.async_api import Browser, Route, async_playwright, expect
from starlette import routing
from temporalio.client import Client

from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore, open_store
from errands.client import Client as ErrandsClient
from errands.contracts.limits import SEQ_MAX
from errands.errors import ConfigError
from errands.gateway import check_binding, create_app, serving
from errands.gateway._app import STATIC
from errands.gateway._guards import SECURITY_HEADERS
from errands.settings import Settings, load_settings
from tests.conftest import run_cli
from tests.helpers import DATABASE, ask, eventually, final, history_events
from tests.test_store import pg_admin, pg_url_in

TOKEN = "Qm9vdHN0cmFwIHRoZSBnYXRld2F5IHRva2VuIGZvciB0ZXN0cw"  # 50 characters
EVIL = "http://rebind.evil.example"


@dataclass
class Gateway:
    app: FastAPI
    url: str

    @property
    def authority(self) -> str:
        return self.url.removeprefix("http://")

    @property
    def port(self) -> str:
        return self.url.rpartition(":")[2]


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


@pytest.fixture(scope="module")
async def ended_task(gateway: Gateway, model_server: ScriptedModelServer) -> str:
    """A task that has replied: its event stream ends."""
    model_server.script("gpt-browser-ended", final("done"))
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as h:
        task = await start(h, session_id(), "a finished task", "openai:gpt-browser-ended")
        await until_state(h, task, "replied")
    return task


def session_id() -> str:
    return f"gwb-{uuid.uuid4().hex[:8]}"


async def start(http: httpx.AsyncClient, session: str, text: str, model: str) -> str:
    response = await http.post(f"/v1/sessions/{session}/tasks", json={"text": text, "model": model})
    assert response.status_code == 201, response.text
    return str(response.json()["task_id"])


async def until_state(http: httpx.AsyncClient, task_id: str, status: str) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        state = (await http.get(f"/v1/tasks/{task_id}")).json()
        return dict(state) if state.get("status") == status else None

    return await eventually(reached, f"task {task_id} to be {status}", timeout=120)


def assert_secured(response: httpx.Response) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, (response.request.url, name, response.headers)


# -- DNS rebinding: the Host header -----------------------------------------------------------


async def test_a_foreign_host_is_refused_on_every_route_static_files_and_the_stream(
    http: httpx.AsyncClient, gateway: Gateway, ended_task: str
) -> None:
    paths = [
        ("GET", "/"),
        ("GET", "/static/index.html"),
        ("GET", "/static/app.js"),
        ("GET", "/openapi.json"),
        ("GET", "/v1/info"),
        ("GET", "/v1/tasks"),
        ("GET", f"/v1/tasks/{ended_task}"),
        ("GET", f"/v1/tasks/{ended_task}/events"),
        ("POST", f"/v1/tasks/{ended_task}/cancel"),
        ("GET", "/no/such/path"),
    ]
    foreign = [
        f"rebind.evil.example:{gateway.port}",  # the rebinding page's own name
        "rebind.evil.example",
        f"127.0.0.1.evil.example:{gateway.port}",
        "127.0.0.1:1",  # the right name, another port: another server's origin
        f"localhost:{int(gateway.port) + 1}",
    ]
    for method, path in paths:
        for host in foreign:
            refused = await http.request(method, path, headers={"Host": host})
            assert refused.status_code == 400, (method, path, host, refused.text)
            detail = refused.json()["detail"]
            assert "DNS rebinding" in detail and "ERRANDS_ALLOWED_HOSTS" in detail
            assert gateway.url in detail, "it says where the gateway is"
            assert_secured(refused)
    # Its own address and the loopback names of it are the gateway's own.
    for host in (gateway.authority, f"localhost:{gateway.port}", f"LOCALHOST:{gateway.port}"):
        page = await http.get("/static/index.html", headers={"Host": host})
        assert page.status_code == 200, (host, page.text)
        stream = await http.get(f"/v1/tasks/{ended_task}/events", headers={"Host": host})
        assert stream.status_code == 200 and "event: replied" in stream.text


async def test_allowed_hosts_admit_the_names_they_list_and_star_admits_any(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    given = load_settings(ERRANDS_ALLOWED_HOSTS=" Errands.Example.com, proxy:8443")
    assert given.allowed_hosts == "errands.example.com,proxy:8443"
    listed = settings.model_copy(update={"allowed_hosts": given.allowed_hosts})
    anyone = settings.model_copy(update={"allowed_hosts": "*"})
    app = create_app(ErrandsClient(client, listed, store=store), token=None)
    star = create_app(ErrandsClient(client, anyone, store=store), token=TOKEN)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as h:
        for host, status in [
            ("errands.example.com", 200),
            ("errands.example.com:443", 200),  # no port listed: any port
            ("proxy:8443", 200),
            ("proxy:8080", 400),
            ("other.example.com", 400),
        ]:
            assert (await h.get("/v1/info", headers={"Host": host})).status_code == status, host
    async with serving(star) as url, httpx.AsyncClient(base_url=url, timeout=60) as h:
        assert (
            await h.get("/v1/info", headers={**RIGHT, "Host": "any.example"})
        ).status_code == 200
        # `*` names no site: another site's page is still refused.
        forged = await h.post(
            "/v1/tasks/task-x-1/cancel", headers={"Host": "any.example", "Origin": EVIL}
        )
        assert forged.status_code == 403, forged.text
    with pytest.raises(ConfigError, match="ERRANDS_ALLOWED_HOSTS=.*not a host"):
        load_settings(ERRANDS_ALLOWED_HOSTS="http://errands.example.com/")


async def test_with_any_host_allowed_a_rebound_page_whose_origin_matches_its_host_is_refused(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    anyone = settings.model_copy(update={"allowed_hosts": "*,errands.example.com"})
    app = create_app(ErrandsClient(client, anyone, store=store), token=TOKEN)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as h:
        port = url.rpartition(":")[2]
        for rebound in [f"evil.example:{port}", "evil.example"]:
            sent = {**RIGHT, "Host": rebound, "Origin": f"http://{rebound}"}
            forged = await h.post("/v1/tasks/task-x-1/cancel", headers=sent)
            assert forged.status_code == 403, (rebound, forged.text)
            assert "evil.example" in forged.json()["detail"]
        # The gateway's own address and a listed name are its own page.
        for own in [url, f"http://localhost:{port}", "https://errands.example.com"]:
            sent = {**RIGHT, "Origin": own}
            answered = await h.post("/v1/tasks/task-x-1/cancel", headers=sent)
            assert answered.status_code == 404, (own, answered.text)


@pytest.mark.fast
def test_any_host_without_a_token_is_refused_before_the_gateway_starts() -> None:
    with pytest.raises(ConfigError, match="ERRANDS_ALLOWED_HOSTS=\\* without a token") as refused:
        check_binding("127.0.0.1", None, "errands.example.com,*")
    assert refused.value.setting == "ERRANDS_ALLOWED_HOSTS"
    assert "ERRANDS_API_TOKEN" in refused.value.message and "\n" not in refused.value.message
    check_binding("127.0.0.1", TOKEN, "*")
    check_binding("127.0.0.1", None, "errands.example.com")


async def test_errands_serve_with_any_host_and_no_token_exits_2_with_one_line(
    cli_env: dict[str, str],
) -> None:
    env = {**cli_env, "ERRANDS_ALLOWED_HOSTS": "*"}
    result = await run_cli(env, "serve", "--host", "127.0.0.1", "--port", "0")
    assert result.code == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "ERRANDS_ALLOWED_HOSTS=*" in lines[0], result.stderr
    assert "ERRANDS_API_TOKEN" in lines[0] and "DNS rebinding" in lines[0]


# -- cross-site requests and bodies that are not JSON -----------------------------------------


async def test_a_cross_site_form_post_is_refused_and_the_task_is_not_cancelled(
    http: httpx.AsyncClient, gateway: Gateway, client: Client, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-browser-csrf", ask(DATABASE))
    task = await start(http, session_id(), "ask and wait", "openai:gpt-browser-csrf")
    await until_state(http, task, "waiting_for_user")
    handle = client.get_workflow_handle(task)
    events_before = len(await history_events(handle))

    form = {"Content-Type": "application/x-www-form-urlencoded"}
    attempts = [
        {**form, "Origin": EVIL},
        {**form, "Origin": "null"},  # a sandboxed frame or a redirect
        {**form, "Origin": f"http://localhost:{int(gateway.port) + 1}"},  # another local site
        {**form, "Sec-Fetch-Site": "cross-site"},  # a browser that left Origin out
        {**form, "Sec-Fetch-Site": "same-site", "Origin": f"http://{gateway.authority}"},
    ]
    for headers in attempts:
        refused = await http.post(f"/v1/tasks/{task}/cancel", content=b"x=1", headers=headers)
        assert refused.status_code == 403, (headers, refused.text)
        assert "ERRANDS_ALLOWED_HOSTS" in refused.json()["detail"]
        assert_secured(refused)
    # The same form without an Origin is no JSON either.
    plain = await http.post(f"/v1/tasks/{task}/cancel", content=b"x=1", headers=form)
    assert plain.status_code == 415, plain.text

    assert (await http.get(f"/v1/tasks/{task}")).json()["status"] == "waiting_for_user"
    assert len(await history_events(handle)) == events_before, "nothing reached the task"

    # The gateway's own page (its origin, same-origin fetch) and the CLI (no Origin) still can.
    own = {"Origin": f"http://{gateway.authority}", "Sec-Fetch-Site": "same-origin"}
    cancelled = await http.post(f"/v1/tasks/{task}/cancel", headers=own)
    assert cancelled.status_code == 202, cancelled.text
    await until_state(http, task, "canceled")


async def test_text_plain_json_is_refused_on_answer_and_tasks(
    http: httpx.AsyncClient, client: Client, scripted: ScriptedModelServer, store: SessionStore
) -> None:
    scripted.script("gpt-browser-plain", ask(DATABASE), final("PostgreSQL it is"))
    session = session_id()
    task = await start(http, session, "ask and wait", "openai:gpt-browser-plain")
    await until_state(http, task, "waiting_for_user")
    rows = store.list_session(session)
    other = session_id()

    for path, body in [
        (f"/v1/tasks/{task}/answer", b'{"answers": {"q1": ["PostgreSQL"]}}'),
        (f"/v1/sessions/{other}/tasks", b'{"text": "started by a form", "model": "demo"}'),
    ]:
        for media in ("text/plain", "text/plain;charset=UTF-8", "multipart/form-data; b=x"):
            refused = await http.post(path, content=body, headers={"Content-Type": media})
            assert refused.status_code == 415, (path, media, refused.text)
            detail = refused.json()["detail"]
            assert "Content-Type: application/json" in detail and path in detail
        # A body with no Content-Type at all is refused too.
        bare = await http.post(path, content=body)
        assert bare.status_code == 415, bare.text

    assert (await http.get(f"/v1/tasks/{task}")).json()["status"] == "waiting_for_user"
    assert store.list_session(session) == rows and store.list_session(other) == []
    # The same bodies as JSON are taken.
    answered = await http.post(
        f"/v1/tasks/{task}/answer",
        content=b'{"answers": {"q1": ["PostgreSQL"]}}',
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    assert answered.status_code == 200, answered.text
    assert (await until_state(http, task, "replied"))["reply"] == "PostgreSQL it is"


# -- the security headers ---------------------------------------------------------------------


def concrete(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: "task-x-1" if m[1] == "task_id" else "gwb-headers", path)


async def test_every_route_static_file_and_refusal_carries_the_security_headers(
    http: httpx.AsyncClient, gateway: Gateway
) -> None:
    # Every operation of the API (the document lists them all), and the routes outside it.
    routes = {
        (method.upper(), path)
        for path, operations in gateway.app.openapi()["paths"].items()
        for method in operations
    }
    routes |= {
        (method, route.path)
        for route in gateway.app.routes
        if isinstance(route, routing.Route)
        for method in route.methods or ()
    }
    assert {
        ("GET", "/"),
        ("GET", "/openapi.json"),
        ("POST", "/v1/tasks/{task_id}/cancel"),
    } <= routes
    assert len(routes) >= 14, routes
    for method, path in sorted(routes):
        json = {} if method == "POST" else None
        response = await http.request(method, concrete(path), json=json)
        assert response.status_code < 500, (method, path, response.text)
        assert_secured(response)

    files = sorted(p.name for p in STATIC.iterdir() if p.is_file())
    assert {"index.html", "app.js", "app.css"} <= set(files)
    for name in files:
        response = await http.get(f"/static/{name}")
        assert response.status_code == 200, name
        assert_secured(response)
    for response in [
        await http.get("/openapi.json"),
        await http.get("/static/missing.js"),  # 404
        await http.get("/v1/nothing"),  # 404
        await http.put("/v1/tasks", json={}),  # 405
        await http.get("/v1/tasks?limit=0"),  # 422
        await http.get("/", headers={"Host": "evil.example"}),  # 400
        await http.post("/v1/tasks/task-x-1/cancel", headers={"Origin": EVIL}),  # 403
        await http.post("/v1/tasks/task-x-1/cancel", content=b"{}"),  # 415
    ]:
        assert_secured(response)
    csp = SECURITY_HEADERS["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp


# -- the token ---------------------------------------------------------------------------------


@pytest.mark.fast
def test_the_openapi_document_declares_the_bearer_scheme_on_every_api_operation() -> None:
    document = create_app(ErrandsClient(None, Settings()), token=TOKEN).openapi()
    scheme = document["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert "ERRANDS_API_TOKEN" in scheme["description"]
    operations = [
        (path, method, operation)
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    ]
    assert len(operations) >= 11
    for path, method, operation in operations:
        assert path.startswith("/v1/")
        assert operation.get("security") == [{"bearer": []}], (method, path)
        assert {"401", "403", "415", "429"} <= set(operation["responses"]), (method, path)


@pytest.mark.fast
@pytest.mark.parametrize("token", ["x", "s3cret-token", TOKEN[:42]])
def test_a_token_shorter_than_43_characters_is_refused_in_one_line(token: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(ERRANDS_API_TOKEN=token)
    message = refused.value.message
    assert "\n" not in message and (len(token) < 3 or token not in message)
    assert message.startswith("ERRANDS_API_TOKEN is not allowed: a token needs at least 43")
    assert "secrets.token_urlsafe(32)" in message
    assert load_settings(ERRANDS_API_TOKEN=TOKEN).api_token is not None


async def test_errands_serve_with_a_short_token_exits_2_with_one_line(
    cli_env: dict[str, str],
) -> None:
    result = await run_cli({**cli_env, "ERRANDS_API_TOKEN": "short"}, "serve", "--port", "0")
    assert result.code == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "ERRANDS_API_TOKEN" in lines[0], result.stderr
    assert "token_urlsafe" in lines[0] and "short" not in result.stderr, "the token is never said"


@pytest.fixture
async def guarded(
    client: Client, settings: Settings, store: SessionStore
) -> AsyncIterator[httpx.AsyncClient]:
    """A gateway of its own (its own record of failures) with ``TOKEN``."""
    app = create_app(ErrandsClient(client, settings, store=store), token=TOKEN)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as h:
        yield h


RIGHT = {"Authorization": f"Bearer {TOKEN}"}
WRONG = {"Authorization": f"Bearer {TOKEN[:-1]}!"}


async def test_after_five_wrong_tokens_even_the_right_one_waits_until_retry_after(
    guarded: httpx.AsyncClient,
) -> None:
    for _ in range(5):
        assert (await guarded.get("/v1/info", headers=WRONG)).status_code == 401
    sixth = await guarded.get("/v1/info", headers=WRONG)
    assert sixth.status_code == 429, sixth.text
    wait = int(sixth.headers["retry-after"])
    assert wait >= 1 and f"wait {wait} s" in sixth.json()["detail"]
    assert_secured(sixth)
    right = await guarded.get("/v1/info", headers=RIGHT)
    assert right.status_code == 429, "the right token waits too: a guess is not tested"
    assert int(right.headers["retry-after"]) <= wait

    await asyncio.sleep(wait)  # the wait is the behaviour under test
    after = await guarded.get("/v1/info", headers=RIGHT)
    assert after.status_code == 200, after.text


async def test_a_forwarded_for_header_from_an_untrusted_peer_does_not_escape_the_wait(
    guarded: httpx.AsyncClient,
) -> None:
    for n in range(5):
        forged = {**WRONG, "X-Forwarded-For": f"203.0.113.{n}"}
        assert (await guarded.get("/v1/info", headers=forged)).status_code == 401
    other = await guarded.get("/v1/info", headers={**RIGHT, "X-Forwarded-For": "198.51.100.9"})
    assert other.status_code == 429, "no proxy is trusted by default: the header names no one"


async def test_behind_a_trusted_proxy_wrong_tokens_slow_only_the_client_that_sent_them(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    proxy = load_settings(ERRANDS_FORWARDED_ALLOW_IPS=" 127.0.0.1 , 10.0.0.0/8").forwarded_allow_ips
    assert proxy == "127.0.0.1,10.0.0.0/8"
    app = create_app(ErrandsClient(client, settings, store=store), token=TOKEN)
    async with (
        serving(app, proxies=proxy) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as h,
    ):
        guesser = {"X-Forwarded-For": "203.0.113.7"}
        for _ in range(5):
            assert (await h.get("/v1/info", headers={**WRONG, **guesser})).status_code == 401
        slowed = await h.get("/v1/info", headers={**RIGHT, **guesser})
        assert slowed.status_code == 429 and "203.0.113.7" in slowed.json()["detail"]
        someone = await h.get("/v1/info", headers={**RIGHT, "X-Forwarded-For": "198.51.100.9"})
        assert someone.status_code == 200, someone.text
    with pytest.raises(ConfigError, match="ERRANDS_FORWARDED_ALLOW_IPS=.*not an IP address"):
        load_settings(ERRANDS_FORWARDED_ALLOW_IPS="proxy.internal")


@pytest.mark.fast
@pytest.mark.parametrize("read", [TOKEN + "\n", f"  {TOKEN}\r\n"])
def test_a_token_read_from_a_file_with_its_last_newline_is_the_token_without_it(read: str) -> None:
    assert load_settings(ERRANDS_API_TOKEN=read).api_token.get_secret_value() == TOKEN  # type: ignore[union-attr]


async def test_each_wrong_token_after_a_wait_makes_the_next_wait_longer(
    guarded: httpx.AsyncClient,
) -> None:
    for _ in range(5):
        assert (await guarded.get("/v1/tasks", headers=WRONG)).status_code == 401
    first = int((await guarded.get("/v1/tasks", headers=RIGHT)).headers["retry-after"])
    await asyncio.sleep(first)
    assert (await guarded.get("/v1/tasks", headers=WRONG)).status_code == 401
    second = await guarded.get("/v1/tasks", headers=RIGHT)
    assert second.status_code == 429
    assert int(second.headers["retry-after"]) > first


# -- event positions beyond what a store holds ------------------------------------------------


BAD_POSITIONS = ["9" * 20, str(SEQ_MAX + 1), "-1", "ten", "1e3", "٣"]


async def assert_positions_bounded(h: httpx.AsyncClient, task: str) -> None:
    path = f"/v1/tasks/{task}/events"
    for position in BAD_POSITIONS:
        for response in [
            await h.get(path, params={"after": position}),
            await h.get(path, headers={"Last-Event-ID": position.encode()}),
            await h.get("/v1/sessions/gwb-positions/messages", params={"after": position}),
        ]:
            assert response.status_code in (400, 422), (position, response.text)
            detail = response.json()["detail"]
            assert isinstance(detail, str) and ("after" in detail or "Last-Event-ID" in detail)
    # The largest position a store holds is read, not refused: nothing is after it.
    assert (await h.get(path, params={"after": str(SEQ_MAX)})).status_code == 204
    assert (await h.get(path, headers={"Last-Event-ID": str(SEQ_MAX)})).status_code == 204
    messages = await h.get("/v1/sessions/gwb-positions/messages", params={"after": SEQ_MAX})
    assert messages.status_code == 200 and messages.json()["messages"] == []


async def test_an_event_position_of_20_digits_is_refused_not_a_500_on_sqlite(
    http: httpx.AsyncClient, ended_task: str
) -> None:
    await assert_positions_bounded(http, ended_task)


async def test_an_event_position_of_20_digits_is_refused_not_a_500_on_postgresql(
    client: Client, settings: Settings, ended_task: str
) -> None:
    schema = f"errands_gwb_{uuid.uuid4().hex[:12]}"
    with pg_admin() as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        store = open_store(pg_url_in(schema))
        try:
            app = create_app(ErrandsClient(client, settings, store=store), token=None)
            async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as h:
                await assert_positions_bounded(h, ended_task)
        finally:
            store.close()
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


# -- in Chromium: what a hostile page can do with a real browser ------------------------------

CHROMIUM = Path("/usr/bin/chromium")
in_chromium = pytest.mark.skipif(
    not CHROMIUM.exists() and not os.environ.get("CI"),
    reason=f"no Chromium at {CHROMIUM} (install Debian's `chromium` package); CI always runs this",
)
REBIND = "rebind.evil.example"
RECORD_VIOLATIONS = """
    window.violations = [];
    document.addEventListener("securitypolicyviolation",
        (e) => window.violations.push(e.violatedDirective + " " + e.blockedURI));
"""


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            # The rebinding attacker's name resolves to loopback, as rebound DNS would make it.
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                f"--host-resolver-rules=MAP {REBIND} 127.0.0.1",
            ],
        )
        try:
            yield browser
        finally:
            await browser.close()


async def serve_evil_page(browser: Browser, html: str) -> Any:
    """A page of another site (``EVIL``) showing ``html``, in a fresh browser context."""
    page = await browser.new_page()

    async def fulfil(route: Route) -> None:
        await route.fulfill(status=200, content_type="text/html", body=html)

    await page.route(f"{EVIL}/**", fulfil)
    return page


@in_chromium
async def test_in_chromium_a_name_rebound_to_loopback_reads_nothing(
    browser: Browser, gateway: Gateway, ended_task: str
) -> None:
    page = await browser.new_page()
    rebound = f"http://{REBIND}:{gateway.port}"
    response = await page.goto(f"{rebound}/")
    assert response is not None and response.status == 400
    assert "DNS rebinding" in await page.content()
    # The attacker's script on that origin, reading the API: every read is refused.
    statuses = await page.evaluate(
        """async (paths) => Promise.all(paths.map(async (p) => (await fetch(p)).status))""",
        ["/v1/tasks", f"/v1/tasks/{ended_task}", f"/v1/tasks/{ended_task}/events"],
    )
    assert statuses == [400, 400, 400]


@in_chromium
@pytest.mark.parametrize("enctype", ["application/x-www-form-urlencoded", "text/plain"])
async def test_in_chromium_a_cross_site_form_cannot_cancel_a_task(
    browser: Browser,
    gateway: Gateway,
    http: httpx.AsyncClient,
    scripted: ScriptedModelServer,
    enctype: str,
) -> None:
    scripted.script("gpt-browser-form", ask(DATABASE))
    task = await start(http, session_id(), "ask and wait", "openai:gpt-browser-form")
    await until_state(http, task, "waiting_for_user")
    # text/plain makes the body `{"x":"=1"}`: JSON that a JSON parser would take.
    form = (
        f'<form method="post" action="{gateway.url}/v1/tasks/{task}/cancel" '
        f'enctype="{enctype}"><input name=\'{{"x":"\' value=\'1"}}\'></form>'
        "<script>document.forms[0].submit()</script>"
    )
    page = await serve_evil_page(browser, form)
    async with page.expect_response(lambda r: r.url.endswith("/cancel")) as posted:
        await page.goto(f"{EVIL}/prize.html")
    response = await posted.value
    assert response.status == 403, await response.text()
    assert response.request.headers.get("origin") == EVIL
    assert (await http.get(f"/v1/tasks/{task}")).json()["status"] == "waiting_for_user"
    assert (await http.post(f"/v1/tasks/{task}/cancel")).status_code == 202  # the CLI's way
    await until_state(http, task, "canceled")


@in_chromium
async def test_in_chromium_no_other_site_can_frame_the_page(
    browser: Browser, gateway: Gateway
) -> None:
    # Another site on this machine (another port: another origin, and a local one, so that
    # Chromium's own rule against public pages framing local ones is not what refuses it).
    other = FastAPI()
    framing = HTMLResponse(f'<iframe src="{gateway.url}/"></iframe>')
    other.add_api_route("/game.html", lambda: framing)
    async with serving(other) as other_url:
        page = await browser.new_page()
        await page.goto(f"{other_url.replace('127.0.0.1', 'localhost')}/game.html")
        [frame] = [f for f in page.frames if f != page.main_frame]
        shown = await eventually(
            lambda: frame.url if frame.url not in ("", "about:blank") else None,
            "the frame to end its navigation",
        )
        # Chromium put its error page in the frame instead of the gateway's page.
        assert shown.startswith("chrome-error://"), shown
        assert await frame.locator("[data-testid=token]").count() == 0, "the page was framed"


@in_chromium
async def test_in_chromium_the_page_works_under_its_policy_without_a_violation(
    browser: Browser, gateway: Gateway, scripted: ScriptedModelServer
) -> None:
    scripted.script(
        "gpt-browser-csp", final("**Done** with `code`, [a link](https://example.com).")
    )
    page = await browser.new_page()
    warnings: list[str] = []
    page.on("console", lambda m: warnings.append(m.text) if "Policy" in m.text else None)
    await page.add_init_script(RECORD_VIOLATIONS)
    response = await page.goto(f"{gateway.url}/")
    assert response is not None and response.status == 200
    await page.get_by_test_id("session").fill(session_id())
    await page.get_by_test_id("task-text").fill("say it in markdown")
    await page.get_by_text("Options").click()
    await page.get_by_test_id("model").fill("openai:gpt-browser-csp")
    await page.get_by_test_id("start").click()
    reply = page.get_by_test_id("reply")
    await expect(reply.locator("strong")).to_have_text("Done", timeout=60_000)
    await expect(page.get_by_test_id("task-status")).to_have_text("replied", timeout=60_000)
    assert await page.evaluate("window.violations") == []
    assert warnings == []


async def test_a_position_beyond_the_stores_range_reads_nothing_on_both_stores(
    tmp_path: Path,
) -> None:
    """Under the gateway's bound: what the CLI and ``errands.Client`` read (``watch --after``)."""
    schema = f"errands_gwb_{uuid.uuid4().hex[:12]}"
    with pg_admin() as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        try:
            for url in (f"sqlite:///{tmp_path / 'positions.db'}", pg_url_in(schema)):
                store = open_store(url)
                try:
                    assert store.list_events("task-x-1", after_seq=10**20) == [], url
                    assert store.list_session("gwb-x", after_seq=10**20) == [], url
                finally:
                    store.close()
        finally:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
