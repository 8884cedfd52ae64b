"""The web page in headless Chromium against a real gateway, worker and dev server (issue 6).

Uses Debian's ``chromium`` driven by Playwright (``playwright install`` downloads a browser of
its own, which this project does not rely on). Screenshots of each state are kept under
``test-artifacts/web-page/``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect
from temporalio.client import Client

from errands.client import Client as ErrandsClient
from errands.gateway import create_app, serving
from errands.scripted import Call, RecordedRequest, Reply, ScriptedModelServer
from errands.settings import Settings
from errands.store import SessionStore
from tests.helpers import Conversation
from tests.mcp_notes import Servers

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "web-page"
TIMEOUT_MS = 30_000

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists() and not os.environ.get("CI"),
    reason=f"no Chromium at {CHROMIUM} (install Debian's `chromium` package); CI always runs this",
)

QUESTIONS = [
    {
        "question": "Which database should the service use?",
        "header": "Database",
        "options": [
            {"label": "PostgreSQL", "description": "we already run it"},
            {"label": "SQLite"},
        ],
    },
    {
        "question": "Which extras should it have?",
        "header": "Extras",
        "multi_select": True,
        "options": [{"label": "Caching"}, {"label": "Search"}],
    },
]
REPLY = "Lisbon first, on PostgreSQL, with caching and a message queue."


def answer_branch(request: RecordedRequest) -> Reply:
    prompt = next(m["content"] for m in request.body["messages"] if m["role"] == "user")
    return Reply(text=f"Notes on {prompt.splitlines()[0]}.", delay=0.3)


@pytest.fixture(scope="module")
async def page_url(
    client: Client, settings: Settings, store: SessionStore, worker: Any
) -> AsyncIterator[str]:
    app = create_app(ErrandsClient(client, settings, store=store), token=None)
    async with serving(app) as url:
        yield url


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            yield browser
        finally:
            await browser.close()


async def snap(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


async def test_the_page_starts_a_task_shows_its_branches_takes_an_answer_and_shows_the_reply(
    page_url: str, browser: Browser, scripted: ScriptedModelServer
) -> None:
    convo = Conversation(
        [
            Reply(
                calls=[
                    Call(
                        "delegate",
                        {
                            "reply": "Comparing three cities.",
                            "subtasks": [
                                {"type": "general", "prompt": f"About {city}", "references": [1]}
                                for city in ("Lisbon", "Porto", "Madrid")
                            ],
                        },
                    )
                ]
            ),
            Reply(calls=[Call("ask_user", {"questions": QUESTIONS})]),
            Reply(calls=[Call("final_reply", {"text": REPLY})]),
            Reply(text="It compared three cities and asked you two questions."),
        ],
        answer_branch,
        branches=3,
    ).install(scripted, "gpt-web")
    expect.set_options(timeout=TIMEOUT_MS)
    page = await browser.new_page(viewport={"width": 1100, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    await page.goto(page_url)
    await snap(page, "0-empty")

    session = f"web-{uuid.uuid4().hex[:6]}"
    await page.get_by_test_id("session").fill(session)
    await page.get_by_test_id("task-text").fill("Plan a weekend service for three cities")
    await page.get_by_text("Options").click()
    await page.get_by_test_id("model").fill("openai:gpt-web")
    await page.get_by_test_id("start").click()

    # The branches appear live, each marked completed with its output.
    branches = page.get_by_test_id("branch")
    await expect(branches).to_have_count(3)
    for k in (1, 2, 3):
        await expect(page.locator(f'[data-branch="0-{k}"]')).to_have_attribute(
            "data-status", "completed"
        )
    await expect(page.locator('[data-branch="0-1"]')).to_contain_text("Notes on About Lisbon.")
    await expect(page.locator('[data-round="0"] .ack')).to_have_text("Comparing three cities.")

    # The question arrives as a picker: radios for one choice, checkboxes for several, Other.
    question = page.get_by_test_id("question")
    await expect(question).to_be_visible()
    await expect(page.get_by_test_id("task-status")).to_have_text("waiting for user")
    await snap(page, "1-branches-and-question")
    database = question.locator('fieldset[data-qid="q1"]')
    extras = question.locator('fieldset[data-qid="q2"]')
    await expect(database.locator('input[type="radio"]')).to_have_count(3)
    await expect(extras.locator('input[type="checkbox"]')).to_have_count(3)

    # "Other" without words is refused, with the reason shown beside the picker.
    await database.get_by_label("Other").check()
    await page.get_by_test_id("answer-send").click()
    await expect(page.get_by_test_id("answer-error")).to_contain_text("Other")
    await expect(question).to_be_visible()
    await snap(page, "2-answer-refused")

    await database.get_by_label("PostgreSQL").check()
    await extras.get_by_label("Caching").check()
    await extras.get_by_label("Extras: your own answer").fill("a message queue")
    await snap(page, "3-answer-chosen")
    await page.get_by_test_id("answer-send").click()

    await expect(page.get_by_test_id("reply")).to_have_text(REPLY)
    await expect(page.get_by_test_id("task-status")).to_have_text("replied")
    await expect(question).to_be_hidden()
    await expect(page.get_by_test_id("round")).to_have_count(2)
    await expect(page.get_by_test_id("conversation")).to_contain_text(REPLY)
    await snap(page, "4-reply")

    answered = [m for m in convo.main_requests[2].body["messages"] if m["role"] == "tool"][-1]
    assert "Database: PostgreSQL" in answered["content"]
    assert "Caching" in answered["content"] and "a message queue" in answered["content"]

    # A side question about the finished task.
    await page.get_by_test_id("btw-question").fill("What did you do?")
    await page.get_by_test_id("btw-ask").click()
    await expect(page.get_by_test_id("btw-answer")).to_have_text(
        "It compared three cities and asked you two questions."
    )
    await snap(page, "5-side-question")
    assert errors == [], errors


async def test_the_page_shows_a_tool_call_waiting_for_approval_and_denies_it_with_a_reason(
    client: Client,
    store: SessionStore,
    browser: Browser,
    scripted: ScriptedModelServer,
    asking_worker: Settings,
    servers: Servers,
) -> None:
    def main_agent(request: RecordedRequest) -> Reply:
        results = [m for m in request.body["messages"] if m["role"] == "tool"]
        if not results:
            return Reply(
                text="I will note this down.",
                calls=[Call("mcp__web__write", {"name": "web-page", "text": "from the page"})],
            )
        return Reply(calls=[Call("final_reply", {"text": results[-1]["content"][:60]})])

    scripted.script("gpt-tools", main_agent, main_agent)
    app = create_app(ErrandsClient(client, asking_worker, store=store), token=None)
    expect.set_options(timeout=TIMEOUT_MS)
    async with serving(app) as url:
        page = await browser.new_page(viewport={"width": 1100, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        await page.goto(url)
        await page.get_by_test_id("session").fill(f"web-approval-{uuid.uuid4().hex[:6]}")
        await page.get_by_test_id("task-text").fill("Note this down")
        await page.get_by_text("Options").click()
        await page.get_by_test_id("model").fill("openai:gpt-tools")
        await page.get_by_test_id("start").click()

        card = page.get_by_test_id("approval")
        await expect(card).to_be_visible()
        await expect(page.get_by_test_id("task-status")).to_have_text("waiting for user")
        await expect(page.get_by_test_id("approval-tool")).to_have_text("mcp__web__write")
        await expect(page.get_by_test_id("approval-why")).to_have_text("I will note this down.")
        await expect(page.get_by_test_id("approval-arguments")).to_contain_text("from the page")
        await expect(page.get_by_test_id("approval-always")).to_be_visible()
        await snap(page, "6-approval")
        await page.get_by_test_id("approval-reason").fill("not from the web page")
        await page.get_by_test_id("approval-deny").click()

        await expect(card).to_be_hidden()
        await expect(page.get_by_test_id("task-status")).to_have_text("replied")
        await expect(page.get_by_test_id("reply")).to_contain_text("Not approved: the user denied")
        await snap(page, "7-approval-denied")
    assert not (servers.web / "web-page.txt").exists()
    assert errors == [], errors
