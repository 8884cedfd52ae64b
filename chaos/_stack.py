"""The stack every scenario runs on: a dev server on a SQLite file (so it can be stopped and
started again on the same state), the scripted model server behind the real SDK clients, the
session store, and workers either in this process or as ``python worker.py`` children.

Provider keys are made up per run, so the secrets audit looks for strings that exist nowhere
else; every task queue a scenario uses is recorded, so the audit covers every history.

``encrypt`` turns payload encryption on for the whole stack: a key made up per run, given as
``ERRANDS_ENCRYPTION_KEYS`` to every worker process and in-process worker, and the suite's own
client built with ``errands.adapters.encryption.data_converter`` from the same settings, so
every payload the suite and the workers write is encrypted.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import IO

from pydantic import SecretStr
from temporalio.client import Client

from errands.adapters.devserver import DevServer, free_port
from errands.adapters.encryption import data_converter, new_key
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import RecordedRequest, ScriptedModelServer, Step
from errands.adapters.store import SessionStore, open_store
from errands.settings import Settings
from errands.workers import build_worker

ROOT = Path(__file__).resolve().parent.parent
"""The repository: ``python worker.py`` runs from here, as an operator would run it."""

Responder = Callable[[RecordedRequest], "Step | None"]


class WorkerProcess:
    """One ``python worker.py`` child in its own process group, so SIGKILL takes all of it."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self._env = env
        self._log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.spawned = 0
        self.killed = 0

    def start(self) -> None:
        self._log = self._log_path.open("ab")
        self._proc = subprocess.Popen(
            [sys.executable, "worker.py"],
            cwd=ROOT,
            env=self._env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.spawned += 1

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown hook, no graceful completion of anything in flight."""
        if self._end():
            self.killed += 1

    def stop(self) -> None:
        """The end of a scenario: the same SIGKILL, not counted as an injected fault."""
        self._end()

    def _end(self) -> bool:
        proc, self._proc = self._proc, None
        if self._log is not None:
            self._log.close()
            self._log = None
        if proc is None:
            return False
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return True


class Stack:
    def __init__(self, root: Path, *, encrypt: bool = False) -> None:
        self.root = root
        self.encryption_keys = f"chaos={new_key()}" if encrypt else None
        """``ERRANDS_ENCRYPTION_KEYS`` of every worker and client, or None: no encryption."""
        self.port = free_port()
        self.server = self._new_server()
        self.openai_key = "sk-chaos-openai-" + secrets.token_hex(16)
        self.anthropic_key = "sk-ant-chaos-" + secrets.token_hex(16)
        self.models = ScriptedModelServer(responder=self._respond)
        self.database_url = f"sqlite:///{root / 'sessions.db'}"
        self.store: SessionStore = open_store(self.database_url)
        self.queues: list[str] = []
        self.server_restarts = 0
        self._client: Client | None = None
        self._responders: dict[str, Responder] = {}
        self._lock = threading.Lock()

    @classmethod
    @asynccontextmanager
    async def open(cls, *, encrypt: bool = False) -> AsyncIterator[Stack]:
        root = Path(tempfile.mkdtemp(prefix="errands-chaos-"))
        stack = cls(root, encrypt=encrypt)
        try:
            await asyncio.to_thread(stack.server.start)
            stack.models.start()
            # The converter every errands client has: pydantic payloads, and the codec when
            # the stack encrypts.
            converter = data_converter(stack.settings("chaos-client"))
            stack._client = await Client.connect(stack.server.address, data_converter=converter)
            yield stack
        finally:
            stack.models.stop()
            await asyncio.to_thread(stack.server.stop)
            stack.store.close()
            shutil.rmtree(root, ignore_errors=True)

    @property
    def client(self) -> Client:
        assert self._client is not None, "open the stack first"
        return self._client

    @property
    def keys(self) -> list[str]:
        return [self.openai_key, self.anthropic_key]

    def _new_server(self) -> DevServer:
        return DevServer(
            port=self.port,
            ui_port=None,
            db_file=str(self.root / "temporal.db"),
            log_file=str(self.root / "temporal.log"),
        )

    async def restart_server(self, downtime: float) -> None:
        """Stop the dev server, stay down ``downtime`` seconds, start a new one on the same port
        and SQLite file. Clients and workers keep their connections' addresses and reconnect."""
        await asyncio.to_thread(self.server.stop)
        await asyncio.sleep(downtime)
        self.server = self._new_server()
        await asyncio.to_thread(self.server.start)
        self.server_restarts += 1

    # -- models ------------------------------------------------------------------------------

    def answer(self, model: str, responder: Responder) -> None:
        """Answer every request for ``model`` (what the script does not) with ``responder``."""
        with self._lock:
            self._responders[model] = responder

    def _respond(self, request: RecordedRequest) -> Step | None:
        with self._lock:
            responder = self._responders.get(request.model)
        return responder(request) if responder is not None else None

    # -- workers -----------------------------------------------------------------------------

    def queue(self, name: str) -> str:
        queue = f"chaos-{name}-{secrets.token_hex(3)}"
        self.queues.append(queue)
        return queue

    def settings(self, queue: str, **extra: str) -> Settings:
        """A worker's settings on ``queue``; ``extra`` adds settings by name
        (``ERRANDS_MCP_SERVERS=…``)."""
        if self.encryption_keys is not None:
            extra = {"ERRANDS_ENCRYPTION_KEYS": self.encryption_keys, **extra}
        return Settings(
            TEMPORAL_ADDRESS=self.server.address,
            ERRANDS_TASK_QUEUE=queue,
            ERRANDS_DATABASE_URL=self.database_url,
            OPENAI_API_KEY=SecretStr(self.openai_key),
            OPENAI_BASE_URL=self.models.openai_base_url,
            ANTHROPIC_API_KEY=SecretStr(self.anthropic_key),
            ANTHROPIC_BASE_URL=self.models.anthropic_base_url,
            **extra,  # type: ignore[arg-type]
        )

    def worker_env(self, queue: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("OPENAI_", "ANTHROPIC_", "ERRANDS_", "TEMPORAL_"))
        }
        env.update(
            TEMPORAL_ADDRESS=self.server.address,
            ERRANDS_TASK_QUEUE=queue,
            ERRANDS_DATABASE_URL=self.database_url,
            OPENAI_API_KEY=self.openai_key,
            OPENAI_BASE_URL=self.models.openai_base_url,
            ANTHROPIC_API_KEY=self.anthropic_key,
            ANTHROPIC_BASE_URL=self.models.anthropic_base_url,
            PYTHONPATH=str(ROOT),
        )
        if self.encryption_keys is not None:
            env["ERRANDS_ENCRYPTION_KEYS"] = self.encryption_keys
        return env

    def worker_process(self, queue: str) -> WorkerProcess:
        return WorkerProcess(self.worker_env(queue), self.root / f"worker-{queue}.log")

    @asynccontextmanager
    async def worker(self, queue: str, **extra: str) -> AsyncIterator[None]:
        """A worker in this process, for scenarios that do not kill it."""
        settings = self.settings(queue, **extra)
        router = ModelRouter(settings)
        try:
            async with build_worker(self.client, settings, store=self.store, router=router):
                yield
        finally:
            await router.aclose()
