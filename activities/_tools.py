"""MCP work tools on a worker: the task's pinned tool list, and one call of a listed tool.

A task's MCP tools are listed once, by the first activity that needs them, and stored under the
task's deterministic id (``ids.task_tools_id``) with ``append_once``: every later step, retry and
replay of that task reads the same list, so a server that changes its tools mid-task changes
nothing for it. A server that cannot be listed is pinned as unavailable, with the reason, and
the model is told so; the task goes on without it.

The list holds names, descriptions and schemas, never a server's command, URL, headers or env:
those stay in the worker's configuration, which a call reads by server name.

Written once and never changed, a task's list is also kept in the worker's memory
(``PinnedCache``): the task's later steps and tool calls on this worker read it there, without a
trip to the store.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from activities._mcp_sessions import Holders, hold
from errands.adapters.mcp import config as mcp
from errands.adapters.mcp.config import (
    Approval,
    McpServerConfig,
    McpTool,
    SessionScope,
    ToolOutcome,
)
from errands.adapters.store import SessionStore, store_work
from errands.agent import prompts
from errands.agent.approvals import need_of
from errands.agent.arguments import read_arguments
from errands.contracts import ids
from errands.contracts.activities import McpHolder, SessionRouting
from errands.contracts.approvals import ApprovalNeed
from errands.contracts.messages import NewMessage, ToolCall, ToolSpec

if TYPE_CHECKING:
    from errands.adapters.mcp.pool import Lost, McpPool

MAIN = "main"
"""The ``for`` key of the main agent; a subtask type's key names its branches."""
EVERY_TYPE = "*"


def serves(for_: list[str], key: str) -> bool:
    """Whether a server whose ``for`` is ``for_`` gives its tools to ``key``."""
    return key in for_ or (key != MAIN and EVERY_TYPE in for_)


class PinnedServer(BaseModel):
    """One server as the task found it: its tools, or why it could not be listed."""

    tools: list[McpTool] = Field(default_factory=list)
    for_: list[str] = Field(default_factory=list, alias="for")
    approval: dict[str, Approval] = Field(default_factory=dict)
    """The approval policy of each server-side tool that is not ``never``."""
    session: SessionScope = "shared"
    """Whose session its calls run in, as configured when the task listed it."""
    error: str | None = None

    model_config = {"validate_by_name": True, "serialize_by_alias": True, "frozen": True}

    def serves(self, key: str) -> bool:
        return serves(self.for_, key)


class PinnedTools(BaseModel):
    """Every configured server's tools, as listed when the task first needed them."""

    servers: dict[str, PinnedServer] = Field(default_factory=dict)

    model_config = {"frozen": True}

    def offered(self, key: str) -> list[OfferedTool]:
        """The tools the main agent (``key`` = ``"main"``) or a subtask type's branches see,
        in the configuration's server order and each server's own tool order."""
        return [
            OfferedTool(
                server=name,
                tool=tool,
                policy=server.approval.get(tool.name, "never"),
                session=server.session,
            )
            for name, server in self.servers.items()
            if server.serves(key)
            for tool in server.tools
        ]

    def unavailable(self, key: str) -> dict[str, str]:
        """Why each server ``key`` would have had tools from could not be listed."""
        return {
            name: server.error
            for name, server in self.servers.items()
            if server.error is not None and server.serves(key)
        }


@dataclass(frozen=True)
class OfferedTool:
    server: str
    tool: McpTool
    policy: Approval = "never"
    session: SessionScope = "shared"

    @property
    def name(self) -> str:
        """The name the model calls it by: ``mcp__<server>__<tool>``."""
        return mcp.tool_name(self.server, self.tool.name)

    def spec(self) -> ToolSpec:
        description = self.tool.description or f"The {self.tool.name} tool of {self.server}."
        return ToolSpec(name=self.name, description=description, parameters=self.tool.input_schema)


class PinnedCache:
    """The pinned lists of the tasks this worker ran lately, by task id: at most ``tasks`` of
    them, and ``max_bytes`` of distinct lists as stored (one larger list alone is kept).
    A list is stored once and never changes, so the one held is the stored one; tasks that
    pinned the same list share one parsed object, which nothing may change. Safe from any
    thread (the store's included)."""

    def __init__(self, tasks: int = 256, max_bytes: int = 8 * 1024 * 1024) -> None:
        self._tasks, self._max_bytes = tasks, max_bytes
        self._texts: OrderedDict[str, str] = OrderedDict()
        """Each task's list as stored, the latest used last."""
        self._lists: dict[str, tuple[PinnedTools, int]] = {}
        """Each distinct list as stored: parsed, and how many tasks hold it."""
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, task_id: str) -> PinnedTools | None:
        """The task's list, when this worker holds it."""
        with self._lock:
            text = self._texts.get(task_id)
            if text is None:
                return None
            self._texts.move_to_end(task_id)
            return self._lists[text][0]

    def put(self, task_id: str, text: str) -> PinnedTools:
        """Hold the task's list, as stored (``text``); returns it parsed (the object of another
        task that pinned the same list, if one is held)."""
        with self._lock:
            known = self._lists.get(text)
        parsed = known[0] if known is not None else PinnedTools.model_validate_json(text)
        with self._lock:
            if task_id not in self._texts:
                parsed, holders = self._lists.get(text, (parsed, 0))
                self._lists[text] = (parsed, holders + 1)
                if holders == 0:
                    self._bytes += len(text)
                self._texts[task_id] = text
                self._evict()
            return self._lists[self._texts[task_id]][0]

    def _evict(self) -> None:
        """Forget the least recently used tasks past the bounds (the caller holds the lock)."""
        while len(self._texts) > self._tasks or (
            self._bytes > self._max_bytes and len(self._texts) > 1
        ):
            _, text = self._texts.popitem(last=False)
            parsed, holders = self._lists[text]
            if holders > 1:
                self._lists[text] = (parsed, holders - 1)
            else:
                del self._lists[text]
                self._bytes -= len(text)


class McpTools:
    """The MCP servers one worker may call, by name (``ERRANDS_MCP_SERVERS`` and the plugin's),
    through the worker's pool of open connections (``errands.adapters.mcp.pool``, made on first
    use, closed by ``aclose`` when the worker stops).

    ``holder_queue`` is the queue only this worker polls: the workflows send there the calls of
    the stateful sessions it holds (``activities._mcp_sessions``)."""

    def __init__(
        self,
        store: SessionStore,
        servers: Mapping[str, McpServerConfig],
        *,
        max_processes: int = 32,
        holder_queue: str = "",
    ) -> None:
        self._store = store
        self._servers = dict(servers)
        self._max_processes = max_processes
        self._pool: McpPool | None = None
        self._holders = Holders(store)
        self.holder_queue = holder_queue
        self.pins = PinnedCache()
        """The lists of the tasks this worker ran lately, read without a trip to the store."""

    @property
    def stateful(self) -> bool:
        """Whether a server's calls run in a ``task`` or ``branch`` session (held by a worker)."""
        return any(config.session != "shared" for config in self._servers.values())

    def _connections(self) -> McpPool:
        if self._pool is None:
            from errands.adapters.mcp.pool import McpPool  # the SDK costs a second to import

            self._pool = McpPool(self._servers, max_processes=self._max_processes)
        return self._pool

    def serve(self, key: str) -> bool:
        """Whether any configured server offers tools to ``key``: if not, nothing is listed."""
        return any(serves(config.for_, key) for config in self._servers.values())

    async def pinned(self, task_id: str) -> PinnedTools:
        """The task's tool list: as this worker last read it, as stored, or listed now (every
        server at once) and stored."""
        known = self.pins.get(task_id)
        if known is not None:
            return known
        row = await store_work(self._store, self._store.get, ids.task_tools_id(task_id))
        if row is None:
            names = list(self._servers)
            listed = await asyncio.gather(*(self._list(n, self._servers[n]) for n in names))
            found = PinnedTools(servers=dict(zip(names, listed, strict=True)))
            return await store_work(self._store, self.pin, task_id, found)  # the first pinned wins
        return self.pins.put(task_id, row.text)

    def nothing_for(self, key: str) -> PinnedTools | None:
        """An empty list when no server serves ``key``: the task's list offers it nothing and
        names no server it lacks, so a request renders alike without reading the list (a
        round's and a side question's the same). None: the request reads the task's."""
        return None if self.serve(key) else PinnedTools()

    def ahead(self, task_id: str, key: str) -> Pinning | None:
        """The task's list for a step of ``key``, as far as this worker knows it without I/O:
        nothing to offer, the list held in memory, or one made of the pool's cached listings
        for the step's own trip to the store to pin (``Pinning.resolve``). None when a server
        must be listed first (``pinned``). On the event loop."""
        if not task_id or not self.serve(key):
            return Pinning()
        known = self.pins.get(task_id)
        if known is not None:
            return Pinning(known=known)
        if self._pool is None:
            return None
        listed = {}
        for name, config in self._servers.items():
            tools = self._pool.cached_tools(name)
            if tools is None:
                return None
            listed[name] = (config, tools)
        return Pinning(listed=listed)

    def pin(self, task_id: str, found: PinnedTools) -> PinnedTools:
        """The task's list as stored: ``found`` unless another was pinned first (another
        worker's, or this one's before it forgot the task: then the write finds the row).
        Blocking."""
        return self.pins.put(task_id, self._store.append_once(_pin_row(task_id, found)).text)

    async def _list(self, name: str, config: McpServerConfig) -> PinnedServer:
        try:
            tools = await self._connections().list_tools(name, timeout=config.timeout_seconds)
        except (ConnectionError, TimeoutError) as error:
            return PinnedServer.model_validate({"for": config.for_, "error": str(error)})
        except Exception as error:  # noqa: BLE001 - a broken server must not fail the task
            failed = f"{type(error).__name__}: {error}"
            return PinnedServer.model_validate({"for": config.for_, "error": failed})
        return _pinned_server(config, tools)

    async def call(
        self,
        offered: OfferedTool,
        arguments: dict[str, object],
        *,
        key: str,
        timeout: float,
        max_bytes: int | None = None,
        scope: str = "",
        routing: SessionRouting | None = None,
    ) -> tuple[ToolOutcome, McpHolder | None]:
        """Call a pinned tool; ``key`` is the call's idempotency key. ``ConnectionError`` when
        the server cannot be reached (the caller retries), ``TimeoutError`` when it did not
        answer within ``timeout`` or the server's own ``timeout_seconds``. ``max_bytes``: about
        how much of the server's answer is read (the rest is said to be dropped).

        A tool of a stateful server runs in ``scope``'s session, on the worker holding it:
        returned beside the outcome. Raises ``session_elsewhere`` when another worker holds it;
        a session this worker had to open anew (its holder gone, its process exited, idle too
        long) starts the outcome's text with what the model must know: the state is lost."""
        config = self._servers.get(offered.server)
        if config is None:
            return ToolOutcome(
                text=(
                    f"the MCP server {offered.server!r} is not configured on this worker any "
                    "more (ERRANDS_MCP_SERVERS); its tools cannot be called"
                ),
                is_error=True,
            ), None
        timeout = min(timeout, config.timeout_seconds)
        pool = self._connections()
        if offered.session == "shared" or config.session == "shared":
            outcome = await pool.call(
                offered.server,
                offered.tool.name,
                arguments,
                idempotency_key=key,
                timeout=timeout,
                max_bytes=max_bytes,
            )
            return outcome, None
        from errands.adapters.mcp.pool import SessionKey

        holder, moved = await hold(
            self._holders, scope, offered.server, self.holder_queue, routing or SessionRouting()
        )
        outcome, lost = await pool.session_call(
            SessionKey(scope, offered.server),
            offered.tool.name,
            arguments,
            idempotency_key=key,
            timeout=timeout,
            max_bytes=max_bytes,
        )
        reason: Lost | Literal["moved"] | None = "moved" if moved else lost
        if reason is not None:
            note = prompts.mcp_session_lost(offered.server, reason, config.idle_seconds)
            outcome = ToolOutcome(text=f"{note}\n\n{outcome.text}", is_error=outcome.is_error)
        return outcome, holder

    async def close_scopes(self, scopes: list[str]) -> int:
        """Close this worker's sessions of ``scopes`` (their task or branch ended)."""
        if self._pool is None:
            return 0
        closed = 0
        for scope in scopes:
            closed += await self._pool.close_scope(scope)
        return closed

    async def aclose(self) -> None:
        """Close every connection of this worker (it stops)."""
        if self._pool is not None:
            await self._pool.aclose()


def session_scope(offered: OfferedTool, task_id: str, thread_id: str | None) -> str:
    """Whose session a call of ``offered`` runs in: the task's, the branch's (``thread_id``) or
    the main agent's own; empty for a shared server."""
    if offered.session == "task":
        return task_id
    if offered.session == "branch":
        return thread_id if thread_id is not None else ids.mcp_main_scope(task_id)
    return ""


def session_servers(pinned: PinnedTools | None, key: str, calls: list[ToolCall]) -> dict[int, str]:
    """The stateful MCP server of each of ``calls`` (by index) that ``key`` is offered."""
    if pinned is None:
        return {}
    stateful = {t.name: t.server for t in pinned.offered(key) if t.session != "shared"}
    return {i: stateful[c.name] for i, c in enumerate(calls) if c.name in stateful}


def approvals_needed(
    store: SessionStore,
    session_id: str,
    offered: list[OfferedTool],
    calls: list[ToolCall],
    why: str,
) -> list[ApprovalNeed]:
    """The calls of one step that must wait for a person: their tool's policy is ``always``,
    ``approver`` or ``two`` (who may answer is the task's to check), or ``ask`` and the session
    has not approved that tool for good. Blocking."""
    by_name = {t.name: t for t in offered}
    needs = []
    for index, call in enumerate(calls):
        tool = by_name.get(call.name)
        if tool is None or tool.policy == "never":
            continue
        if isinstance(read_arguments(call.arguments), str):
            continue  # arguments it cannot read: the call is not run, its error is the result
        if tool.policy == "ask" and store.get(ids.approved_always_id(session_id, tool.name)):
            continue
        # Canonicalised and hashed here, recorded in the activity's result: what the person
        # sees and answers never depends on the Python a replay runs on.
        needs.append(need_of(index, tool.name, tool.policy, call.arguments, why))
    return needs


def arguments_of(raw: str) -> dict[str, object] | str:
    """A tool call's arguments as a JSON object, or what is wrong with them (the one parser's
    words, its guards included: ``errands.agent.arguments``)."""
    return read_arguments(raw)


@dataclass(frozen=True)
class Pinning:
    """A task's tool list as a step finds it before its trip to the store (``McpTools.ahead``):
    held already (``known``, or nothing to offer), or every server's listing as the pool holds
    it (``listed``), to be made into the task's list and pinned in the trip."""

    known: PinnedTools | None = None
    listed: Mapping[str, tuple[McpServerConfig, list[McpTool]]] | None = None

    def resolve(self, tools: McpTools, task_id: str) -> PinnedTools | None:
        """The list, pinned first when the step brought the listings. Blocking."""
        if self.listed is None:
            return self.known
        servers = {name: _pinned_server(*listing) for name, listing in self.listed.items()}
        return tools.pin(task_id, PinnedTools(servers=servers))


def _pinned_server(config: McpServerConfig, tools: list[McpTool]) -> PinnedServer:
    asked = {name: policy for name, policy in config.approval.items() if policy != "never"}
    return PinnedServer.model_validate(
        {"tools": tools, "for": config.for_, "approval": asked, "session": config.session}
    )


def _pin_row(task_id: str, found: PinnedTools) -> NewMessage:
    row_id = ids.task_tools_id(task_id)
    return NewMessage(
        id=row_id,
        session_id=row_id,
        role="system",
        kind="tools",
        text=found.model_dump_json(by_alias=True),
        task_id=task_id,
    )
