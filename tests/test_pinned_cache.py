"""A task's pinned MCP tool list in the worker's memory: written once and never changed, it is
read from the store once per worker, and the worker keeps only its latest tasks' lists."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from activities._tools import McpTools, PinnedCache, PinnedTools
from errands.adapters.mcp.config import parse_mcp_servers
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore, open_store
from errands.contracts import ids
from errands.contracts.messages import StoredMessage
from errands.settings import Settings
from errands.workers import build_worker
from tests.conftest import ROOT
from tests.helpers import Conversation, delegate, final, pin_tools, start_task

SERVERS = parse_mcp_servers(json.dumps({"files": {"url": "http://127.0.0.1:9/mcp", "for": ["*"]}}))


class ReadsCounted:
    """The store, with the reads of each row counted (every call goes to the store)."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store
        self.reads: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def get(self, message_id: str) -> StoredMessage | None:
        self.reads[message_id] = self.reads.get(message_id, 0) + 1
        return self._store.get(message_id)


def pin(store: SessionStore, task_id: str, tool: str) -> None:
    listed = {"name": tool, "description": f"The {tool} tool.", "input_schema": {"type": "object"}}
    pin_tools(store, task_id, {"files": {"tools": [listed], "for": ["*"]}})


def names(pinned: PinnedTools) -> list[str]:
    return [t.name for t in pinned.offered("general")]


async def test_a_task_list_is_read_from_the_store_once_per_worker(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'sessions.db'}")
    try:
        pin(store, "task-a", "search")
        pin(store, "task-b", "read")
        counted = ReadsCounted(store)
        tools = McpTools(counted, SERVERS)  # type: ignore[arg-type]

        first = [names(await tools.pinned("task-a")) for _ in range(3)]
        other = names(await tools.pinned("task-b"))
    finally:
        store.close()

    assert first == [["mcp__files__search"]] * 3
    assert other == ["mcp__files__read"]
    assert counted.reads == {ids.task_tools_id("task-a"): 1, ids.task_tools_id("task-b"): 1}


def listing(tool: str) -> str:
    """A task's list as stored: the ``files`` server with one tool."""
    return PinnedTools.model_validate(
        {"servers": {"files": {"tools": [{"name": tool, "input_schema": {}}], "for": ["*"]}}}
    ).model_dump_json(by_alias=True)


@pytest.mark.fast
def test_the_worker_keeps_the_lists_of_its_latest_tasks_only() -> None:
    cache = PinnedCache(tasks=2)
    cache.put("a", listing("read"))
    cache.put("b", listing("write"))
    assert cache.get("a") is not None  # now the latest used

    cache.put("c", listing("search"))

    assert cache.get("b") is None
    assert [names(cache.get(t) or PinnedTools()) for t in ("a", "c")] == [
        ["mcp__files__read"],
        ["mcp__files__search"],
    ]


@pytest.mark.fast
def test_tasks_that_pinned_the_same_list_share_one_parsed_copy() -> None:
    cache = PinnedCache()
    first = cache.put("a", listing("read"))

    assert cache.put("b", listing("read")) is first
    assert cache.put("c", listing("write")) is not first
    assert cache.get("b") is first


@pytest.mark.fast
def test_the_lists_held_are_bounded_in_bytes_as_stored() -> None:
    size = len(listing("read"))
    cache = PinnedCache(max_bytes=2 * size + 10)
    for task, tool in (("a", "read"), ("b", "find"), ("a2", "read"), ("c", "list")):
        cache.put(task, listing(tool))

    # Three distinct lists do not fit: the least recently used tasks go until two do. The
    # list two tasks held counts once.
    assert [cache.get(t) is not None for t in ("a", "b", "a2", "c")] == [False, False, True, True]


TINY = [sys.executable, str(ROOT / "tests" / "mcp_tiny_server.py")]


async def test_a_new_task_is_pinned_in_the_steps_own_trip_once_the_listing_is_held(
    tmp_path: Path,
) -> None:
    """Once the worker's pool holds every server's listing, a step of a new task brings the
    task's list to its own trip to the store (``ahead``, no I/O): no read of the row and no
    listing first. A list pinned before (by another worker) still wins."""
    store = open_store(f"sqlite:///{tmp_path / 'sessions.db'}")
    servers = parse_mcp_servers(json.dumps({"tiny": {"command": TINY, "for": ["*"]}}))
    counted = ReadsCounted(store)
    tools = McpTools(counted, servers)  # type: ignore[arg-type]
    try:
        cold = tools.ahead("task-1", "general")
        first = names(await tools.pinned("task-1"))  # lists the server: the pool holds it now

        ahead = tools.ahead("task-2", "general")
        assert ahead is not None and ahead.listed is not None
        second = names(ahead.resolve(tools, "task-2") or PinnedTools())
        held = tools.ahead("task-2", "general")

        listed = {"name": "old", "description": "Pinned before.", "input_schema": {}}
        pin_tools(store, "task-3", {"tiny": {"tools": [listed], "for": ["*"]}})
        racing = tools.ahead("task-3", "general")
        assert racing is not None
        third = names(racing.resolve(tools, "task-3") or PinnedTools())
        nothing = tools.ahead("task-4", "main")  # the server serves no main agent
        stored = store.get(ids.task_tools_id("task-2"))
    finally:
        await tools.aclose()
        store.close()

    assert cold is None  # nothing listed yet: the step lists first, as before
    assert first == second == ["mcp__tiny__count", "mcp__tiny__crash", "mcp__tiny__flood"]
    assert held is not None and held.listed is None and held.known is not None
    assert names(held.known) == second  # the trip left it in the worker's memory
    assert third == ["mcp__tiny__old"]  # the stored list is the task's
    assert nothing is not None and nothing.listed is None and nothing.known is None
    # task-1's row was read once (not found: listed), task-2's and task-3's never.
    assert counted.reads == {ids.task_tools_id("task-1"): 1}
    assert stored is not None and names(PinnedTools.model_validate_json(stored.text)) == second


async def test_a_workers_later_tasks_are_pinned_in_their_branch_steps_own_trip(
    client: Client, settings: Settings, scripted: ScriptedModelServer, tmp_path: Path
) -> None:
    """On a worker: the first task's branch lists the server (after reading the task's row and
    finding none); once the pool holds the listing, the next task's branch pins its list in the
    trip its step makes anyway, without reading the row first, and offers the same tools."""
    store = open_store(f"sqlite:///{tmp_path / 'sessions.db'}")
    counted = ReadsCounted(store)
    own = settings.model_copy(
        update={
            "task_queue": f"pin-trip-{uuid.uuid4().hex[:6]}",
            "mcp_servers": json.dumps({"tiny": {"command": TINY, "for": ["*"]}}),
        }
    )
    offered: list[list[str]] = []

    def branch(request: RecordedRequest) -> Reply:
        offered.append([t["function"]["name"] for t in request.body["tools"]])
        return Reply(text="noted")

    router = ModelRouter(own)
    results = []
    try:
        async with build_worker(client, own, store=counted, router=router):  # type: ignore[arg-type]
            for _ in range(2):
                Conversation([delegate("note it"), final("done")], branch, branches=1).install(
                    scripted, "gpt-pin-trip"
                )
                handle = await start_task(
                    client, own.task_queue, "Note it.", model="openai:gpt-pin-trip"
                )
                results.append(await asyncio.wait_for(handle.result(), 60))
        rows = [store.get(ids.task_tools_id(r.task_id)) for r in results]
    finally:
        await router.aclose()
        store.close()

    assert [r.status for r in results] == ["replied", "replied"]
    # The first task's branch read the row (not found: it listed the server, then pinned), the
    # second's pinned in its trip; the rounds never read it: no server serves the main agent.
    reads = [counted.reads.get(ids.task_tools_id(r.task_id), 0) for r in results]
    assert reads == [1, 0]
    assert all(row is not None for row in rows)
    tiny = ["mcp__tiny__count", "mcp__tiny__crash", "mcp__tiny__flood"]
    assert offered == [tiny, tiny]
