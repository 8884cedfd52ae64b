"""The page's markdown renderer in headless Chromium (issue 23, item 8): crafted texts of 100,000
characters render in full (every character accounted for, no error), the marks it rendered
before render the same, and live text is rendered block by block: finished blocks keep their
nodes while later deltas arrive, and the result equals a whole render at every step.

The renderer's modules are loaded as the page loads them, from the files of
``errands/gateway/static`` served by the browser's request routing; the last test drives a real
task on the dev server and watches the page's reply box while the reply streams. How the time
grows with the text's length is measured by ``python -m bench B7`` (docs/benchmarks.md), not here.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, Route, async_playwright, expect
from temporalio.client import Client

from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.client import Client as ErrandsClient
from errands.gateway import create_app, serving
from errands.settings import Settings
from tests.helpers import final

CHROMIUM = Path("/usr/bin/chromium")
STATIC = Path(__file__).resolve().parent.parent / "errands" / "gateway" / "static"
ORIGIN = "http://page.test"
SIZE = 100_000
MAX_DEPTH = 8  # errands/gateway/static/inline.js

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists() and not os.environ.get("CI"),
    reason=f"no Chromium at {CHROMIUM} (install Debian's `chromium` package); CI always runs this",
)


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    """A blank page on an origin whose /static/ files are the gateway's, served by routing."""

    async def serve(route: Route) -> None:
        path = route.request.url.removeprefix(ORIGIN)
        if path == "/":
            await route.fulfill(body="<!doctype html><title>md</title>", content_type="text/html")
            return
        file = STATIC / path.removeprefix("/static/")
        await route.fulfill(path=file, content_type="text/javascript")

    opened = await browser.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    await opened.route(f"{ORIGIN}/**", serve)
    await opened.goto(f"{ORIGIN}/")
    yield opened
    await opened.close()
    assert errors == [], errors


RENDER = """async (text) => {
    const { markdown } = await import("/static/markdown.js");
    const box = document.createElement("div");
    box.append(markdown(text));
    return box.innerHTML;
}"""

A = 'target="_blank" rel="noopener noreferrer nofollow"'
CASES = [
    ("# Plan ##", "<h4>Plan</h4>"),
    ("### Learning C#", "<h6>Learning C#</h6>"),
    (
        "Go **now**, _then_ `rest`.\nNext line.",
        ("<p>Go <strong>now</strong>, <em>then</em> <code>rest</code>.\nNext line.</p>"),
    ),
    (
        "__bold__ and *it* and snake_case_name",
        ("<p><strong>bold</strong> and <em>it</em> and snake_case_name</p>"),
    ),
    ("``a ` b`` then `x`", "<p><code>a ` b</code> then <code>x</code></p>"),
    (
        "**[*_`a`_*](https://e.com)**",
        (
            f'<p><strong><a href="https://e.com/" {A}><em><em><code>a</code></em></em></a>'
            "</strong></p>"
        ),
    ),
    (
        "[bad](javascript:alert(1)) <b>x</b> see https://example.com/a.",
        (
            "<p>[bad](javascript:alert(1)) &lt;b&gt;x&lt;/b&gt; see "
            f'<a href="https://example.com/a" {A}>https://example.com/a</a>.</p>'
        ),
    ),
    (
        "- one\n- two\n  1. nested\n\n> quoted *words*\n> > deeper",
        (
            "<ul><li>one</li><li>two<ol><li>nested</li></ol></li></ul>"
            "<blockquote><p>quoted <em>words</em></p><blockquote><p>deeper</p></blockquote>"
            "</blockquote>"
        ),
    ),
    (
        "text\n---\n\n```py\nprint('<b>')\n```",
        ("<p>text</p><hr><pre><code data-lang=\"py\">print('&lt;b&gt;')</code></pre>"),
    ),
]


@pytest.mark.parametrize(("text", "html"), CASES, ids=[c[0][:24] for c in CASES])
async def test_markdown_renders_blocks_and_inline_marks(page: Page, text: str, html: str) -> None:
    assert await page.evaluate(RENDER, text) == html


CRAFTED = """async ([prefix, unit, size]) => {
    const { markdown } = await import("/static/markdown.js");
    const text = (prefix + unit.repeat(Math.ceil(size / unit.length))).slice(0, size);
    const box = document.createElement("div");
    box.append(markdown(text));
    const count = (tag) => box.getElementsByTagName(tag).length;
    let deepest = 0;
    for (const q of box.getElementsByTagName("blockquote")) {
        let d = 0;
        for (let n = q; n && n !== box; n = n.parentNode) if (n.tagName === "BLOCKQUOTE") d += 1;
        deepest = Math.max(deepest, d);
    }
    return {
        text, shown: box.textContent, elements: box.getElementsByTagName("*").length,
        top: [...box.children].map((c) => c.tagName), strong: count("strong"), em: count("em"),
        code: count("code"), a: count("a"), li: count("li"), deepest,
        script: count("script") + count("img"), first: box.firstElementChild.innerHTML.slice(0, 40),
    };
}"""


def shown_as_written(r: dict[str, Any]) -> None:
    """No mark at all: the paragraph shows the text itself."""
    assert r["top"] == ["P"] and r["elements"] == 1
    assert r["shown"] == r["text"].strip()


def crafted_cases() -> dict[str, tuple[str, str, Any]]:
    def strong_stars(r: dict[str, Any]) -> None:
        # "a" then runs of "*": each "**" "*" "**" is a bold star.
        assert r["strong"] == (SIZE - 1) // 5 and r["shown"] == "a" + "*" * r["strong"] + "*" * (
            (SIZE - 1) % 5
        )

    def nested_underscores(r: dict[str, Any]) -> None:
        # "__" … "__" nests in itself: MAX_DEPTH + 1 levels, then the rest as written.
        assert r["strong"] == MAX_DEPTH + 1
        assert r["shown"] == "a " + "_" * (SIZE - 2 - 4 * r["strong"])

    def quotes(r: dict[str, Any]) -> None:
        assert r["deepest"] == MAX_DEPTH + 1
        assert r["shown"] == r["text"][2 * (MAX_DEPTH + 1) :]

    def list_lines(r: dict[str, Any]) -> None:
        assert r["top"] == ["UL"] and r["li"] == SIZE // 4 and r["shown"] == "a" * (SIZE // 4)

    def list_marker(r: dict[str, Any]) -> None:
        assert r["top"] == ["OL"] and r["li"] == 1 and r["shown"] == r["text"][3:]

    def heading(r: dict[str, Any]) -> None:
        assert r["top"] == ["H4"] and r["shown"] == "a"

    def one_address(r: dict[str, Any]) -> None:
        assert r["a"] <= 1 and r["shown"] == r["text"]

    def code_spans(r: dict[str, Any]) -> None:
        # "`a`" is a code span, then "a", and so on: 4 characters for each code span.
        assert r["code"] == SIZE // 4 and r["shown"] == "a" * (2 * r["code"])

    return {
        "stars": ("a", "*", strong_stars),
        "underscores": ("a ", "_", nested_underscores),
        "open brackets": ("", "[", shown_as_written),
        "backticks": ("a", "`", shown_as_written),
        "unclosed emphasis": ("", "*a ", shown_as_written),
        "unclosed strong": ("", "**a ", shown_as_written),
        "unclosed underscores": ("", "__a ", shown_as_written),
        "emphasis never closed": ("*", "a", shown_as_written),
        "link openers": ("", "[a](", shown_as_written),
        "nested brackets": ("", "[[a]", shown_as_written),
        "bare http": ("", "http://.", one_address),
        "quotes": ("", "> ", quotes),
        "list lines": ("", "- a\n", list_lines),
        "list markers": ("", "1. ", list_marker),
        "heading spaces": ("# a", " ", heading),
        "code spans": ("", "`a`a", code_spans),
    }


@pytest.mark.parametrize("case", list(crafted_cases()))
async def test_a_crafted_text_of_100k_characters_renders_every_character(
    page: Page, case: str
) -> None:
    prefix, unit, check = crafted_cases()[case]
    rendered = await page.evaluate(CRAFTED, [prefix, unit, SIZE])
    assert rendered["script"] == 0
    check(rendered)


LIVE = """async ([text, step]) => {
    const md = await import("/static/markdown.js");
    const box = document.createElement("div");
    const whole = document.createElement("div");
    const differ = [];
    for (let end = 1; end <= text.length + step - 1; end += step) {
        const part = text.slice(0, Math.min(end, text.length));
        md.renderLive(box, part);
        whole.replaceChildren(md.markdown(part));
        if (box.innerHTML !== whole.innerHTML) differ.push([part, box.innerHTML, whole.innerHTML]);
    }
    return differ.slice(0, 3);
}"""

TRICKY = (
    "# Title\r\n\r\nFirst *para*\ncontinued.\n\nstill\n---x\n\n- item\n\n- item two\n"
    "  - nested\nafter\n\n> quote\n> more\n\n```js\ncode ``` here\n```\n\n"
    "1. one\n2) two\n\n***\n\nLast [link](https://e.com/x) and `co`de`."
)


@pytest.mark.parametrize("step", [1, 3, 7])
async def test_live_text_equals_a_whole_render_after_every_delta(page: Page, step: int) -> None:
    assert await page.evaluate(LIVE, [TRICKY, step]) == []


KEPT = """async () => {
    const md = await import("/static/markdown.js");
    const box = document.createElement("div");
    const text = "First paragraph.\\n\\nSecond **one**.\\n\\n- a list\\n- that grows " +
        "and grows ".repeat(40);
    let marked = null;
    const kept = [];
    for (let end = 1; end <= text.length; end += 5) {
        md.renderLive(box, text.slice(0, end));
        if (marked) kept.push(box.firstChild === marked && box.children[1].kept === true);
        else if (text.slice(0, end).includes("\\n- that")) { // the second paragraph is done
            marked = box.firstChild;
            box.children[1].kept = true;
        }
    }
    md.renderLive(box, text);
    return { kept, html: box.innerHTML, whole: (() => {
        const w = document.createElement("div"); w.append(md.markdown(text)); return w.innerHTML;
    })() };
}"""


async def test_live_text_keeps_the_nodes_of_finished_blocks(page: Page) -> None:
    result = await page.evaluate(KEPT)
    assert len(result["kept"]) > 50 and all(result["kept"]), result["kept"]
    assert result["html"] == result["whole"]


RESTARTS = """async () => {
    const md = await import("/static/markdown.js");
    const box = document.createElement("div");
    md.renderLive(box, "one\\n\\ntwo\\n\\nthree and");
    box.replaceChildren(); // the page clears the box for another task
    md.renderLive(box, "one\\n\\ntwo\\n\\nthree and more");
    const cleared = box.innerHTML;
    md.renderLive(box, "another attempt"); // a retried call starts its text over
    return [cleared, box.innerHTML];
}"""


async def test_live_text_starts_over_for_a_cleared_box_or_a_new_attempt(page: Page) -> None:
    assert await page.evaluate(RESTARTS) == [
        "<p>one</p><p>two</p><p>three and more</p>",
        "<p>another attempt</p>",
    ]


WATCH_REPLY = """() => {
    // While the reply is written: once its third paragraph shows, the first two paragraphs'
    // nodes are marked; every later change records whether they are still the same nodes.
    window.kept = [];
    const reply = document.getElementById("reply");
    let first = null;
    new MutationObserver(() => {
        if (reply.dataset.state !== "writing") return;
        if (first) {
            window.kept.push(reply.firstElementChild === first && first.kept === true);
        } else if (reply.children.length >= 3) {
            first = reply.firstElementChild;
            first.kept = true;
        }
    }).observe(reply, { childList: true, subtree: true, characterData: true });
}"""


async def test_the_page_keeps_finished_paragraphs_of_a_reply_while_it_streams(
    client: Client,
    settings: Settings,
    store: SessionStore,
    worker: Any,
    scripted: ScriptedModelServer,
    browser: Browser,
) -> None:
    reply = "First paragraph.\n\nSecond paragraph.\n\nThird one grows" + " word by word" * 20
    scripted.script("gpt-live-md", final(reply, chunk_chars=10, chunk_delay=0.05))
    app = create_app(ErrandsClient(client, settings, store=store), token=None)
    async with serving(app) as url:
        page = await browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        await page.goto(url)
        await page.evaluate(WATCH_REPLY)
        await page.get_by_test_id("session").fill(f"live-md-{uuid.uuid4().hex[:6]}")
        await page.get_by_test_id("task-text").fill("Write three paragraphs")
        await page.get_by_text("Options").click()
        await page.get_by_test_id("model").fill("openai:gpt-live-md")
        await page.get_by_test_id("start").click()
        box = page.get_by_test_id("reply")
        await expect(box).to_have_attribute("data-state", "final", timeout=60_000)
        await expect(box.locator("p")).to_have_count(3)
        kept = await page.evaluate("window.kept")
        await page.close()
    # The third paragraph arrived in many deltas after the first two were finished, and each
    # left the first paragraph's node in place.
    assert len(kept) >= 5 and all(kept), kept
    assert errors == [], errors
