"""Shared test stack: a real Temporal dev server, the scripted model server behind the real SDK
clients, a SQLite session store and an in-process worker. Each test gets a clean script."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from errands.adapters.devserver import DevServer, free_port
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore, open_store
from errands.client import connect
from errands.contracts.workflows import TaskResult
from errands.settings import Settings
from errands.workers import build_worker
from tests.helpers import start_task
from tests.llama_server import LLAMA_ABORTS

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


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Say how often llama-server died on its own model's output and was restarted by the
    recording proxy (tests/llama_server.py): an upstream bug recovered from, so a line in the
    summary rather than a failure, but never hidden."""
    aborts = config.stash.get(LLAMA_ABORTS, [])
    if aborts:
        terminalreporter.section("llama-server aborts recovered by the proxy")
        for reason in aborts:
            terminalreporter.write_line(reason)


@pytest.fixture(scope="session", autouse=True)
def no_temporal_of_the_caller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The suite sees none of the developer's Temporal configuration: no ``TEMPORAL_*``
    variable, and Temporal's default ``temporal.toml`` looked for in an empty directory (the
    user's configuration directory as envconfig finds it: ``XDG_CONFIG_HOME`` on Linux, the home
    directory's on macOS, ``APPDATA`` on Windows). Restored at the end. A test that needs a
    variable or a profile sets it itself (``monkeypatch``, or the environment it gives a
    process); everything the tests start inherits this."""
    empty = tmp_path_factory.mktemp("no-temporal-config")
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith("TEMPORAL_"):
                patch.delenv(name)
        patch.setenv("XDG_CONFIG_HOME", str(empty / "config"))
        if sys.platform == "darwin":
            patch.setenv("HOME", str(empty))
        elif sys.platform == "win32":
            patch.setenv("APPDATA", str(empty / "config"))
        yield empty


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


@pytest.fixture(autouse=True)
def shared_store_keeps_no_keys(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that used the suite's session store leaves no API key in it: one key there makes
    every later test's gateway (no token, on loopback) ask for one. Such a test keeps its keys
    in a store of its own. (Taken at set-up, so the store outlives this check.)"""
    if "store" not in request.fixturenames:
        yield
        return
    store = request.getfixturevalue("store")
    yield
    try:
        keys = store.list_principals()
    except RuntimeError:
        return  # a store the test closed itself: one of its own, not the suite's
    assert not keys, (
        f"{request.node.nodeid} left API keys ({', '.join(k.name for k in keys)}) in the "
        "suite's session store; keep them in a store of the test's own"
    )


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
    return await connect(address=dev_server.address, embedded=True)


@pytest.fixture(scope="session")
async def worker(client: Client, settings: Settings, store: SessionStore) -> AsyncIterator[Worker]:
    router = ModelRouter(settings)
    w = build_worker(client, settings, store=store, router=router)
    async with w:
        yield w
    await router.aclose()


StartTask = Callable[..., Awaitable[WorkflowHandle[Any, TaskResult]]]


@pytest.fixture
def start(client: Client, settings: Settings, worker: Worker) -> StartTask:
    """``await start(text, model=..., ...)``: a task on the test worker's queue (the arguments
    of ``tests.helpers.start_task`` after the client and the queue)."""
    return functools.partial(start_task, client, settings.task_queue)


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


async def start_cli(
    env: dict[str, str], *args: str, stdout: int = asyncio.subprocess.PIPE
) -> asyncio.subprocess.Process:
    """The real ``errands`` command, started as a frontend would start it (stderr piped)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "errands.cli",
        *args,
        env=env,
        cwd=ROOT,
        stdout=stdout,
        stderr=asyncio.subprocess.PIPE,
    )


async def run_cli(env: dict[str, str], *args: str, timeout: float = 120) -> CliResult:
    """The real ``errands`` command, as a frontend would run it, to its end."""
    proc = await start_cli(env, *args)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return CliResult(proc.returncode or 0, out.decode(), err.decode())


@asynccontextmanager
async def running_cli(
    env: dict[str, str], *args: str, stdout: int = asyncio.subprocess.DEVNULL
) -> AsyncIterator[asyncio.subprocess.Process]:
    """`errands ARGS` in the background; killed at the end if it is still running."""
    proc = await start_cli(env, *args, stdout=stdout)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def read_stderr_until(
    proc: asyncio.subprocess.Process, marker: str, timeout: float = 60
) -> str:
    """What the command printed on stderr up to and including the line with ``marker``."""
    assert proc.stderr is not None
    seen = ""
    async with asyncio.timeout(timeout):
        while marker not in seen:
            line = await proc.stderr.readline()
            assert line, f"the command ended before printing {marker!r}: {seen}"
            seen += line.decode()
    return seen


# -- a worker in a process of its own, to be killed -9 -------------------------------------------


def worker_env(
    dev_server: DevServer, queue: str, database_url: str, model_server: ScriptedModelServer
) -> dict[str, str]:
    """The environment of a `python worker.py` process for the test stack, and nothing else."""
    inherited = ("OPENAI_", "ANTHROPIC_", "ERRANDS_")
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(inherited)},
        "TEMPORAL_ADDRESS": dev_server.address,
        "ERRANDS_TASK_QUEUE": queue,
        "ERRANDS_DATABASE_URL": database_url,
        "OPENAI_API_KEY": OPENAI_KEY,
        "OPENAI_BASE_URL": model_server.openai_base_url,
        "PYTHONPATH": str(ROOT),
    }


def spawn_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "worker.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def kill_worker(worker: subprocess.Popen[bytes]) -> None:
    """kill -9 of the worker process and everything it started (its own process group)."""
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()


@contextmanager
def worker_process(env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """A `python worker.py` process for the duration, killed -9 at the end."""
    worker = spawn_worker(env)
    try:
        yield worker
    finally:
        kill_worker(worker)


@dataclass
class ProcessWorkers:
    """Where a test's `python worker.py` processes serve: a queue of the test's own, and the
    environment that points them at the test stack."""

    queue: str
    env: dict[str, str]


@pytest.fixture
def process_workers(
    dev_server: DevServer, database_url: str, model_server: ScriptedModelServer
) -> ProcessWorkers:
    queue = f"process-{uuid.uuid4().hex[:6]}"
    return ProcessWorkers(queue, worker_env(dev_server, queue, database_url, model_server))
