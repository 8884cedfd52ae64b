"""Debian's Chromium driven by Playwright, as the browser tests run it (``playwright install``
downloads a browser of its own, which this project does not rely on)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists() and not os.environ.get("CI"),
    reason=f"no Chromium at {CHROMIUM} (install Debian's `chromium` package); CI always runs this",
)
"""Skips a browser test on a machine without Chromium; in CI it runs (and fails without it)."""


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """A headless Chromium, closed on the way out."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield browser
        finally:
            await browser.close()
