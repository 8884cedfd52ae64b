"""The stack every benchmark runs on, and how tasks, floors and workers are run on it.

Each benchmark gets its own tuned dev server (a SQLite file in a temporary directory, no UI),
the scripted model server answering through ``bench._model.responder`` with zero latency (in a
process of its own, ``bench._model_server``), a SQLite session store, and workers either in this
process or as ``python worker.py`` children.
"""

from __future__ import annotations

import asyncio
import compileall
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Self, TypeVar

from pydantic import SecretStr
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from bench._floor import FloorChild, FloorPlan, FloorTask, floor_noop
from bench._measure import history_of
from bench._model import responder
from errands.adapters.devserver import DevServer, free_port, port_open
from errands.adapters.encryption import data_converter
from errands.adapters.mcp.config import parse_mcp_servers
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore, open_store
from errands.contracts import search
from errands.contracts.workflows import RoundSettings, TaskInput, TaskResult
from errands.settings import Settings
from errands.workers import build_worker

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")
FAKE_KEY = "sk-bench-not-a-real-key"
"""The scripted server takes any key; a real one is never needed, nor read."""
TASK_TIMEOUT = 600.0
"""Longest wait for one task's result before the benchmark gives up and says why."""


class Stack:
    """Dev server + scripted model server + session store for one benchmark."""

    def __init__(self, name: str, task_timeout: float = TASK_TIMEOUT) -> None:
        self.name = name
        self.task_timeout = task_timeout
        self._tmp = tempfile.TemporaryDirectory(prefix=f"errands-bench-{name}-")
        self.dir = Path(self._tmp.name)
        self.server = DevServer(
            port=free_port(),
            ui_port=None,
            db_file=str(self.dir / "temporal.db"),
            log_file=str(self.dir / "temporal.log"),
        )
        self.model = ScriptedModelServer(responder=responder)
        """The same model on a thread of this process, for a benchmark that reads the requests
        (B5) and points its workers at it."""
        self.model_url = ""
        """The OpenAI base URL of the model process every worker calls by default."""
        self.database_url = f"sqlite:///{self.dir / 'sessions.db'}"
        self._exit = AsyncExitStack()
        self._children: list[subprocess.Popen[bytes]] = []
        self.client: Client
        self.store: SessionStore

    async def __aenter__(self) -> Self:
        try:
            await asyncio.to_thread(self.server.start)
            self.model.start()
            self.model_url = await self._model_process()
            self.store = open_store(self.database_url)
            # The converter every errands client carries (pydantic payloads; these settings
            # encrypt nothing), on the benchmark's own server.
            self.client = await Client.connect(
                self.server.address, data_converter=data_converter(self.settings())
            )
        except BaseException:
            await self.__aexit__()  # what started stops, and the directory goes
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self._exit.aclose()
        finally:
            for child in self._children:
                stop_process(child)
            if hasattr(self, "store"):
                self.store.close()
            self.model.stop()
            await asyncio.to_thread(self.server.stop)
            self._tmp.cleanup()

    def settings(
        self, task_queue: str | None = None, mcp_servers: dict[str, Any] | None = None
    ) -> Settings:
        """Settings of a worker on a queue of its own; ``mcp_servers`` as
        ``ERRANDS_MCP_SERVERS`` takes them (by server name)."""
        settings = Settings(
            TEMPORAL_ADDRESS=self.server.address,
            ERRANDS_TASK_QUEUE=task_queue or f"bench-{uuid.uuid4().hex[:8]}",
            ERRANDS_DATABASE_URL=self.database_url,
            OPENAI_API_KEY=SecretStr(FAKE_KEY),
            OPENAI_BASE_URL=self.model_url,
        )
        if mcp_servers is None:
            return settings
        value = json.dumps(mcp_servers)
        parse_mcp_servers(value)  # as the setting's validator would: a typo fails here
        return settings.model_copy(update={"mcp_servers": value})

    async def _model_process(self, timeout: float = 60) -> str:
        """``bench._model_server`` as a child until the stack closes; returns its base URL."""
        log_path = self.dir / "model-server.log"
        with open(log_path, "ab") as log:
            child = subprocess.Popen(
                [sys.executable, "-m", "bench._model_server"],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        self._children.append(child)
        assert child.stdout is not None
        try:
            line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), timeout)
        except TimeoutError:
            line = b""
        url = line.decode().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"the model server process did not start:\n{log_path.read_text()}")
        return url

    async def serve_mcp_http(self, timeout: float = 60) -> str:
        """The almanac MCP server over Streamable HTTP (``bench._mcp_http``), as a process of
        its own until the stack closes; returns its URL."""
        port = free_port()
        log_path = self.dir / "mcp-http.log"
        with open(log_path, "ab") as log:
            child = subprocess.Popen(
                [sys.executable, "-m", "bench._mcp_http", str(port)],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._children.append(child)
        deadline = time.monotonic() + timeout
        while not port_open("127.0.0.1", port):
            if child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the MCP HTTP server did not listen on {port}:\n{log_path.read_text()}"
                )
            await asyncio.sleep(0.1)
        return f"http://127.0.0.1:{port}/mcp"

    async def worker(
        self,
        settings: Settings,
        store: SessionStore | None = None,
        client: Client | None = None,
        **options: Any,
    ) -> Worker:
        """An in-process errands worker (on the stack's store and client, unless given others),
        running until the benchmark's stack closes."""
        router = ModelRouter(settings)
        self._exit.push_async_callback(router.aclose)
        store = store if store is not None else self.store
        worker = build_worker(
            client or self.client, settings, store=store, router=router, **options
        )
        await self._exit.enter_async_context(worker)
        return worker

    async def run_worker(self, worker: Worker) -> Worker:
        """Run any other worker (the floor's, the peer's) for the rest of the benchmark."""
        await self._exit.enter_async_context(worker)
        return worker

    async def floor_worker(self) -> str:
        """A worker for the hand-written floor workflows; returns its task queue."""
        queue = f"floor-{uuid.uuid4().hex[:8]}"
        # As the errands worker does for its own: the sandbox imports the floor's module afresh
        # for every run, and must not compile it from source each time.
        compileall.compile_dir(ROOT / "bench", maxlevels=0, quiet=2)
        worker = Worker(
            self.client,
            task_queue=queue,
            workflows=[FloorTask, FloorChild],
            activities=[floor_noop],
        )
        await self.run_worker(worker)
        return queue

    async def run_floor(self, queue: str, plan: FloorPlan) -> tuple[float, str]:
        """One floor workflow, start call to result, like ``run_task``."""
        began = time.perf_counter()
        workflow_id = f"floor-{uuid.uuid4().hex[:10]}"
        await self.client.execute_workflow(FloorTask.run, plan, id=workflow_id, task_queue=queue)
        return time.perf_counter() - began, workflow_id

    def spawn_worker(self, settings: Settings) -> subprocess.Popen[bytes]:
        """``python worker.py`` as a child process, exactly as an operator would run it."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ERRANDS_"))}
        env.update(
            TEMPORAL_ADDRESS=self.server.address,
            ERRANDS_TASK_QUEUE=settings.task_queue,
            ERRANDS_DATABASE_URL=self.database_url,
            OPENAI_API_KEY=FAKE_KEY,
            OPENAI_BASE_URL=self.model_url,
            PYTHONPATH=str(ROOT),
        )
        if settings.mcp_servers:
            env["ERRANDS_MCP_SERVERS"] = settings.mcp_servers
        # The child keeps its own copy of the log's descriptor; ours can close at once.
        with open(self.dir / f"worker-{len(self._children)}.log", "ab") as log:
            child = subprocess.Popen(
                [sys.executable, str(ROOT / "worker.py")],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._children.append(child)
        return child

    def stop_worker(self, child: subprocess.Popen[bytes]) -> None:
        stop_process(child)
        if child in self._children:
            self._children.remove(child)

    async def start_task(
        self,
        settings: Settings,
        model: str,
        *,
        text: str = "Compare three ways to run this service and recommend one.",
        session_id: str | None = None,
        round_settings: RoundSettings | None = None,
        client: Client | None = None,
    ) -> WorkflowHandle[Any, TaskResult]:
        """Start a task through the stack's client, or ``client`` (one with another data
        converter: the encryption benchmark's), as ``errands.Client`` starts one: with the
        initial search attributes and the text as its summary."""
        session = session_id or f"s-{uuid.uuid4().hex[:10]}"
        task_id = f"task-{session}-{uuid.uuid4().hex[:6]}"
        return await (client or self.client).start_workflow(
            "TaskWorkflow",
            TaskInput(
                task_id=task_id,
                session_id=session,
                text=text,
                model=model,
                settings=round_settings or RoundSettings(),
            ),
            id=task_id,
            task_queue=settings.task_queue,
            result_type=TaskResult,
            search_attributes=search.initial(session),
            static_summary=text[:200],
        )

    async def run_task(self, settings: Settings, model: str, **kwargs: Any) -> tuple[float, str]:
        """Start a task and wait for its result: seconds from the start call to the result."""
        began = time.perf_counter()
        handle = await self.start_task(settings, model, **kwargs)
        await self.result(handle)
        return time.perf_counter() - began, handle.id

    async def result(self, handle: WorkflowHandle[Any, TaskResult]) -> TaskResult:
        """A task's result, which must be a reply; a task that fails or hangs stops the run."""
        timeout = self.task_timeout
        try:
            result = await asyncio.wait_for(handle.result(), timeout)
        except TimeoutError:
            raise RuntimeError(
                f"task {handle.id} gave no result in {timeout:g}s; "
                f"{await stuck_reason(self.client, handle.id)}"
            ) from None
        if result.status != "replied":
            raise RuntimeError(f"task {handle.id} ended {result.status}: {result.error}")
        return result


async def stuck_reason(client: Client, workflow_id: str) -> str:
    """The last workflow-task failure in a workflow's history, the usual cause of a hang."""
    events, _ = await history_of(client, workflow_id)
    failed = [
        e.workflow_task_failed_event_attributes.failure.message
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    if failed:
        return f"its workflow task keeps failing: {failed[-1]}"
    return f"its history has {len(events)} events and no workflow-task failure"


@asynccontextmanager
async def stack_for(name: str, given: Stack | None) -> AsyncIterator[Stack]:
    """The stack a benchmark was handed (the smoke test shares one), or a fresh one of its own."""
    if given is not None:
        yield given
        return
    async with Stack(name) as stack:
        yield stack


def stop_process(child: subprocess.Popen[bytes], timeout: float = 10) -> None:
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            pipe.close()


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.25)


async def bounded(limit: int, jobs: Iterable[Awaitable[T]]) -> list[T]:
    """Await ``jobs`` with at most ``limit`` in flight, results in order."""
    gate = asyncio.Semaphore(limit)

    async def one(job: Awaitable[T]) -> T:
        async with gate:
            return await job

    return list(await asyncio.gather(*(one(j) for j in jobs)))
