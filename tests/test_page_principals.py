"""The page signs in and shows only the signed-in principal's sessions (issue 25, acceptance 6):
headless Chromium against a real gateway whose API keys are in a store of this module's own,
the real worker and dev server, the scripted model.

Alice and Bob each start a task through the API. Signed in as Bob the page holds nothing of
Alice's (her session id, her task's words, its reply: not shown, not hidden in the DOM, not in a
field); signed in as Alice it shows them. Signing out forgets the token and clears the page; a
wrong token, or a key revoked while the page is open, brings the sign-in prompt back with the
gateway's reason and never the token. On loopback with no auth configured the page says so and
asks for nothing."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, expect
from playwright.async_api import TimeoutError as PlaywrightTimeout
from temporalio.client import Client

from errands.adapters.identity.keys import mint
from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore, open_store
from errands.client import Authenticator
from errands.client import Client as ErrandsClient
from errands.gateway import create_app, serving
from errands.settings import Settings
from tests.browser import chromium, needs_chromium
from tests.helpers import eventually, final

pytestmark = needs_chromium

TIMEOUT_MS = 30_000
MODEL = "openai:gpt-page-principals"
PROMPT = "This gateway needs a token: an errands API key, an OIDC token or the admin token."


@dataclass
class Gateway:
    url: str
    keys: SessionStore
    """Where this gateway's API keys are: a store of the module's own, so the shared one stays
    without keys (a key in it would make every other test's gateway ask for a token)."""

    def mint(self, name: str) -> str:
        """A new API key for user ``name``; its token."""
        token, record = mint(name, "user", datetime.now(UTC))
        self.keys.add_principal(record)
        return token


@pytest.fixture(scope="module")
async def gateway(
    client: Client,
    settings: Settings,
    store: SessionStore,
    worker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Gateway]:
    keys = open_store(f"sqlite:///{tmp_path_factory.mktemp('page-keys') / 'keys.db'}")
    app = create_app(
        ErrandsClient(client, settings, store=store), token=None, authenticator=Authenticator(keys)
    )
    try:
        async with serving(app) as url:
            yield Gateway(url, keys)
    finally:
        keys.close()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as launched:
        yield launched


@dataclass
class Started:
    session: str
    task: str
    text: str
    reply: str


async def start_and_finish(
    url: str, token: str, scripted: ScriptedModelServer, who: str
) -> Started:
    """``who`` starts a task in a new session through the API; it replies, and their list
    (visibility lags a start) has it."""
    mark = uuid.uuid4().hex[:8]
    session = f"pp-{who}-{mark}"
    text = f"{who} plans the offsite {mark}"
    reply = f"The offsite plan of {who} {mark}"
    scripted.script(MODEL.removeprefix("openai:"), final(reply))
    bearer = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=bearer, timeout=60) as h:
        created = await h.post(f"/v1/sessions/{session}/tasks", json={"text": text, "model": MODEL})
        assert created.status_code == 201, created.text
        task = str(created.json()["task_id"])

        async def replied_and_listed() -> bool:
            state = (await h.get(f"/v1/tasks/{task}")).json()
            listed = (await h.get("/v1/tasks", params={"session": session})).json()["tasks"]
            return state["status"] == "replied" and task in {t["task_id"] for t in listed}

        await eventually(replied_and_listed, f"{who}'s task {task} replied and listed", timeout=120)
    return Started(session, task, text, reply)


async def open_page(browser: Browser, url: str, errors: list[str]) -> Page:
    expect.set_options(timeout=TIMEOUT_MS)
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("pageerror", lambda error: errors.append(str(error)))
    await page.goto(url)
    return page


async def sign_in(page: Page, token: str) -> None:
    await expect(page.get_by_test_id("sign-in-panel")).to_be_visible()
    await page.get_by_test_id("token").fill(token)
    await page.get_by_test_id("sign-in-submit").click()


async def everything_on_the_page(page: Page) -> str:
    """The whole DOM, hidden parts included, and every field's value."""
    fields = await page.evaluate(
        "() => [...document.querySelectorAll('input, textarea')].map((e) => e.value).join('\\n')"
    )
    return await page.content() + "\n" + str(fields)


async def assert_nothing_of(page: Page, started: Started) -> None:
    shown = await everything_on_the_page(page)
    for part in (started.session, started.task, started.text, started.reply):
        assert part not in shown, f"{part!r} of another principal is on the page"


async def listed_sessions(page: Page) -> set[str]:
    items = page.get_by_test_id("session-item")
    return {
        str(await items.nth(i).get_attribute("data-session")) for i in range(await items.count())
    }


async def refusal(url: str, token: str, path: str) -> str:
    """The detail of the 404 the gateway answers ``token`` on ``path`` with."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as h:
        refused = await h.get(path, headers={"Authorization": f"Bearer {token}"})
    assert refused.status_code == 404, refused.text
    return str(refused.json()["detail"])


async def reason_for(url: str, token: str) -> str:
    """What the gateway says to ``token``: the detail of its 401."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as h:
        refused = await h.get("/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert refused.status_code == 401, refused.text
    assert refused.headers["www-authenticate"].startswith("Bearer")
    return str(refused.json()["detail"])


async def test_signed_in_as_bob_the_page_shows_none_of_alices_sessions_and_as_alice_it_does(
    browser: Browser, gateway: Gateway, scripted: ScriptedModelServer
) -> None:
    # Names of their own: tasks owned by another test's "bob" would be listed for this one too.
    her_name, his_name = f"alice-{uuid.uuid4().hex[:6]}", f"bob-{uuid.uuid4().hex[:6]}"
    alice, bob = gateway.mint(her_name), gateway.mint(his_name)
    hers = await start_and_finish(gateway.url, alice, scripted, "alice")
    his = await start_and_finish(gateway.url, bob, scripted, "bob")
    errors: list[str] = []
    page = await open_page(browser, gateway.url, errors)

    # Nobody signed in: the prompt, and nothing else.
    await expect(page.get_by_test_id("sign-in")).to_contain_text(PROMPT)
    await expect(page.get_by_test_id("session-panel")).to_be_hidden()
    await expect(page.get_by_test_id("token")).to_be_focused()
    await expect(page.get_by_test_id("sign-in-error")).to_be_empty()

    await sign_in(page, bob)
    await expect(page.get_by_test_id("who")).to_have_text(f"Signed in as {his_name} (user)")
    await expect(page.locator(f'[data-session="{his.session}"]')).to_be_visible()
    assert await listed_sessions(page) == {his.session}
    await assert_nothing_of(page, hers)
    assert bob not in await everything_on_the_page(page), "the token is never on the page"

    # Her task followed by its id, or her session opened by its address: nothing of them shows.
    await page.get_by_test_id("watch-id").fill(hers.task)
    await page.get_by_test_id("watch").click()
    refused = await refusal(gateway.url, bob, f"/v1/tasks/{hers.task}")
    await expect(page.get_by_test_id("start-error")).to_have_text(refused)
    await expect(page.get_by_test_id("task")).to_be_hidden()
    await page.goto("about:blank")
    await page.goto(f"{gateway.url}/#session={hers.session}")  # the tab keeps Bob signed in
    await expect(page.get_by_test_id("who")).to_have_text(f"Signed in as {his_name} (user)")
    await expect(page.get_by_test_id("session-name")).to_have_text(hers.session)
    await refusal(gateway.url, bob, f"/v1/sessions/{hers.session}/messages")
    await expect(page.get_by_test_id("sessions-error")).to_be_empty()  # shown as a new session
    await expect(page.get_by_test_id("session-tasks").locator("li")).to_have_count(0)
    await expect(page.get_by_test_id("message")).to_have_count(0)
    for part in (hers.task, hers.text, hers.reply):
        assert part not in await everything_on_the_page(page)

    # His own task, followed through its event stream.
    await page.locator(f'[data-session="{his.session}"]').get_by_role("button").click()
    await page.get_by_test_id("session-task").get_by_role("button").click()
    await expect(page.get_by_test_id("reply")).to_contain_text(his.reply)
    await expect(page.get_by_test_id("event").last).to_have_attribute("data-type", "replied")

    # Signing out forgets the token for the tab and leaves nothing of Bob's on the page.
    await page.get_by_test_id("sign-out").click()
    await expect(page.get_by_test_id("sign-in-panel")).to_be_visible()
    await expect(page.get_by_test_id("who")).to_be_hidden()
    await expect(page.get_by_test_id("event")).to_have_count(0)
    assert await page.evaluate("() => location.hash") == ""
    assert await page.evaluate("() => sessionStorage.getItem('errands.token')") is None
    await assert_nothing_of(page, his)

    # Alice sees hers, and nothing of his.
    await sign_in(page, alice)
    await expect(page.get_by_test_id("who")).to_have_text(f"Signed in as {her_name} (user)")
    item = page.locator(f'[data-session="{hers.session}"]')
    await expect(item).to_be_visible()
    assert await listed_sessions(page) == {hers.session}
    await item.get_by_role("button").click()
    await expect(page.get_by_test_id("session-task")).to_contain_text(hers.text)
    await expect(page.get_by_test_id("conversation")).to_contain_text(hers.reply)
    await assert_nothing_of(page, his)
    assert errors == []


async def test_a_wrong_token_brings_the_prompt_back_with_the_gateways_reason(
    browser: Browser, gateway: Gateway
) -> None:
    wrong = f"ek_0123abcd.{uuid.uuid4().hex}"
    errors: list[str] = []
    page = await open_page(browser, gateway.url, errors)
    await sign_in(page, wrong)
    reason = await reason_for(gateway.url, wrong)
    await expect(page.get_by_test_id("sign-in-error")).to_have_text(reason)
    await expect(page.get_by_test_id("sign-in-panel")).to_be_visible()
    await expect(page.get_by_test_id("session-panel")).to_be_hidden()
    assert wrong not in await everything_on_the_page(page)
    assert await page.evaluate("() => sessionStorage.getItem('errands.token')") is None
    assert errors == []


async def test_a_key_revoked_while_the_page_is_open_brings_the_prompt_back_with_the_reason(
    browser: Browser, gateway: Gateway
) -> None:
    name = f"carol-{uuid.uuid4().hex[:6]}"
    token = gateway.mint(name)
    errors: list[str] = []
    page = await open_page(browser, gateway.url, errors)
    await sign_in(page, token)
    await expect(page.get_by_test_id("who")).to_have_text(f"Signed in as {name} (user)")
    await expect(page.get_by_test_id("session-panel")).to_be_visible()

    assert gateway.keys.revoke_principal(name, datetime.now(UTC))
    # The page's next call meets the revoked key: a refresh, or a load of its own still on its
    # way after the sign-in (then the prompt is back before the refresh can be clicked).
    with contextlib.suppress(PlaywrightTimeout):
        await page.get_by_test_id("sessions-refresh").click(timeout=5_000)
    reason = await reason_for(gateway.url, token)
    await expect(page.get_by_test_id("sign-in-error")).to_have_text(reason)
    await expect(page.get_by_test_id("session-panel")).to_be_hidden()
    await expect(page.get_by_test_id("who")).to_be_hidden()
    assert token not in await everything_on_the_page(page)
    assert await page.evaluate("() => sessionStorage.getItem('errands.token')") is None
    assert errors == []


async def test_on_loopback_with_no_auth_the_page_says_so_and_asks_for_nothing(
    browser: Browser,
    client: Client,
    settings: Settings,
    store: SessionStore,
    tmp_path: Path,
) -> None:
    empty = open_store(f"sqlite:///{tmp_path / 'no-keys.db'}")
    app = create_app(
        ErrandsClient(client, settings, store=store), token=None, authenticator=Authenticator(empty)
    )
    try:
        async with serving(app) as url:
            errors: list[str] = []
            page = await open_page(browser, url, errors)
            await expect(page.get_by_test_id("who")).to_have_text("local, no sign-in needed")
            await expect(page.get_by_test_id("session-panel")).to_be_visible()
            await expect(page.get_by_test_id("sign-in-panel")).to_be_hidden()
            await expect(page.get_by_test_id("sign-out")).to_be_hidden()
            # A token the tab kept from another gateway is not needed here: it is dropped.
            await page.evaluate("() => sessionStorage.setItem('errands.token', 'left-over')")
            await page.reload()
            await expect(page.get_by_test_id("who")).to_have_text("local, no sign-in needed")
            await expect(page.get_by_test_id("sign-out")).to_be_hidden()
            assert await page.evaluate("() => sessionStorage.getItem('errands.token')") is None
            assert errors == []
    finally:
        empty.close()
