"""``ErrandsPlugin``: errands' workflows and activities on your own Temporal client and worker.

::

    plugin = ErrandsPlugin(settings, subtask_types=[FX])
    client = await Client.connect(address, plugins=[plugin])
    async with Worker(client, task_queue=settings.task_queue, workflows=[MyWorkflow]):
        ...

On a ``Client`` it sets the pydantic data converter (errands' payloads are pydantic models) and,
with ``ERRANDS_ENCRYPTION_KEYS``, the encryption codec; the client's workers then inherit the
plugin. A worker given the plugin alone refuses a client that does not encrypt with those keys.
On a ``Worker`` it adds the workflows, the activities and the log-context interceptor; on
a ``Replayer``, the workflows, converter (codec included) and interceptor. The session store
and the model router are opened when a worker is configured, not before (a plugin used only on
a client opens no database), and closed when that worker stops.
"""

from __future__ import annotations

import asyncio
import compileall
import dataclasses
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import DataConverter, DefaultPayloadConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker, WorkerConfig, WorkerDeploymentConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

import workflows
from activities import (
    MODEL_CALLS,
    ConsultActivities,
    McpTools,
    ModelActivities,
    SessionActivities,
    ToolActivities,
)
from activities._notify import NotifyActivities
from activities._schedules import ScheduleActivities
from errands.adapters.encryption import configured_keys, encrypts_with, with_encryption
from errands.adapters.mcp.config import TOOL_NAME_PREFIX, McpServerConfig, valid_server_name
from errands.adapters.routing import ModelRouter
from errands.adapters.sandbox import CompiledSandboxRunner, visit_payloads_in_order
from errands.adapters.store import SessionStore, open_store
from errands.adapters.telemetry import LogContextInterceptor
from errands.agent.subtask_types import SubtaskType, WorkTool, load_types, unique_types
from errands.client._client import task_input
from errands.errors import ConfigError
from errands.settings import Settings, load_settings

PLUGIN_NAME = "errands.ErrandsPlugin"

WORKFLOWS: list[type] = [
    workflows.TaskWorkflow,
    workflows.SubtaskWorkflow,
    workflows.SideQuestionWorkflow,
    workflows.NotificationWorkflow,
    workflows.ScheduleFireWorkflow,
]


class ErrandsPlugin(SimplePlugin):
    """errands on a Temporal client, worker or replayer.

    ``subtask_types`` are added after the built-in ``general``, the ``errands.subtask_types``
    entry points and ``ERRANDS_SUBTASK_TYPES`` (a later key overrides an earlier one). ``tools``
    are the main agent's own work tools (``errands.tool`` functions), offered after the
    built-ins. ``mcp_servers`` are added to ``ERRANDS_MCP_SERVERS`` (a server of the same name
    replaces the setting's). A ``store`` or ``router`` passed in is used by every worker and
    never closed here; otherwise each worker gets its own, opened from ``settings`` and closed
    when the worker stops.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        subtask_types: Sequence[SubtaskType] = (),
        tools: Sequence[WorkTool] = (),
        mcp_servers: Mapping[str, McpServerConfig] | None = None,
        store: SessionStore | None = None,
        router: ModelRouter | None = None,
    ) -> None:
        self.settings = settings or load_settings()
        self._own_types = unique_types(subtask_types)
        self.tools = main_tools(tools)
        """The main agent's own work tools (Python functions)."""
        self.mcp_servers = {**self.settings.mcp(), **(mcp_servers or {})}
        """Every MCP server this plugin's workers may call, by name."""
        for name in self.mcp_servers:
            if not valid_server_name(name):
                raise ConfigError(
                    f"MCP server name {name!r} cannot name tools: use 1 to 32 letters, digits, "
                    "'-' or '_', with no '__' inside and no '_' at the end"
                )
        self._keys = configured_keys(self.settings)  # a bad key fails here, at start
        self._store = store
        self._router = router
        self._types: dict[str, SubtaskType] | None = None
        self._unclaimed: list[_WorkerResources] = []
        super().__init__(
            PLUGIN_NAME,
            data_converter=self._data_converter,
            interceptors=[LogContextInterceptor()],
            activities=self._add_activities,
            workflows=WORKFLOWS,
        )

    def _data_converter(self, existing: DataConverter | None) -> DataConverter:
        """The client's (or replayer's) converter with pydantic payloads and, with keys
        configured, the encryption codec (see ``with_encryption``)."""
        return with_encryption(with_pydantic_payloads(existing), self._keys)

    def subtask_types(self) -> dict[str, SubtaskType]:
        """Every subtask type this plugin's workers serve, by key; loaded on first use."""
        if self._types is None:
            self._types = load_types(self.settings.subtask_types, self._own_types)
        return self._types

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        client = config.get("client")
        if client is not None and not is_pydantic(client.data_converter):
            raise ConfigError(
                "errands needs the pydantic data converter on the worker's client: connect with "
                "Client.connect(..., plugins=[ErrandsPlugin(...)]) or "
                "data_converter=temporalio.contrib.pydantic.pydantic_data_converter"
            )
        if (
            client is not None
            and self._keys
            and not encrypts_with(client.data_converter, self._keys)
        ):
            raise ConfigError(
                "ERRANDS_ENCRYPTION_KEYS is set but the worker's client does not encrypt with "
                "those keys (the same keys in the same order: the first encrypts): connect with "
                "Client.connect(..., plugins=[ErrandsPlugin(...)]) or "
                "data_converter=errands.adapters.encryption.data_converter(settings)",
                setting="ERRANDS_ENCRYPTION_KEYS",
            )
        visit_payloads_in_order(config)
        cache_workflow_bytecode()
        config["workflow_runner"] = workflow_runner(config.get("workflow_runner"))
        config["deployment_config"] = pinned_by_default(config, self.settings)
        return super().configure_worker(config)

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        # `async with Worker(...)` goes through here too (temporalio 1.35 runs it as `run()`),
        # and waits for this cleanup after shutdown.
        resources = self._claim(worker)
        try:
            if resources is None or resources.mcp is None or not resources.mcp.stateful:
                await next(worker)
            else:
                async with self._holder_worker(worker, resources.mcp, resources.activities):
                    await next(worker)
        finally:
            if resources is not None:
                await resources.aclose()

    def _holder_worker(
        self, worker: Worker, mcp: McpTools, activities: Sequence[Callable[..., Any]]
    ) -> Worker:
        """The worker polling this worker's own queue (``mcp.holder_queue``): the calls of the
        stateful MCP sessions it holds, and their closing. Its client is the worker's without
        this plugin, which would add every activity again."""
        own, config = worker.config(), worker.client.config()
        config["plugins"] = [p for p in config["plugins"] if not isinstance(p, ErrandsPlugin)]
        client = Client(**config)
        held = {"run_round_tool", "run_branch_tool", "close_mcp_sessions"}
        return Worker(
            client,
            task_queue=mcp.holder_queue,
            activities=[a for a in activities if a.__name__ in held],
            max_heartbeat_throttle_interval=own.get("max_heartbeat_throttle_interval")
            or timedelta(seconds=2),
            graceful_shutdown_timeout=own.get("graceful_shutdown_timeout") or timedelta(0),
            # Unversioned: a queue of this process alone holds no workflow, and a deployment
            # version would collect one such queue for every worker process ever started.
        )

    def _add_activities(self, existing: Sequence[Callable[..., Any]] | None) -> list[Any]:
        types = self.subtask_types()  # a bad type fails here, before a database is opened
        resources = _WorkerResources.open(self.settings, self._store, self._router)
        resources.mcp = McpTools(
            resources.store,
            self.mcp_servers,
            max_processes=self.settings.mcp_max_processes,
            holder_queue=f"{self.settings.task_queue}-mcp-{uuid.uuid4().hex[:12]}",
        )
        resources.activities = build_activities(
            resources.store,
            resources.router,
            types,
            self.mcp_servers,
            self.tools,
            mcp_tools=resources.mcp,
        )
        self._unclaimed.append(resources)
        return [*(existing or []), *resources.activities]

    def model_call_activities(
        self, store: SessionStore, router: ModelRouter, mcp_tools: McpTools | None = None
    ) -> list[Callable[..., Any]]:
        """The activities that call a model, alone, wired as on every worker: what a worker
        polling a model task queue (``ERRANDS_MODEL_TASK_QUEUE``) registers. ``mcp_tools``
        (``self.mcp_tools``) lists the MCP servers' tools for them; the caller closes it."""
        every = build_activities(
            store, router, self.subtask_types(), self.mcp_servers, self.tools, mcp_tools=mcp_tools
        )
        return [a for a in every if a.__name__ in MODEL_CALLS]

    def mcp_tools(self, store: SessionStore) -> McpTools:
        """This plugin's MCP servers for one worker, with a pool of their own (``aclose`` it)."""
        return McpTools(store, self.mcp_servers, max_processes=self.settings.mcp_max_processes)

    def _claim(self, worker: Worker) -> _WorkerResources | None:
        """The resources opened when ``worker`` was configured (its activities are theirs)."""
        active = worker.config(active_config=True).get("activities") or []
        for resources in self._unclaimed:
            if resources.activities and resources.activities[0] in active:
                self._unclaimed.remove(resources)
                return resources
        return None


@dataclass
class _WorkerResources:
    """One worker's store and router, and which of them the plugin opened (and must close)."""

    store: SessionStore
    router: ModelRouter
    owns_store: bool
    owns_router: bool
    activities: list[Callable[..., Any]] = field(default_factory=list)
    mcp: McpTools | None = None
    """The worker's MCP servers and their open connections, closed with the worker."""

    @classmethod
    def open(
        cls, settings: Settings, store: SessionStore | None, router: ModelRouter | None
    ) -> _WorkerResources:
        return cls(
            store=store if store is not None else open_store(settings.session_database_url()),
            router=router if router is not None else ModelRouter(settings),
            owns_store=store is None,
            owns_router=router is None,
        )

    async def aclose(self) -> None:
        if self.mcp is not None:
            await self.mcp.aclose()
        if self.owns_router:
            await self.router.aclose()
        if self.owns_store:
            await asyncio.to_thread(self.store.close)


def build_activities(
    store: SessionStore,
    router: ModelRouter,
    types: dict[str, SubtaskType],
    mcp_servers: Mapping[str, McpServerConfig] | None = None,
    tools: Sequence[WorkTool] = (),
    *,
    mcp_tools: McpTools | None = None,
) -> list[Callable[..., Any]]:
    """Every errands activity, bound to one store, one router, the installed types, the MCP
    servers the agents may call (through ``mcp_tools`` when given: the worker's own, which it
    closes) and the main agent's own tools."""
    session = SessionActivities(store, types, router.settings)
    mcp = mcp_tools or McpTools(
        store, mcp_servers or {}, max_processes=router.settings.mcp_max_processes
    )
    models = ModelActivities(store, router, types, mcp, tools)
    tool_calls = ToolActivities(
        store, types, mcp, tools, result_max_bytes=router.settings.tool_result_max_bytes
    )
    consult = ConsultActivities(store, router, types, tools, mcp)
    notify = NotifyActivities(store, router.settings)
    schedules = ScheduleActivities(store, router.settings, task_input)
    return [
        session.open_task,
        session.prepare_round,
        session.append_ack,
        session.append_reply,
        session.append_message,
        session.record_branch,
        session.deterministic_join,
        session.recall_decisions,
        session.remember_decision,
        session.remember_approval,
        session.record_event,
        session.read_message,
        models.round_step,
        models.branch_step,
        tool_calls.run_branch_tool,
        tool_calls.run_round_tool,
        tool_calls.close_mcp_sessions,
        consult.consult_advisor,
        consult.answer_side_question,
        notify.deliver_notification,
        notify.record_notification_failed,
        schedules.prepare_scheduled_task,
    ]


RESERVED_TOOL_NAMES = frozenset({"final_reply", "delegate", "ask_user", "advisor", "read_message"})


def main_tools(tools: Sequence[WorkTool]) -> list[WorkTool]:
    """The main agent's tools, refused when a name is taken (by a built-in, MCP's ``mcp__``
    names, or another tool)."""
    seen: set[str] = set()
    for tool in tools:
        name = tool.spec.name
        taken = (
            "a built-in tool"
            if name in RESERVED_TOOL_NAMES
            else "MCP tools (mcp__server__tool)"
            if name.startswith(TOOL_NAME_PREFIX)
            else "another tool"
            if name in seen
            else None
        )
        if taken is not None:
            raise ConfigError(
                f"the main agent's tool {name!r} has a name taken by {taken}; give it another "
                "with @errands.tool(name=...)"
            )
        seen.add(name)
    return list(tools)


def worker_deployment(settings: Settings) -> WorkerDeploymentConfig | None:
    """The worker deployment version ``ERRANDS_DEPLOYMENT_NAME`` and ``ERRANDS_BUILD_ID`` name,
    for every worker errands builds (None: unversioned).

    errands' workflows declare no behavior (Temporal refuses a declared one from an unversioned
    worker): the version's default, pinned, is theirs, and that of a user's workflow beside
    them that declares none."""
    if settings.deployment_name is None:
        return None
    if settings.build_id is None:
        raise ConfigError(
            "ERRANDS_DEPLOYMENT_NAME is set without ERRANDS_BUILD_ID: a versioned worker needs "
            "its build id (set ERRANDS_BUILD_ID, or unset both for an unversioned worker)",
            setting="ERRANDS_BUILD_ID",
        )
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(settings.deployment_name, settings.build_id),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


def pinned_by_default(config: WorkerConfig, settings: Settings) -> WorkerDeploymentConfig | None:
    """The deployment of a worker errands' workflows run on: the worker's own (a version its
    options give wins over the settings'), pinned by default when it leaves the default open,
    else the settings' version (None: unversioned)."""
    own = config.get("deployment_config")
    if own is None:
        if config.get("build_id") or config.get("use_worker_versioning"):
            return None  # the older build-id versioning, left as the worker has it
        return worker_deployment(settings)
    unspecified = own.default_versioning_behavior == VersioningBehavior.UNSPECIFIED
    if own.use_worker_versioning and unspecified:
        return dataclasses.replace(own, default_versioning_behavior=VersioningBehavior.PINNED)
    return own


def is_pydantic(converter: DataConverter) -> bool:
    return issubclass(converter.payload_converter_class, PydanticPayloadConverter)


def with_pydantic_payloads(existing: DataConverter | None) -> DataConverter:
    """The client's (or replayer's) converter with pydantic payloads; its codec and failure
    converter are kept. A payload converter of the user's own cannot be combined: refused."""
    if existing is None or existing is DataConverter.default:
        return pydantic_data_converter
    if is_pydantic(existing):
        return existing
    if existing.payload_converter_class is DefaultPayloadConverter:
        return dataclasses.replace(existing, payload_converter_class=PydanticPayloadConverter)
    raise ConfigError(
        f"errands needs pydantic payloads, and the client's data converter uses "
        f"{existing.payload_converter_class.__qualname__}; subclass "
        "temporalio.contrib.pydantic.PydanticPayloadConverter for your own types instead"
    )


def workflow_runner(chosen: WorkflowRunner | None = None) -> WorkflowRunner:
    """The sandbox with errands' own workflow modules passed through it, in place of the
    worker's default sandbox; a runner configured otherwise (``chosen``) is kept as it is.

    The sandbox imports a workflow's module, and every module of ``workflows`` it reaches,
    afresh for each run it starts (a task's, each branch's): measured in B1, the largest part
    of the CPU a worker spends on workflows. Passed through, a run reuses the modules the worker
    imported once. The sandbox still isolates each run's globals from the others' (errands'
    workflow modules hold no mutable state) but no longer traps a forbidden call, such as
    ``datetime.now()``, in them: the replay tests (tests/test_replay.py) run every recorded
    history in the full sandbox, so one fails CI there. The sandbox is temporalio's with the
    code it runs compiled once (``errands.adapters.sandbox``).
    """
    default = SandboxRestrictions.default
    if chosen is not None and not (
        type(chosen) is SandboxedWorkflowRunner and chosen.restrictions is default
    ):
        return chosen
    return CompiledSandboxRunner(restrictions=default.with_passthrough_modules(workflows.__name__))


def cache_workflow_bytecode() -> None:
    """Write the workflow modules' bytecode if it is not cached yet.

    The sandbox imports a workflow's module afresh for every run it starts, replays included.
    Without cached bytecode (``PYTHONDONTWRITEBYTECODE``, common in containers and CI) every
    one of those imports compiles the source again: measured, a branch's run cost 12.5 ms of CPU
    to start instead of 5.3. A read-only install is left as it is; pip compiled it when it
    installed it.
    """
    compileall.compile_dir(Path(workflows.__file__).parent, maxlevels=0, quiet=2)


__all__ = [
    "WORKFLOWS",
    "ErrandsPlugin",
    "build_activities",
    "cache_workflow_bytecode",
    "worker_deployment",
]
