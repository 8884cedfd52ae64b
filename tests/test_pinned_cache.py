"""A task's pinned MCP tool list in the worker's memory: written once and never changed, it is
read from the store once per worker, and the worker keeps only its latest tasks' lists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from activities._tools import McpTools, PinnedCache, PinnedTools
from errands.adapters.mcp.config import parse_mcp_servers
from errands.adapters.store import SessionStore, open_store
from errands.contracts import ids
from errands.contracts.messages import StoredMessage
from tests.helpers import pin_tools

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
