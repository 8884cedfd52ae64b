"""Shared test stack: a real Temporal dev server, the scripted model server behind the real SDK
clients, a SQLite session store and an in-process worker. Each test gets a clean script."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from errands.adapters.devserver import DevServer, free_port
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore, open_store
from errands.client import connect
from errands.settings import Settings
from errands.workers import build_worker

pytest_plugins = ["tests.mcp_notes"]  # the MCP notes servers and workers that call them

ROOT = Path(__file__).resolve().parent.parent
OPENAI_KEY = "sk-test-openai-" + "k3y" * 6
ANTHROPIC_KEY = "sk-ant-test-" + "s3cr3t" * 4


SERVER_FIXTURES = frozenset(
    {"dev_server", "client", "worker", "model_server", "store", "database_url", "cli_env"}
)
"""What a ``fast`` test may not use: each one starts (or needs) a server or the database."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked ``fast`` runs under ``make test-fast`` with no server: refuse one that
    asks for a server fixture, so the lane stays fast and the fixtures stay lazy."""
    wrong = [
        f"{item.nodeid} uses {', '.join(sorted(SERVER_FIXTURES & set(names)))}"
        for item in items
        if item.get_closest_marker("fast")
        and SERVER_FIXTURES & set(names := getattr(item, "fixturenames", ()))
    ]
    if wrong:
        raise pytest.UsageError("tests marked fast that need a server:\n" + "\n".join(wrong))


@pytest.fixture(scope="session")
def tmp_session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("errands")


@pytest.fixture(scope="session")
def dev_server(tmp_session_dir: Path) -> Iterator[DevServer]:
    server = DevServer(
        port=free_port(),
        ui_port=None,
        db_file=str(tmp_session_dir / "temporal.db"),
        log_file=str(tmp_session_dir / "temporal.log"),
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def model_server() -> Iterator[ScriptedModelServer]:
    server = ScriptedModelServer().start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def scripted(request: pytest.FixtureRequest) -> Iterator[ScriptedModelServer | None]:
    """Every test starts with an empty script and ends having played all of it, nothing more."""
    if "model_server" not in request.fixturenames:
        yield None
        return
    server: ScriptedModelServer = request.getfixturevalue("model_server")
    server.reset()
    yield server
    server.assert_done()


@pytest.fixture(scope="session")
def database_url(tmp_session_dir: Path) -> str:
    return f"sqlite:///{tmp_session_dir / 'sessions.db'}"


@pytest.fixture(scope="session")
def settings(model_server: ScriptedModelServer, database_url: str) -> Settings:
    return Settings(
        TEMPORAL_ADDRESS=None,
        ERRANDS_TASK_QUEUE=f"errands-test-{uuid.uuid4().hex[:8]}",
        ERRANDS_DATABASE_URL=database_url,
        OPENAI_API_KEY=OPENAI_KEY,
        OPENAI_BASE_URL=model_server.openai_base_url,
        ANTHROPIC_API_KEY=ANTHROPIC_KEY,
        ANTHROPIC_BASE_URL=model_server.anthropic_base_url,
        ERRANDS_SUBTASK_TYPES="tests.plugins:TYPES",
    )


@pytest.fixture(scope="session")
def store(database_url: str) -> Iterator[SessionStore]:
    s = open_store(database_url)
    yield s
    s.close()


@pytest.fixture(scope="session")
async def client(dev_server: DevServer) -> Client:
    return await connect(dev_server.address)


@pytest.fixture(scope="session")
async def worker(client: Client, settings: Settings, store: SessionStore) -> AsyncIterator[Worker]:
    router = ModelRouter(settings)
    w = build_worker(client, settings, store=store, router=router)
    async with w:
        yield w
    await router.aclose()


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@pytest.fixture(scope="session")
def cli_env(dev_server: DevServer, settings: Settings, database_url: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_", "ERRANDS_"))
    }
    env.update(
        TEMPORAL_ADDRESS=dev_server.address,
        ERRANDS_TASK_QUEUE=settings.task_queue,
        ERRANDS_DATABASE_URL=database_url,
        PYTHONPATH=str(ROOT),
    )
    return env


async def run_cli(env: dict[str, str], *args: str, timeout: float = 120) -> CliResult:
    """The real ``errands`` command, as a frontend would run it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "errands.cli",
        *args,
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return CliResult(proc.returncode or 0, out.decode(), err.decode())
