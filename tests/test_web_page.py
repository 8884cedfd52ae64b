"""The web page in headless Chromium against a real gateway, worker and dev server (issues 6, 17):
the page follows a task through its event log (GET /v1/tasks/{id}/events).

Uses Debian's ``chromium`` driven by Playwright (``playwright install`` downloads a browser of
its own, which this project does not rely on). Screenshots of each state are kept under
``test-artifacts/web-page/``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, Route, async_playwright, expect
from temporalio.client import Client

from errands.adapters.scripted import Call, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.client import Client as ErrandsClient
from errands.contracts import ids
from errands.gateway import create_app, serving
from errands.settings import Settings
from tests.helpers import Conversation, delegate, eventually, final, general
from tests.mcp_notes import Servers

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "web-page"
TIMEOUT_MS = 30_000
MODEL = "openai:gpt-web"
STREAMING = "chunk_delay" in {f.name for f in dataclasses.fields(Reply)}
"""Whether the scripted server can stream a reply (and so the page show it being written)."""

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
REPLY = (
    "**Lisbon** first, on PostgreSQL, with:\n\n"
    "- caching\n"
    "- a message queue\n\n"
    "It costs little; see [the plan](https://example.com/plan) and `notes.txt`. <b>not bold</b>"
)
STEER = "also say what it costs"
RECORD_WRITING = """() => {
    // Every text the reply box shows while it is being written, in order.
    window.written = [];
    const reply = document.getElementById("reply");
    new MutationObserver(() => {
        if (reply.dataset.state === "writing") window.written.push(reply.textContent);
    }).observe(reply, { childList: true, subtree: true, characterData: true });
}"""


def delegate_cities(*cities: str) -> Reply:
    return delegate(*[general(f"About {c}", 1) for c in cities], reply="Comparing the cities.")


def slow_branch(delay: float) -> Callable[[RecordedRequest], Reply]:
    def answer(request: RecordedRequest) -> Reply:
        prompt = next(m["content"] for m in request.body["messages"] if m["role"] == "user")
        return Reply(text=f"Notes on {prompt.splitlines()[0]}.", delay=delay)

    return answer


def user_texts(request: RecordedRequest) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "user"]


@asynccontextmanager
async def gateway(client: Client, settings: Settings, store: SessionStore) -> AsyncIterator[str]:
    app = create_app(ErrandsClient(client, settings, store=store), token=None)
    async with serving(app) as url:
        yield url


@pytest.fixture(scope="module")
async def page_url(
    client: Client, settings: Settings, store: SessionStore, worker: Any
) -> AsyncIterator[str]:
    async with gateway(client, settings, store) as url:
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


async def open_page(browser: Browser, url: str, errors: list[str]) -> Page:
    expect.set_options(timeout=TIMEOUT_MS)
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("pageerror", lambda error: errors.append(str(error)))
    await page.goto(url)
    return page


async def start_from_page(page: Page, session: str, text: str, model: str = MODEL) -> str:
    await page.get_by_test_id("session").fill(session)
    await page.get_by_test_id("task-text").fill(text)
    await page.get_by_text("Options").click()
    await page.get_by_test_id("model").fill(model)
    await page.get_by_test_id("start").click()
    await expect(page.get_by_test_id("task-id")).not_to_be_empty()
    return await page.get_by_test_id("task-id").inner_text()


async def snap(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


async def test_the_page_follows_a_task_live_from_its_branches_to_a_steered_markdown_reply(
    client: Client,
    store: SessionStore,
    browser: Browser,
    scripted: ScriptedModelServer,
    asking_worker: Settings,
    servers: Servers,
) -> None:
    streamed = {"chunk_chars": 12, "chunk_delay": 0.15} if STREAMING else {}
    convo = Conversation(
        [
            delegate_cities("Lisbon", "Porto", "Madrid"),
            Reply(calls=[Call("ask_user", {"questions": QUESTIONS})]),
            Reply(
                text="I will note this down.",
                calls=[Call("mcp__web__write", {"name": "web-plan", "text": "from the page"})],
            ),
            final("A plan without its cost.", delay=4),  # held while the page steers
            final(REPLY, **streamed),
            Reply(text="It compared three cities and asked you two questions."),
        ],
        slow_branch(2.0),
        branches=3,
    ).install(scripted, "gpt-web")
    errors: list[str] = []
    async with gateway(client, asking_worker, store) as url:
        page = await open_page(browser, url, errors)
        await page.evaluate(RECORD_WRITING)
        await snap(page, "0-empty")
        task = await start_from_page(
            page, f"web-{uuid.uuid4().hex[:6]}", "Plan a weekend service for three cities"
        )

        # The branches appear live: started (their model calls are slow), then finished.
        branches = page.get_by_test_id("branch")
        lisbon = page.locator('[data-branch="0-1"]')
        await expect(branches).to_have_count(3)
        await expect(lisbon).to_have_attribute("data-status", "started")
        await expect(lisbon.get_by_test_id("branch-title")).to_have_text("#1 general: About Lisbon")
        await expect(lisbon.get_by_test_id("branch-activity")).to_contain_text("openai:gpt-web")
        await expect(page.locator('[data-round="0"] .ack')).to_have_text("Comparing the cities.")
        await snap(page, "1-branches-started")
        for k in (1, 2, 3):
            card = page.locator(f'[data-branch="0-{k}"]')
            await expect(card).to_have_attribute("data-status", "completed")
        await expect(lisbon.get_by_test_id("branch-text")).to_have_text("Notes on About Lisbon.")

        # The question arrives as a picker: radios for one choice, checkboxes for several, Other.
        question = page.get_by_test_id("question")
        await expect(question).to_be_visible()
        await expect(page.get_by_test_id("task-status")).to_have_text("waiting for user")
        await snap(page, "2-question")
        database = question.locator('fieldset[data-qid="q1"]')
        extras = question.locator('fieldset[data-qid="q2"]')
        await expect(database.locator('input[type="radio"]')).to_have_count(3)
        await expect(extras.locator('input[type="checkbox"]')).to_have_count(3)
        # "Other" without words is refused, with the reason shown beside the picker.
        await database.get_by_label("Other").check()
        await page.get_by_test_id("answer-send").click()
        await expect(page.get_by_test_id("answer-error")).to_contain_text("Other")
        await expect(question).to_be_visible()
        await snap(page, "3-answer-refused")
        await database.get_by_label("PostgreSQL").check()
        await extras.get_by_label("Caching").check()
        await extras.get_by_label("Extras: your own answer").fill("a message queue")
        await page.get_by_test_id("answer-send").click()
        await expect(question).to_be_hidden()

        # The main agent's tool call waits for approval; approved, it runs and is shown done.
        approval = page.get_by_test_id("approval")
        await expect(approval).to_be_visible()
        await expect(page.get_by_test_id("approval-tool")).to_have_text("mcp__web__write")
        await expect(page.get_by_test_id("approval-why")).to_have_text("I will note this down.")
        await expect(page.get_by_test_id("approval-arguments")).to_contain_text("from the page")
        await snap(page, "4-approval")
        await page.get_by_test_id("approval-approve").click()
        await expect(approval).to_be_hidden()
        tool = page.locator('[data-round="1"] [data-testid="tool"][data-tool="mcp__web__write"]')
        await expect(tool).to_have_attribute("data-state", "done")

        # While the next model call is held, a steer from the box is taken, with its receipt.
        await eventually(lambda: len(convo.main_requests) >= 4, "the fourth round's model call")
        await page.get_by_test_id("message-text").fill(STEER)
        await expect(page.get_by_test_id("message-mode")).to_have_value("steer")
        await page.get_by_test_id("message-send").click()
        receipt = page.get_by_test_id("message-receipt")
        await expect(receipt).to_contain_text(f"Accepted as {ids.steer_message_id(task, 1)}")
        await snap(page, "5-steer-accepted")

        reply = page.get_by_test_id("reply")
        if STREAMING:
            # The reply shows while it is written, then the stored one replaces it.
            await expect(reply).to_have_attribute("data-state", "writing")
            await expect(reply).to_contain_text("Lisbon")
            await snap(page, "6-reply-being-written")
        await expect(reply).to_have_attribute("data-state", "final")
        if STREAMING:
            written = await page.evaluate("window.written")
            growing = [t for t in dict.fromkeys(written) if t.startswith("Lisbon")]
            assert len(growing) >= 3, written  # it grew piece by piece
            assert len(growing[0]) < len(growing[-1]) <= len("Lisbon" + REPLY)
        await expect(reply).not_to_contain_text("without its cost")  # the discarded reply
        await expect(page.get_by_test_id("task-status")).to_have_text("replied")
        await expect(reply.locator("strong")).to_have_text("Lisbon")
        await expect(reply.locator("li")).to_have_text(["caching", "a message queue"])
        await expect(reply.locator("a")).to_have_attribute("href", "https://example.com/plan")
        await expect(reply.locator("code")).to_have_text("notes.txt")
        await expect(reply).to_contain_text("<b>not bold</b>")  # shown, not run
        await expect(reply.locator("b")).to_have_count(0)
        await expect(receipt).to_contain_text("Delivered: the agent has read it.")
        await expect(page.get_by_test_id("conversation")).to_contain_text("a message queue")
        await expect(page.get_by_test_id("conversation")).to_contain_text(STEER)
        async with httpx.AsyncClient(base_url=url) as http:
            state = (await http.get(f"/v1/tasks/{task}")).json()
        await expect(page.get_by_test_id("task-cost")).to_contain_text(
            f"${state['cost_usd']:.4f} · "
        )
        await snap(page, "7-reply")

        await page.get_by_test_id("btw-question").fill("What did you do?")
        await page.get_by_test_id("btw-ask").click()
        await expect(page.get_by_test_id("btw-answer")).to_have_text(
            "It compared three cities and asked you two questions."
        )
        await snap(page, "8-side-question")

    answered = [m for m in convo.main_requests[2].body["messages"] if m["role"] == "tool"][-1]
    assert "Database: PostgreSQL" in answered["content"]
    assert "Caching" in answered["content"] and "a message queue" in answered["content"]
    assert not any(STEER in t for t in user_texts(convo.main_requests[3]))
    assert user_texts(convo.main_requests[4])[-1].endswith(STEER), "the next step saw the steer"
    assert (servers.web / "web-plan.txt").read_text() == "from the page"
    assert errors == [], errors


async def test_the_page_shows_an_approval_from_the_log_alone_and_denies_it_with_a_reason(
    client: Client,
    store: SessionStore,
    browser: Browser,
    scripted: ScriptedModelServer,
    asking_worker: Settings,
    servers: Servers,
) -> None:
    """Every read of the task's state is refused: the card comes from approval_requested and
    goes with approval_answered."""

    def main_agent(request: RecordedRequest) -> Reply:
        results = [m for m in request.body["messages"] if m["role"] == "tool"]
        if not results:
            return Reply(
                text="I will note this down.",
                calls=[Call("mcp__web__write", {"name": "web-page", "text": "from the page"})],
            )
        return final(results[-1]["content"][:60])

    scripted.script("gpt-tools", main_agent, main_agent)
    state_reads: list[str] = []

    async def refuse_state_reads(route: Route) -> None:
        state_reads.append(route.request.url)
        await route.fulfill(status=503, json={"detail": "the page must not read the state"})

    errors: list[str] = []
    async with gateway(client, asking_worker, store) as url:
        page = await open_page(browser, url, errors)
        await page.route("**/v1/tasks/*", refuse_state_reads)  # GET /v1/tasks/{id} only
        session = f"web-approval-{uuid.uuid4().hex[:6]}"
        task = await start_from_page(page, session, "Note this down", "openai:gpt-tools")

        card = page.get_by_test_id("approval")
        await expect(card).to_be_visible()
        await expect(page.get_by_test_id("task-status")).to_have_text("waiting for user")
        await expect(page.get_by_test_id("approval-tool")).to_have_text("mcp__web__write")
        await expect(page.get_by_test_id("approval-why")).to_have_text("I will note this down.")
        await expect(page.get_by_test_id("approval-arguments")).to_contain_text("from the page")
        await expect(page.get_by_test_id("approval-always")).to_be_visible()
        assert state_reads == [], "the card came from the event log alone"
        await snap(page, "9-approval")
        await page.get_by_test_id("approval-reason").fill("not from the web page")
        await page.get_by_test_id("approval-deny").click()

        await expect(card).to_be_hidden()
        await expect(page.get_by_test_id("task-status")).to_have_text("replied")
        await expect(page.get_by_test_id("reply")).to_contain_text("Not approved: the user denied")
        tool = page.locator('[data-testid="tool"][data-tool="mcp__web__write"]')
        await expect(tool).to_have_attribute("data-state", "denied")
        await snap(page, "10-approval-denied")
        log = page.locator('[data-testid="event"][data-type^="approval_"]')
        await expect(log).to_have_count(2)
    events = await asyncio.to_thread(store.list_events, task)
    requested = next(e for e in events if e.type == "approval_requested")
    answered = next(e for e in events if e.type == "approval_answered")
    assert (answered.data["approval_id"], answered.data["decision"]) == (
        requested.data["approval_id"],
        "deny",
    )
    assert answered.data["reason"] == "not from the web page"
    # Only the end's one read of the state (its cost) was left: nothing polled it meanwhile.
    assert len(state_reads) <= 1, state_reads
    assert not (servers.web / "web-page.txt").exists()
    assert errors == [], errors


async def test_the_session_list_shows_a_task_and_opening_it_shows_its_conversation(
    page_url: str, browser: Browser, scripted: ScriptedModelServer, store: SessionStore
) -> None:
    scripted.script("gpt-web", final("Two **short** lines."), final("One more, done."))
    session = f"web-list-{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(base_url=page_url) as http:
        created = await http.post(
            f"/v1/sessions/{session}/tasks", json={"text": "Say two lines", "model": MODEL}
        )
        task = created.json()["task_id"]

        async def listed_as_completed() -> bool:
            listed = (await http.get("/v1/tasks?limit=50")).json()["tasks"]
            return any(t["task_id"] == task and t["status"] == "completed" for t in listed)

        # The list lags a task's end by a moment.
        await eventually(listed_as_completed, f"task {task} listed as completed")
        info = (await http.get("/v1/info")).json()

    errors: list[str] = []
    page = await open_page(browser, page_url, errors)
    item = page.locator(f'[data-testid="session-item"][data-session="{session}"]')
    await expect(item).to_contain_text("Say two lines")
    await expect(item).to_contain_text("1 task · completed")
    await snap(page, "11-session-list")
    await item.get_by_role("button").click()

    conversation = page.get_by_test_id("conversation")
    await expect(page.get_by_test_id("session-name")).to_have_text(session)
    await expect(conversation.locator('[data-kind="user"] .md')).to_have_text("Say two lines")
    await expect(conversation.locator('[data-kind="reply"] strong')).to_have_text("short")
    listed = page.locator(f'[data-testid="session-task"][data-task-id="{task}"]')
    await expect(listed).to_have_attribute("data-status", "completed")
    await snap(page, "12-session-open")

    # Opening the task replays its log: the page ends as the task did.
    await listed.get_by_role("button").click()
    await expect(page.get_by_test_id("task-status")).to_have_text("replied")
    await expect(page.get_by_test_id("reply").locator("strong")).to_have_text("short")
    events = await asyncio.to_thread(store.list_events, task)
    await expect(page.get_by_test_id("event")).to_have_count(len(events))
    link = page.get_by_test_id("temporal-link")
    assert info["temporal_ui"], "the dev server's UI is linked"
    await expect(link).to_have_attribute(
        "href", f"{info['temporal_ui']}/namespaces/{info['namespace']}/workflows/{task}"
    )
    # A message to the finished task is refused, saying how to go on.
    await page.get_by_test_id("message-text").fill("one more thing")
    await page.get_by_test_id("message-send").click()
    await expect(page.get_by_test_id("message-error")).to_contain_text(
        f"errands run --session {session} TEXT"
    )
    await expect(page.get_by_test_id("message-receipt")).to_be_hidden()
    await snap(page, "13-session-task")

    # Queued instead, the same message starts the session's next task at once, named by id.
    await page.get_by_test_id("message-mode").select_option("queue")
    await page.get_by_test_id("message-send").click()
    started = ids.queued_after_end_task_id(task)
    receipt = page.get_by_test_id("message-receipt")
    await expect(receipt).to_have_text(f"Started the session's next task: {started}.")
    await expect(receipt).to_have_attribute("data-status", "started")
    await expect(page.get_by_test_id("message-error")).to_be_empty()
    await snap(page, "13b-queued-message-started-a-task")
    async with httpx.AsyncClient(base_url=page_url) as http:

        async def replied() -> bool:
            return (await http.get(f"/v1/tasks/{started}")).json().get("status") == "replied"

        await eventually(replied, f"task {started} to reply")
    assert errors == [], errors


async def first_part_of_the_log(url: str, task: str, upto: str) -> tuple[str, int]:
    """The task's event stream read until its first ``upto`` event and one more, cut as a
    dropped connection cuts it: those events, three of them again, then half an event. Also
    the seq of the last whole event."""
    frames: list[str] = []
    async with (
        httpx.AsyncClient(base_url=url, timeout=30) as http,
        http.stream("GET", f"/v1/tasks/{task}/events") as response,
    ):
        buffer = ""
        async for chunk in response.aiter_text():
            buffer += chunk
            *whole, buffer = buffer.split("\n\n")
            frames += [f for f in whole if "\ndata: " in f]
            types = [f.split("\n")[1].removeprefix("event: ") for f in frames]
            if upto in types and len(frames) > types.index(upto) + 1:
                break
    kept, cut = frames[:-1], frames[-1]
    last = json.loads(kept[-1].split("\ndata: ", 1)[1])["seq"]
    body = "retry: 2000\n\n" + "".join(f + "\n\n" for f in kept + kept[:3]) + cut[: len(cut) // 2]
    return body, last


async def test_a_dropped_event_stream_resumes_after_its_last_event_with_none_lost_or_repeated(
    page_url: str, browser: Browser, scripted: ScriptedModelServer, store: SessionStore
) -> None:
    Conversation(
        [delegate_cities("Lisbon", "Porto", "Madrid"), final("The **three** cities, compared.")],
        slow_branch(1.0),
        branches=3,
    ).install(scripted, "gpt-web")
    asked: list[dict[str, str]] = []
    cut_after: list[int] = []

    async def drop_the_first_stream(route: Route) -> None:
        asked.append(route.request.headers)
        if len(asked) > 1:
            await route.continue_()
            return
        task = route.request.url.split("/v1/tasks/", 1)[1].split("/", 1)[0]
        body, last = await first_part_of_the_log(page_url, task, "branch_started")
        cut_after.append(last)
        await route.fulfill(status=200, headers={"Content-Type": "text/event-stream"}, body=body)

    errors: list[str] = []
    page = await open_page(browser, page_url, errors)
    await page.route("**/v1/tasks/*/events*", drop_the_first_stream)
    task = await start_from_page(page, f"web-drop-{uuid.uuid4().hex[:6]}", "Compare three cities")

    await expect(page.get_by_test_id("task-status")).to_have_text("replied")
    await expect(page.get_by_test_id("reply").locator("strong")).to_have_text("three")
    assert len(asked) == 2 and "last-event-id" not in asked[0]
    assert asked[1]["last-event-id"] == str(cut_after[0]), "resumed after the last whole event"
    events = await asyncio.to_thread(store.list_events, task)
    shown = page.get_by_test_id("event")
    await expect(shown).to_have_count(len(events))
    seqs = [int(s) for s in await shown.evaluate_all("(rows) => rows.map((r) => r.dataset.seq)")]
    assert seqs == [e.seq for e in events] == list(range(1, len(events) + 1))
    await expect(page.get_by_test_id("round")).to_have_count(2)
    await expect(page.get_by_test_id("branch")).to_have_count(3)
    for k in (1, 2, 3):
        card = page.locator(f'[data-branch="0-{k}"]')
        await expect(card).to_have_attribute("data-status", "completed")
    await snap(page, "14-stream-resumed")
    assert errors == [], errors


MARKDOWN = """# Plan

Go **now**, _then_ `rest`.
Next line.

- one
- two
  1. nested

> quoted *words*

<img src=x onerror="window.ran=1"> [ok](https://example.com/a?b=1) [bad](javascript:alert(1))
and https://example.com/bare.

```py
print("<b>")
```"""
RENDERED = (
    "<h4>Plan</h4>"
    "<p>Go <strong>now</strong>, <em>then</em> <code>rest</code>.\nNext line.</p>"
    "<ul><li>one</li><li>two<ol><li>nested</li></ol></li></ul>"
    "<blockquote><p>quoted <em>words</em></p></blockquote>"
    '<p>&lt;img src=x onerror="window.ran=1"&gt; '
    '<a href="https://example.com/a?b=1" target="_blank" rel="noopener noreferrer nofollow">ok</a>'
    " [bad](javascript:alert(1))\nand "
    '<a href="https://example.com/bare" target="_blank" rel="noopener noreferrer nofollow">'
    "https://example.com/bare</a>.</p>"
    '<pre><code data-lang="py">print("&lt;b&gt;")</code></pre>'
)


async def test_markdown_is_rendered_with_html_shown_as_text_and_only_http_links(
    page_url: str, browser: Browser
) -> None:
    errors: list[str] = []
    page = await open_page(browser, page_url, errors)
    html = await page.evaluate(
        """async (text) => {
            const { markdown } = await import("/static/markdown.js");
            const box = document.createElement("div");
            box.append(markdown(text));
            document.body.append(box);
            return box.innerHTML;
        }""",
        MARKDOWN,
    )
    assert html == RENDERED
    assert await page.evaluate("window.ran") is None
    assert errors == [], errors
