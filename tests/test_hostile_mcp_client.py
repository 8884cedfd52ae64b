"""The MCP client against a server that answers 50 MB (issue 23, item 5): what it keeps is bounded
by the cap it is given, over stdio and over Streamable HTTP, and a smaller answer arrives whole.

Over stdio the client reads through its own transport (errands.adapters.mcp._stdio): the SDK's
reader was quadratic in the length of one answer (50 MB took 83 s and 650 MB here); this one keeps
the head of an answer past about twice the cap and tells the model the rest was dropped. Over
HTTP the SDK stops at the event limit the client sets, and the client keeps the head it read, as
over stdio; the call is not retried either way (the tool ran).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from errands.adapters.devserver import free_port, port_open
from errands.adapters.mcp.client import call_tool
from errands.adapters.mcp.config import McpServerConfig
from tests.mcp_hostile_server import dump_text
from tests.mcp_notes import start_listening, stop

ROOT = Path(__file__).resolve().parent.parent
CAP = 4 * 1024 * 1024
HUGE = 50_000_000


def command(calls: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tests.mcp_hostile_server", "--dir", str(calls), *extra]


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    calls = tmp_path_factory.mktemp("hostile-http")
    port = free_port()
    process: subprocess.Popen[bytes] = start_listening(
        command(calls, "--http", str(port)), port, calls / "server.log"
    )
    try:
        assert port_open("127.0.0.1", port)
        yield f"http://127.0.0.1:{port}/mcp", calls
    finally:
        stop(process)


def calls_of(calls: Path) -> list[int]:
    path = calls / "calls.jsonl"
    return [json.loads(line)["size"] for line in path.read_text().splitlines()]


async def dump(config: McpServerConfig, size: int) -> tuple[str, bool]:
    outcome = await call_tool(
        config, "dump", {"size": size}, idempotency_key="k", timeout=110, max_bytes=CAP
    )
    return outcome.text, outcome.is_error


async def test_over_stdio_a_50_mb_answer_is_kept_to_the_cap_and_the_cut_is_said(
    tmp_path: Path,
) -> None:
    config = McpServerConfig(command=command(tmp_path), cwd=str(ROOT))
    text, is_error = await dump(config, HUGE)

    assert not is_error
    assert len(text.encode()) <= CAP
    assert text.startswith(dump_text(200_000)[:100_000])  # its head, as the server sent it
    assert text.endswith("ask the tool for a narrower or paged answer.]")
    assert "the rest was dropped" in text
    assert calls_of(tmp_path) == [HUGE]


async def test_over_stdio_an_answer_under_the_cap_arrives_whole(tmp_path: Path) -> None:
    config = McpServerConfig(command=command(tmp_path), cwd=str(ROOT))
    text, is_error = await dump(config, 1_000_000)

    assert not is_error
    assert text == dump_text(1_000_000)


async def test_over_http_a_50_mb_answer_is_kept_to_the_cap_and_the_cut_is_said(
    http_server: tuple[str, Path],
) -> None:
    url, calls = http_server
    text, is_error = await dump(McpServerConfig(url=url), HUGE)

    assert not is_error
    assert len(text.encode()) <= CAP
    assert text.startswith(dump_text(200_000)[:100_000])  # its head, as the server sent it
    assert text.endswith("ask the tool for a narrower or paged answer.]")
    assert "the tool's answer was more than " in text  # the SDK stopped reading it
    assert "the rest was dropped" in text
    assert calls_of(calls).count(HUGE) == 1, "not retried"


async def test_over_http_an_answer_over_the_sdks_default_event_size_arrives_whole(
    http_server: tuple[str, Path],
) -> None:
    # The SDK's own limit is 1 MiB an event; the client raises it to about twice the cap.
    url, _ = http_server
    text, is_error = await dump(McpServerConfig(url=url), 2_000_000)

    assert not is_error
    assert text == dump_text(2_000_000)
