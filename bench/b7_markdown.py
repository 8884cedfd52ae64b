"""B7 · the page's markdown: time against the input's length, crafted and live.

The page's renderer (``errands/gateway/static/markdown.js``) runs in headless Chromium (Debian's
``/usr/bin/chromium`` through Playwright), loaded as the page loads it, from files served by the
browser's request routing; no Temporal server is involved. Each crafted text is a pattern that
makes a naive renderer backtrack or rescan (runs of ``*``, ``_``, ``[``, backticks, unclosed
emphasis before every word, ``[a](`` openers, nested quotes, list markers, bare ``http://``
with no address), repeated to 10,000 and to 100,000 characters; the figure is the time
``markdown(text)`` takes to build the nodes (measured inside the page: renders repeated for at
least 50 ms and averaged, the best of three such),
and the ratio 100k / 10k: about 10 when the work grows linearly, about 100 when it is
quadratic. The live row streams a 100,000-character reply (paragraphs, lists, code) in
200-character deltas into one box as the page does and reports the total time of all the
renders (the best of three streams).

The same texts run against the renderer of the baseline commit (before the renderer became
linear); a baseline case whose 10k run already took over 0.3 s is not run at 100k (it would
take minutes) and is shown as such.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

TITLE = "B7 · the page's markdown against the input's length"
FULL: dict[str, Any] = {"sizes": [10_000, 100_000], "repeats": 3, "baseline": True}
SMOKE: dict[str, Any] = {"sizes": [1_000, 10_000], "repeats": 1, "baseline": False}

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "errands" / "gateway" / "static"
CHROMIUM = Path("/usr/bin/chromium")
ORIGIN = "http://markdown.bench"
BASELINE = "ea61704"
"""The commit whose renderer re-rendered every delta and backtracked (issue 23, item 8)."""
SKIP_AFTER_S = 0.3

CASES: dict[str, tuple[str, str]] = {
    # name: (prefix, unit repeated to the size)
    "stars": ("a", "*"),
    "underscores": ("a ", "_"),
    "open brackets": ("", "["),
    "backticks": ("a", "`"),
    "unclosed emphasis": ("", "*a "),
    "unclosed strong": ("", "**a "),
    "unclosed underscores": ("", "__a "),
    "backtick runs": ("", "``a`"),
    "link openers": ("", "[a]("),
    "nested brackets": ("", "[[a]"),
    "quotes": ("", "> "),
    "list markers": ("", "- "),
    "list lines": ("", "- a\n"),
    "bare http": ("", "http://."),
    "heading spaces": ("# a", " "),
    "plain words": ("", "word "),
}

LIVE_UNIT = (
    "A paragraph with **bold**, _emphasis_, `code` and [a link](https://example.com/x).\n\n"
    "- one item\n- two items with *stars*\n\n"
    "```py\nprint('hello')\n```\n\n"
)

MEASURE = """async ([module, cases, size, repeats]) => {
    const { markdown } = await import(module);
    const out = {};
    for (const [name, [prefix, unit]] of Object.entries(cases)) {
        const text = (prefix + unit.repeat(Math.ceil(size / unit.length))).slice(0, size);
        let best = Infinity;
        let error = null;
        for (let k = 0; k < repeats && error === null; k += 1) {
            // Renders again until 50 ms have passed: the page's clock ticks in 0.1 ms.
            const began = performance.now();
            let runs = 0;
            try {
                do {
                    const box = document.createElement("div");
                    box.append(markdown(text));
                    runs += 1;
                } while (performance.now() - began < 50);
            } catch (e) {
                error = String(e).slice(0, 80);
            }
            best = Math.min(best, (performance.now() - began) / runs);
        }
        out[name] = error === null ? best : error;
    }
    return out;
}"""

LIVE = """async ([module, unit, size, step]) => {
    const md = await import(module);
    const text = unit.repeat(Math.ceil(size / unit.length)).slice(0, size);
    const box = document.createElement("div");
    const render = md.renderLive || md.renderMarkdown;
    const began = performance.now();
    for (let end = step; end < size + step; end += step) render(box, text.slice(0, end));
    return performance.now() - began;
}"""


def baseline_renderer() -> bytes:
    return subprocess.run(
        ["git", "show", f"{BASELINE}:errands/gateway/static/markdown.js"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout


async def measure(
    sizes: list[int], repeats: int, module: str, skip_slow: bool
) -> dict[str, dict[Any, Any]]:
    from playwright.async_api import Route, async_playwright

    baseline = baseline_renderer()

    async def serve(route: Route) -> None:
        path = route.request.url.removeprefix(ORIGIN)
        if path == "/":
            await route.fulfill(
                body="<!doctype html><title>bench</title>", content_type="text/html"
            )
        elif path == "/baseline/markdown.js":
            await route.fulfill(body=baseline, content_type="text/javascript")
        else:
            name = path.rsplit("/", 1)[-1]
            await route.fulfill(path=STATIC / name, content_type="text/javascript")

    rows: dict[str, dict[Any, Any]] = {name: {} for name in [*CASES, "live"]}
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page()
            page.set_default_timeout(0)
            await page.route(f"{ORIGIN}/**", serve)
            await page.goto(f"{ORIGIN}/")
            await page.evaluate(MEASURE, [module, CASES, min(sizes), 1])  # warm up the JIT
            await page.evaluate(LIVE, [module, LIVE_UNIT, min(sizes), 200])
            for size in sizes:
                cases = CASES
                if skip_slow and size > min(sizes):
                    cases = {
                        name: case
                        for name, case in CASES.items()
                        if _quick(rows[name].get(min(sizes)))
                    }
                    for name in CASES.keys() - cases.keys():
                        rows[name][size] = "not run"
                times = await page.evaluate(MEASURE, [module, cases, size, repeats])
                for name, value in times.items():
                    rows[name][size] = _ms(value)
                live = [
                    await page.evaluate(LIVE, [module, LIVE_UNIT, size, 200])
                    for _ in range(1 if skip_slow else repeats)
                ]
                rows["live"][size] = _ms(min(live))
        finally:
            await browser.close()
    return rows


def _quick(value: Any) -> bool:
    return isinstance(value, int | float) and value <= SKIP_AFTER_S * 1000


def _ms(value: Any) -> Any:
    return round(value, 2) if isinstance(value, int | float) else value


async def run(sizes: list[int], repeats: int, baseline: bool, stack: Any = None) -> dict[str, Any]:
    del stack  # no Temporal server: the renderer runs in the browser alone
    result: dict[str, Any] = {"sizes": sizes, "baseline_commit": BASELINE}
    result["current"] = await measure(sizes, repeats, "/static/markdown.js", skip_slow=False)
    if baseline:
        result["baseline"] = await measure(sizes, repeats, "/baseline/markdown.js", skip_slow=True)
    return result


def ratio(row: dict[Any, Any], sizes: list[int]) -> float | None:
    small, large = (row.get(s, row.get(str(s))) for s in (sizes[0], sizes[-1]))
    if not isinstance(small, int | float) or not isinstance(large, int | float) or small <= 0:
        return None
    return large / small


def worst(result: dict[str, Any]) -> tuple[str, float]:
    sizes = result["sizes"]
    ratios = {
        name: r
        for name, row in result["current"].items()
        if (r := ratio(row, sizes)) is not None and _cell(row, sizes[-1]) >= 5
    }
    name = max(ratios, key=lambda n: ratios[n]) if ratios else "-"
    return name, ratios.get(name, 0.0)


def _cell(row: dict[Any, Any], size: int) -> Any:
    value = row.get(size, row.get(str(size)))
    return value if isinstance(value, int | float) else 0


def verdict(result: dict[str, Any]) -> tuple[str, str, bool]:
    sizes = result["sizes"]
    slowest = max(result["current"].items(), key=lambda item: _cell(item[1], sizes[-1]))
    name, worst_ratio = worst(result)
    factor = sizes[-1] / sizes[0]
    figure = (
        f"slowest {sizes[-1]:,}-character text {_cell(slowest[1], sizes[-1]):.0f} ms "
        f"({slowest[0]}); worst growth {sizes[0]:,} → {sizes[-1]:,} ×{worst_ratio:.1f} ({name})"
    )
    return figure, f"growth ≤ ×{2 * factor:.0f} (linear: ×{factor:.0f})", worst_ratio <= 2 * factor


def markdown(result: dict[str, Any]) -> str:
    sizes = result["sizes"]
    small, large = sizes[0], sizes[-1]
    base = result.get("baseline", {})
    header = f"| text | {small:,} ms | {large:,} ms | ratio |"
    if base:
        header += f" baseline {small:,} ms | baseline {large:,} ms | baseline ratio |"
    lines = [header, _rule(header)]
    for name, row in result["current"].items():
        cells = [name, _fmt(row, small), _fmt(row, large), _ratio(row, sizes)]
        if base:
            old = base.get(name, {})
            cells += [_fmt(old, small), _fmt(old, large), _ratio(old, sizes)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Baseline: the renderer of commit `{result['baseline_commit']}`. The live row is the "
        "whole stream of deltas (baseline: every delta re-renders the reply from its start).",
    ]
    return "\n".join(lines)


def _rule(header: str) -> str:
    return "|" + "---|" * (header.count("|") - 1)


def _fmt(row: dict[Any, Any], size: int) -> str:
    value = row.get(size, row.get(str(size), "—"))
    return f"{value:,.2f}" if isinstance(value, int | float) else str(value)


def _ratio(row: dict[Any, Any], sizes: list[int]) -> str:
    r = ratio(row, sizes)
    return "—" if r is None else f"×{r:.1f}"


if __name__ == "__main__":  # pragma: no cover - a quick look without saving
    import json
    import sys

    sized = {"sizes": [int(s) for s in sys.argv[1:]]} if sys.argv[1:] else {}
    print(json.dumps(asyncio.run(run(**(SMOKE | sized | {"baseline": True})))))
