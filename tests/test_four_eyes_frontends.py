"""Four eyes in every frontend (issue 25, acceptance 3): a call whose policy is ``two`` as the
CLI, the gateway and the page show it. The status says the policy in words and how many of
the two approvals the call has, from whom; the first approval says it was recorded and the call
waits for a second, different approver (never that the call was approved); the second says it
runs; ``errands run`` follows both. Principal ids pass through the terminal's safety helpers.

Real dev server, worker, scripted model and MCP server (``tests.test_four_eyes``' set-up: its
``search`` needs two approvals). The CLI runs as a real process and acts as the principal
``operator``; the other approver acts through ``errands.Client.as_principal``. The gateway has
a session store of its own with API keys (keys in the suite's shared store would make every
other gateway test need a token)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, expect
from temporalio.client import Client

from errands.adapters.identity.keys import mint
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore, open_store
from errands.cli._output import approval_text, step_line
from errands.client import Client as ErrandsClient
from errands.contracts.approvals import ApprovalReceipt
from errands.contracts.events import StoredEvent
from errands.contracts.principals import Principal, Role
from errands.gateway import create_app, serving
from errands.gateway._models import ApprovalAccepted
from errands.settings import Settings
from errands.workers import build_worker
from tests.browser import chromium, needs_chromium
from tests.conftest import read_stderr_until, run_cli, running_cli
from tests.helpers import eventually
from tests.mcp_notes import Servers
from tests.test_four_eyes import (
    ALICE,
    CAROL,
    approval_log,
    calls_once,
    waiting,
)
from tests.test_four_eyes import errands_client as errands_client  # noqa: F401  (fixture)
from tests.test_four_eyes import policy_worker as policy_worker  # noqa: F401  (fixture)
from tests.test_page_principals import open_page, sign_in
from tests.test_work_tools import MODEL

SEARCH = "mcp__web__search"


def cli_for(cli_env: dict[str, str], worker: Settings) -> dict[str, str]:
    """The CLI's environment on the queue of the worker whose ``search`` needs two approvals."""
    return {**cli_env, "ERRANDS_TASK_QUEUE": worker.task_queue, "ERRANDS_MODEL": MODEL}


# -- the CLI ---------------------------------------------------------------------------------


async def test_the_cli_says_the_first_approval_is_recorded_and_the_call_waits_for_a_second(
    scripted: ScriptedModelServer,
    store: SessionStore,
    errands_client: ErrandsClient,  # noqa: F811
    policy_worker: Settings,  # noqa: F811
    cli_env: dict[str, str],
) -> None:
    agent = calls_once(SEARCH, {"query": "four eyes at the terminal"})
    scripted.script("gpt-tools", agent, agent)
    env = cli_for(cli_env, policy_worker)
    task = await errands_client.as_principal(ALICE).start("Search the notes.", model=MODEL)
    pending = await waiting(task)

    before = await run_cli(env, "status", task.task_id)
    assert before.code == 0, before
    assert "  policy: two: two different people must approve it (four eyes)" in before.stdout
    assert "  approvals: 0 of 2\n" in before.stdout
    as_json = await run_cli(env, "status", task.task_id, "--json")
    shown = as_json.json()["pending_approval"]
    assert (shown["policy"], shown["approvals_needed"], shown["approved_by"]) == ("two", 2, [])

    first = await run_cli(env, "approve", task.task_id, "--sha256", pending["arguments_sha256"])
    assert first.code == 0, first
    said = first.stdout.splitlines()[0]
    assert said == (
        f"{task.task_id}: your approval is recorded, 1 of 2 (operator); the call does not run "
        "yet: it waits for a second, different approver"
    )
    assert "approved;" not in first.stdout and "goes on" not in first.stdout

    after = await run_cli(env, "status", task.task_id)
    assert "waiting_for_user" in after.stdout
    assert "  approvals: 1 of 2 (operator)\n" in after.stdout
    again = await run_cli(
        env, "approve", task.task_id, "--sha256", pending["arguments_sha256"], "--json"
    )
    assert again.code != 0, "the operator cannot count twice"
    assert "operator approved this call of mcp__web__search already" in again.stderr

    second = await errands_client.as_principal(CAROL).task(task.task_id).approve()
    assert second.waiting_for == 0
    result = await task.wait(timeout=60)
    assert result.status == "replied"
    assert [t for t, _ in approval_log(store, task.task_id)] == [
        "approval_requested",
        "approval_recorded",
        "approval_answered",
    ]


async def test_the_cli_as_second_approver_says_the_call_runs_and_json_names_both(
    scripted: ScriptedModelServer,
    errands_client: ErrandsClient,  # noqa: F811
    policy_worker: Settings,  # noqa: F811
    cli_env: dict[str, str],
) -> None:
    agent = calls_once(SEARCH, {"query": "the second pair of eyes"})
    scripted.script("gpt-tools", agent, agent)
    env = cli_for(cli_env, policy_worker)
    task = await errands_client.as_principal(ALICE).start("Search the notes.", model=MODEL)
    pending = await waiting(task)
    await errands_client.as_principal(CAROL).task(task.task_id).approve()
    await waiting(task, approved=1)

    second = await run_cli(
        env, "approve", task.task_id, "--sha256", pending["arguments_sha256"], "--json"
    )
    assert second.code == 0, second
    receipt = second.json()
    assert receipt["waiting_for"] == 0
    assert receipt["approved_by"] == [
        {"id": "carol", "role": "approver"},
        {"id": "operator", "role": "admin"},
    ]
    result = await task.wait(timeout=60)
    assert result.status == "replied"


async def test_errands_run_follows_the_first_approval_and_the_second(
    scripted: ScriptedModelServer,
    errands_client: ErrandsClient,  # noqa: F811
    policy_worker: Settings,  # noqa: F811
    cli_env: dict[str, str],
) -> None:
    agent = calls_once(SEARCH, {"query": "followed"})
    scripted.script("gpt-tools", agent, agent)
    env = cli_for(cli_env, policy_worker)
    async with running_cli(env, "run", "Search the notes.") as proc:
        seen = await read_stderr_until(proc, "approve with:")
        task_id = seen.split("errands: task ", 1)[1].split()[0]
        assert f"{SEARCH} (main) waits for your approval." in seen
        assert "  approvals: 0 of 2" in seen
        digest = seen.split("--sha256 ", 1)[1].split()[0]
        first = await run_cli(env, "approve", task_id, "--sha256", digest)
        assert first.code == 0, first
        recorded = await read_stderr_until(proc, "waiting for a second approver")
        assert f"  operator approved {SEARCH} (1 of 2); waiting for a second approver" in recorded
        await errands_client.as_principal(CAROL).task(task_id).approve()
        ran = await read_stderr_until(proc, "it runs")
        assert f"  operator and carol approved {SEARCH}; it runs" in ran
        assert await proc.wait() == 0


# -- the gateway -----------------------------------------------------------------------------


@dataclass
class Gateway:
    url: str
    keys: dict[str, str]
    """Principal id → bearer token."""

    def as_(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[who]}"}


@pytest.fixture(scope="module")
async def gateway(
    client: Client, settings: Settings, tmp_path_factory: pytest.TempPathFactory, servers: Servers
) -> AsyncIterator[Gateway]:
    """A gateway over a store of its own holding API keys for alice (a user) and carol (an
    approver), with a worker whose ``search`` needs two approvals and ``write`` an approver."""
    where: Path = tmp_path_factory.mktemp("four-eyes-gateway")
    web = {**servers.config["web"], "approval": {"search": "two", "write": "approver"}}
    own = settings.model_copy(
        update={
            "task_queue": f"four-eyes-gw-{uuid.uuid4().hex[:6]}",
            "database_url": f"sqlite:///{where / 'sessions.db'}",
            "mcp_servers": json.dumps({"web": web}),
        }
    )
    store = open_store(own.session_database_url())
    router = ModelRouter(own)
    keys: dict[str, str] = {}
    roles: dict[str, Role] = {"alice": "user", "carol": "approver"}
    for name, role in roles.items():
        token, record = mint(name, role, datetime.now(UTC))
        store.add_principal(record)
        keys[name] = token
    try:
        async with build_worker(client, own, store=store, router=router):
            errands = ErrandsClient(client, own, store=store)
            async with serving(create_app(errands, token=None)) as url:
                yield Gateway(url, keys)
    finally:
        await router.aclose()
        store.close()


async def test_the_gateways_approval_answer_says_who_approved_and_how_many_are_missing(
    scripted: ScriptedModelServer, gateway: Gateway
) -> None:
    agent = calls_once(SEARCH, {"query": "through the gateway"})
    scripted.script("gpt-tools", agent, agent)
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        started = await http.post(
            f"/v1/sessions/fe-{uuid.uuid4().hex[:8]}/tasks",
            json={"text": "Search the notes.", "model": MODEL},
            headers=gateway.as_("alice"),
        )
        assert started.status_code == 201, started.text
        task_id = started.json()["task_id"]

        async def pending() -> dict[str, Any] | None:
            state = (await http.get(f"/v1/tasks/{task_id}", headers=gateway.as_("alice"))).json()
            return state.get("pending_approval")

        shown = await eventually(pending, "the call waiting for two approvals")
        assert (shown["policy"], shown["approvals_needed"], shown["approved_by"]) == ("two", 2, [])
        answer = {"decision": "approve", "arguments_sha256": shown["arguments_sha256"]}

        first = await http.post(
            f"/v1/tasks/{task_id}/approval", json=answer, headers=gateway.as_("carol")
        )
        assert first.status_code == 200, first.text
        assert first.json()["waiting_for"] == 1
        assert first.json()["approved_by"] == [{"id": "carol", "role": "approver"}]
        after = (await http.get(f"/v1/tasks/{task_id}", headers=gateway.as_("alice"))).json()
        assert after["status"] == "waiting_for_user"
        assert after["pending_approval"]["approved_by"] == [{"id": "carol", "role": "approver"}]

        second = await http.post(
            f"/v1/tasks/{task_id}/approval", json=answer, headers=gateway.as_("alice")
        )
        assert second.status_code == 200, second.text
        assert second.json()["waiting_for"] == 0
        assert second.json()["approved_by"] == [
            {"id": "carol", "role": "approver"},
            {"id": "alice", "role": "user"},
        ]

        async def replied() -> dict[str, Any] | None:
            state = (await http.get(f"/v1/tasks/{task_id}", headers=gateway.as_("alice"))).json()
            return state if state["status"] == "replied" else None

        await eventually(replied, "the call run and the task replied")


async def start_through(gateway: Gateway, who: str) -> str:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        started = await http.post(
            f"/v1/sessions/fe-{uuid.uuid4().hex[:8]}/tasks",
            json={"text": "Do it.", "model": MODEL},
            headers=gateway.as_(who),
        )
    assert started.status_code == 201, started.text
    return str(started.json()["task_id"])


async def approve_through(gateway: Gateway, who: str, task_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        answered = await http.post(
            f"/v1/tasks/{task_id}/approval", json={"decision": "approve"}, headers=gateway.as_(who)
        )
    assert answered.status_code == 200, answered.text
    return dict(answered.json())


async def until_replied(gateway: Gateway, task_id: str) -> None:
    async def replied() -> bool:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
            got = await http.get(f"/v1/tasks/{task_id}", headers=gateway.as_("alice"))
        return bool(got.json()["status"] == "replied")

    await eventually(replied, f"{task_id} replied")


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as launched:
        yield launched


@needs_chromium
async def test_the_page_card_says_two_approvers_and_after_its_approval_waits_for_a_second(
    scripted: ScriptedModelServer, gateway: Gateway, browser: Browser
) -> None:
    agent = calls_once(SEARCH, {"query": "on the page"})
    scripted.script("gpt-tools", agent, agent)
    task_id = await start_through(gateway, "alice")
    errors: list[str] = []
    page = await open_page(browser, gateway.url, errors)
    await sign_in(page, gateway.keys["alice"])
    await page.get_by_test_id("watch-id").fill(task_id)
    await page.get_by_test_id("watch").click()

    card = page.get_by_test_id("approval")
    await expect(card).to_be_visible()
    await expect(page.get_by_test_id("approval-policy")).to_have_text("needs two approvers: 0 of 2")
    await expect(page.get_by_test_id("approval-waiting")).to_be_hidden()
    await page.get_by_test_id("approval-approve").click()

    # The first approval: the card stays and says the call waits for someone else.
    await expect(page.get_by_test_id("approval-waiting")).to_contain_text(
        "it waits for a second, different approver"
    )
    await expect(page.get_by_test_id("approval-policy")).to_have_text(
        "needs two approvers: 1 of 2 (alice)"
    )
    await expect(card).to_be_visible()
    await expect(page.get_by_test_id("approval-approve")).to_be_hidden()
    await expect(page.get_by_test_id("approval-deny")).to_be_visible()

    # The second, by another principal: the call runs and the card goes.
    second = await approve_through(gateway, "carol", task_id)
    assert second["waiting_for"] == 0
    await expect(card).to_be_hidden()
    await until_replied(gateway, task_id)
    assert errors == []
    await page.close()


@needs_chromium
async def test_an_open_card_shows_another_principals_first_approval_as_it_lands(
    scripted: ScriptedModelServer, gateway: Gateway, browser: Browser
) -> None:
    """The owner's page shows the call; carol approves it over the API: the card, still open,
    says 1 of 2 (carol) from the approval_recorded event, and its Approve stays offered."""
    agent = calls_once(SEARCH, {"query": "as it lands"})
    scripted.script("gpt-tools", agent, agent)
    task_id = await start_through(gateway, "alice")
    errors: list[str] = []
    page = await open_page(browser, gateway.url, errors)
    await sign_in(page, gateway.keys["alice"])
    await page.get_by_test_id("watch-id").fill(task_id)
    await page.get_by_test_id("watch").click()
    policy = page.get_by_test_id("approval-policy")
    await expect(policy).to_have_text("needs two approvers: 0 of 2")

    first = await approve_through(gateway, "carol", task_id)
    assert first["waiting_for"] == 1
    await expect(policy).to_have_text("needs two approvers: 1 of 2 (carol)")
    await expect(page.get_by_test_id("approval-approve")).to_be_visible()
    await page.get_by_test_id("approval-approve").click()
    await expect(page.get_by_test_id("approval")).to_be_hidden()
    await until_replied(gateway, task_id)
    assert errors == []
    await page.close()


@needs_chromium
async def test_a_page_opened_after_the_first_approval_shows_it_and_approves_second(
    scripted: ScriptedModelServer, gateway: Gateway, browser: Browser
) -> None:
    agent = calls_once(SEARCH, {"query": "the page comes second"})
    scripted.script("gpt-tools", agent, agent)
    task_id = await start_through(gateway, "alice")

    async def waits() -> bool:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
            got = await http.get(f"/v1/tasks/{task_id}", headers=gateway.as_("alice"))
        return got.json().get("pending_approval") is not None

    await eventually(waits, f"{task_id} waiting for approval")
    first = await approve_through(gateway, "carol", task_id)
    assert first["waiting_for"] == 1

    errors: list[str] = []
    page = await open_page(browser, gateway.url, errors)
    await sign_in(page, gateway.keys["alice"])
    await page.get_by_test_id("watch-id").fill(task_id)
    await page.get_by_test_id("watch").click()
    card = page.get_by_test_id("approval")
    await expect(card).to_be_visible()
    await expect(page.get_by_test_id("approval-policy")).to_have_text(
        "needs two approvers: 1 of 2 (carol)"
    )
    await expect(page.get_by_test_id("approval-waiting")).to_be_hidden()
    await page.get_by_test_id("approval-approve").click()
    await expect(card).to_be_hidden()
    await until_replied(gateway, task_id)
    assert errors == []
    await page.close()


@needs_chromium
async def test_the_page_card_says_a_call_of_policy_approver_is_for_an_approver(
    scripted: ScriptedModelServer, gateway: Gateway, browser: Browser
) -> None:
    agent = calls_once("mcp__web__write", {"name": f"fe-{uuid.uuid4().hex[:6]}", "text": "x"})
    scripted.script("gpt-tools", agent, agent)
    task_id = await start_through(gateway, "alice")
    errors: list[str] = []
    page = await open_page(browser, gateway.url, errors)
    await sign_in(page, gateway.keys["carol"])
    await page.get_by_test_id("watch-id").fill(task_id)
    await page.get_by_test_id("watch").click()
    await expect(page.get_by_test_id("approval")).to_be_visible()
    await expect(page.get_by_test_id("approval-policy")).to_have_text("for an approver")
    await page.get_by_test_id("approval-approve").click()
    await expect(page.get_by_test_id("approval")).to_be_hidden()
    await until_replied(gateway, task_id)
    assert errors == []
    await page.close()


@pytest.mark.fast
def test_the_gateway_names_approvers_by_id_and_role_only() -> None:
    receipt = ApprovalReceipt(
        approval_id="a-1",
        decision="approve",
        waiting_for=1,
        approved_by=[Principal(id="carol", role="approver", via="key")],
    )
    accepted = ApprovalAccepted(task_id="t-1", **receipt.model_dump())
    assert accepted.model_dump()["approved_by"] == [{"id": "carol", "role": "approver"}]
    assert accepted.model_dump()["waiting_for"] == 1


# -- terminal safety -------------------------------------------------------------------------

HOSTILE = "eve\u202e\x9b2J"
"""A principal id the id pattern lets through (no ASCII control, no blank, no quote) that a
terminal would obey: a right-to-left override and a C1 control sequence introducer."""
MADE_VISIBLE = "eve\\u202e\\x9b2J"


@pytest.mark.fast
def test_a_principal_id_in_the_approval_text_is_made_visible() -> None:
    pending = {
        "approval_id": "a-1",
        "tool": SEARCH,
        "where": "main",
        "arguments": "{}",
        "arguments_sha256": "0" * 64,
        "arguments_bytes": 2,
        "policy": "two",
        "approvals_needed": 2,
        "approved_by": [{"id": HOSTILE, "role": "approver"}],
    }
    text = approval_text("t-1", pending, width=None)
    assert f"  approvals: 1 of 2 ({MADE_VISIBLE})" in text.splitlines()
    assert "\u202e" not in text and "\x9b" not in text


@pytest.mark.fast
def test_a_principal_id_in_a_follow_line_is_made_visible() -> None:
    by = {"id": HOSTILE, "role": "approver"}
    recorded = StoredEvent(
        seq=5,
        at="2026-01-01T00:00:00+00:00",
        key="t-1:approval_recorded",
        task_id="t-1",
        type="approval_recorded",
        data={
            "approval_id": "a-1",
            "by": by,
            "approved_by": [by],
            "waiting_for": 1,
            "arguments_sha256": None,
            "call_sha256": "0" * 64,
            "tool": SEARCH,
        },
    )
    line = step_line(recorded, {})
    assert line == f"  {MADE_VISIBLE} approved {SEARCH} (1 of 2); waiting for a second approver"
