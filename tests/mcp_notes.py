"""The notes MCP server (tests/mcp_notes_server.py) as the tests run it: over stdio, or as a
process of its own on Streamable HTTP; and fixtures (a pytest plugin of tests/conftest.py) with
workers whose agents call it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from errands.adapters.devserver import free_port, port_open
from errands.adapters.mcp.config import McpServerConfig
from errands.adapters.routing import ModelRouter
from errands.adapters.store import SessionStore
from errands.settings import Settings
from errands.workers import build_worker

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "notes-token-" + "k" * 24
BIG = "".join(
    f"line {n:04d} of the big note, kept in the store and never in history\n" for n in range(60)
)


@dataclass
class Notes:
    """A notes server to test against: how to reach it and the directory it keeps notes in."""

    config: McpServerConfig
    dir: Path

    def writes(self, name: str) -> list[dict[str, object]]:
        """The records of writes.jsonl for the note ``name``."""
        path = self.dir / "writes.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [record for line in lines if (record := json.loads(line))["name"] == name]


def notes_command(notes_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tests.mcp_notes_server", "--dir", str(notes_dir), *extra]


def start_listening(command: list[str], port: int, log: Path) -> subprocess.Popen[bytes]:
    """Start ``command`` and wait until it accepts connections on ``port``."""
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not port_open("127.0.0.1", port):
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            pytest.fail(f"{command} did not listen on {port}:\n{log.read_text()}")
        time.sleep(0.1)
    return process


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class Servers:
    files: Path
    """The stdio server's notes (a process per session)."""
    web: Path
    """The HTTP server's notes."""
    config: dict[str, Any]
    """ERRANDS_MCP_SERVERS for both."""


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    files = tmp_path_factory.mktemp("files-notes")
    web = tmp_path_factory.mktemp("web-notes")
    (files / "big.txt").write_text(BIG)
    port = free_port()
    process = start_listening(
        notes_command(web, "--http", str(port), "--token", TOKEN), port, web.parent / "web.log"
    )
    config = {
        "files": {"command": notes_command(files), "cwd": str(ROOT)},
        "web": {
            "url": f"http://127.0.0.1:{port}/mcp",
            "headers": {"Authorization": f"Bearer {TOKEN}"},
        },
    }
    try:
        yield Servers(files, web, config)
    finally:
        stop(process)


@pytest.fixture
async def tools_worker(
    client: Client, settings: Settings, store: SessionStore, servers: Servers
) -> AsyncIterator[Settings]:
    """A worker of its own whose agents may call both notes servers (and one that is down)."""
    down = {"url": f"http://127.0.0.1:{free_port()}/mcp", "timeout_seconds": 5}
    own = settings.model_copy(
        update={
            "task_queue": f"tools-{uuid.uuid4().hex[:6]}",
            "mcp_servers": json.dumps({**servers.config, "down": down}),
        }
    )
    router = ModelRouter(own)
    async with build_worker(client, own, store=store, router=router):
        yield own
    await router.aclose()


@pytest.fixture
async def asking_worker(
    client: Client, settings: Settings, store: SessionStore, servers: Servers
) -> AsyncIterator[Settings]:
    """The web server's `write` asks before it runs; `search` asks before every call."""
    web = {**servers.config["web"], "approval": {"write": "ask", "search": "always"}}
    own = settings.model_copy(
        update={
            "task_queue": f"tools-ask-{uuid.uuid4().hex[:6]}",
            "mcp_servers": json.dumps({"web": web}),
        }
    )
    router = ModelRouter(own)
    async with build_worker(client, own, store=store, router=router):
        yield own
    await router.aclose()
