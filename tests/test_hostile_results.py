"""Oversized tool results fit (issue 23, item 5): on a 32,000-token model, one MCP result of
100 KB, 1 MB or 50 MB is shown in the very request that follows it as a preview (its head and
tail, how much was left out, the ``read_message`` call that pages through the rest); a result
over ``ERRANDS_TOOL_RESULT_MAX_BYTES`` is stored cut, and the cut is said in the stored text the
model reads. Each task replies, on SQLite and on PostgreSQL.

The hostile server (tests/mcp_hostile_server.py) answers ``dump(size)`` with ``size`` bytes of
numbered lines; the scripted model (behind the real OpenAI client) calls it, reads what it was
shown, and replies. The assertions read the request that followed the call (what the model was
told, and its size against the window), the stored row, the server's call log and the history.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from errands.adapters.scripted import Call, RecordedRequest, Reply, ScriptedModelServer
from errands.agent.context import MARGIN
from errands.agent.reading import PAGE_CHARS
from errands.contracts import ids
from errands.contracts.messages import StoredMessage
from errands.contracts.rows import ToolResultMeta
from tests.helpers import Conversation, delegate, final, start_task
from tests.store_stacks import Stack, database, stack

__all__ = ["database", "stack"]  # fixtures, imported for pytest

ROOT = Path(__file__).resolve().parent.parent
WINDOW = 32_000
"""The window of a model the catalog does not know (``openai:*``)."""
RESERVED = 4_096
"""The output a round reserves (``ERRANDS_MAX_OUTPUT_TOKENS``'s default)."""
BYTES_PER_TOKEN = 3
"""errands' uncalibrated estimate; the scripted server counts a token per 4 bytes."""
TOOL = "mcp__hostile__dump"
REPLY_WITHIN = 60
"""Seconds a task has to reply: generous; the point is that it replies, not how fast."""
MARKER = re.compile(r"read_message\(result (\d+)\)")


@pytest.fixture(scope="module")
def hostile_dir(tmp_path_factory: pytest.TempPathFactory, database: tuple[str, str]) -> Path:
    """The server's call log, one per backend."""
    return tmp_path_factory.mktemp(f"hostile-{database[0]}")


@pytest.fixture(scope="module")
def mcp_servers(hostile_dir: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "tests.mcp_hostile_server", "--dir", str(hostile_dir)]
    return {"hostile": {"command": command, "cwd": str(ROOT), "timeout_seconds": 110}}


def tool_results(request: RecordedRequest) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "tool"]


def fits_the_window(request: RecordedRequest) -> bool:
    """Whether the request, as sent, fits the model's input budget by errands' own estimate
    (the larger of the two the test knows)."""
    budget = WINDOW * (1 - MARGIN) - RESERVED
    return len(request.raw) / BYTES_PER_TOKEN < budget


def calls_logged(hostile_dir: Path, size: int) -> int:
    path = hostile_dir / "calls.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return sum(1 for line in lines if json.loads(line)["size"] == size)


def stored_result(stack: Stack, task_id: str) -> StoredMessage:
    rows = stack.store.list_session(ids.reads_session_id(task_id))
    found = [r for r in rows if ToolResultMeta.of(r).tool_name == TOOL]
    assert len(found) == 1, [r.id for r in rows]
    return found[0]


async def largest_payload(stack: Stack, task_id: str, client: Any) -> int:
    history = await client.get_workflow_handle(task_id).fetch_history()
    return max(event.ByteSize() for event in history.events)


@pytest.mark.parametrize("size", [100_000, 1_000_000, 50_000_000], ids=["100KB", "1MB", "50MB"])
async def test_an_oversized_result_is_previewed_in_the_next_request_and_the_task_replies(
    client: Any, scripted: ScriptedModelServer, stack: Stack, hostile_dir: Path, size: int
) -> None:
    model = f"hostile-{size}-{stack.backend}"
    scripted.script(model, Reply(calls=[Call(TOOL, {"size": size})]), final("Done."))
    handle = await start_task(
        client, stack.settings.task_queue, "Dump it.", model=f"openai:{model}"
    )
    result = await asyncio.wait_for(handle.result(), REPLY_WITHIN)

    assert result.status == "replied", result.error
    assert result.reply == "Done."
    after = scripted.requests_for(model)[1]
    assert fits_the_window(after), f"{len(after.raw):,} bytes sent to a {WINDOW:,}-token model"
    (shown,) = tool_results(after)
    assert shown.startswith("dump start\nline 0000000000")  # its head
    marker = MARKER.search(shown)
    assert marker is not None, shown[:3000]
    assert "characters are left out here" in shown
    names = [t["function"]["name"] for t in after.body["tools"]]
    assert "read_message" in names, "the model can page through the rest"
    row = stored_result(stack, result.task_id)
    assert int(marker.group(1)) == row.seq
    assert len(row.text.encode()) <= stack.settings.tool_result_max_bytes
    if size > stack.settings.tool_result_max_bytes:
        # Stored cut, and the cut said where the model reads it: the end of the text (the
        # preview's tail).
        assert row.text.endswith("ask the tool for a narrower or paged answer.]")
        assert shown.endswith("ask the tool for a narrower or paged answer.]")
        assert "the rest was dropped" in shown
    else:
        assert len(row.text) == size
        assert shown.endswith("dump end")  # its tail
    assert calls_logged(hostile_dir, size) == 1, "the tool ran once"
    assert await largest_payload(stack, handle.id, client) < 64 * 1024, "by reference"


def page_of(request: RecordedRequest) -> Reply:
    """The model reads page 2 of the result the marker names."""
    (shown,) = tool_results(request)
    marker = MARKER.search(shown)
    assert marker is not None
    return Reply(calls=[Call("read_message", {"result": int(marker.group(1)), "page": 2})])


async def test_read_message_pages_through_a_large_stored_result(
    client: Any, scripted: ScriptedModelServer, stack: Stack
) -> None:
    model = f"hostile-pages-{stack.backend}"
    size = 1_000_000
    scripted.script(model, Reply(calls=[Call(TOOL, {"size": size})]), page_of, final("Read."))
    handle = await start_task(
        client, stack.settings.task_queue, "Dump and read.", model=f"openai:{model}"
    )
    result = await asyncio.wait_for(handle.result(), REPLY_WITHIN)

    assert result.status == "replied", result.error
    last = scripted.requests_for(model)[2]
    assert fits_the_window(last)
    page = tool_results(last)[-1]
    pages = -(-size // PAGE_CHARS)
    assert page.startswith(
        f"(result {stored_result(stack, result.task_id).seq}, page 2 of {pages}: characters "
        f"{PAGE_CHARS + 1:,}-{2 * PAGE_CHARS:,} of {size:,}; page 3 goes on)\n"
    ), page[:200]
    row = stored_result(stack, result.task_id)
    assert page.endswith(row.text[PAGE_CHARS : 2 * PAGE_CHARS])


async def test_results_under_the_share_that_together_overflow_are_previewed_and_the_task_replies(
    client: Any, scripted: ScriptedModelServer, stack: Stack
) -> None:
    # Five results of 18,000 bytes: each under the share (about 19,700 bytes on this model),
    # together past the request's budget. The fitting shortens them all rather than fail.
    model = f"hostile-five-{stack.backend}"
    calls = [Call(TOOL, {"size": 18_000 + k}) for k in range(5)]
    scripted.script(model, Reply(calls=calls), final("Done."))
    handle = await start_task(
        client, stack.settings.task_queue, "Dump five.", model=f"openai:{model}"
    )
    result = await asyncio.wait_for(handle.result(), REPLY_WITHIN)

    assert result.status == "replied", result.error
    after = scripted.requests_for(model)[1]
    assert fits_the_window(after), f"{len(after.raw):,} bytes sent to a {WINDOW:,}-token model"
    shown = tool_results(after)
    assert len(shown) == 5
    assert all(MARKER.search(text) for text in shown), [text[-300:] for text in shown]


async def test_a_branchs_50_mb_result_is_stored_cut_and_previewed_and_the_task_replies(
    client: Any, scripted: ScriptedModelServer, stack: Stack, hostile_dir: Path
) -> None:
    size = 50_000_001  # a size of its own: the call log tells this call from the others
    branch_requests: list[RecordedRequest] = []

    def branch(request: RecordedRequest) -> Reply:
        branch_requests.append(request)
        if tool_results(request):
            return Reply(text="The dump is long; it starts with 'dump start'.")
        return Reply(calls=[Call(TOOL, {"size": size})])

    convo = Conversation([delegate("Dump it."), final("Done.")], branch, branches=2)
    convo.install(scripted, f"hostile-branch-{stack.backend}")
    handle = await start_task(
        client,
        stack.settings.task_queue,
        "Have it dumped.",
        model=f"openai:hostile-branch-{stack.backend}",
    )
    result = await asyncio.wait_for(handle.result(), REPLY_WITHIN)

    assert result.status == "replied", result.error
    after = branch_requests[1]
    assert fits_the_window(after), f"{len(after.raw):,} bytes sent to a {WINDOW:,}-token model"
    (shown,) = tool_results(after)
    assert shown.startswith("dump start")
    assert MARKER.search(shown), "the main agent's format: head, tail, read_message(result N)"
    thread = ids.child_workflow_id(handle.id, 0, 1)
    row = stack.store.get(ids.thread_tool_result_id(thread, 0, 0))
    assert row is not None
    assert len(row.text.encode()) <= stack.settings.tool_result_max_bytes
    assert row.text.endswith("ask the tool for a narrower or paged answer.]")
    assert calls_logged(hostile_dir, size) == 1, "the tool ran once"


async def test_a_branch_reads_its_previewed_result_by_the_number_its_preview_names(
    client: Any, scripted: ScriptedModelServer, stack: Stack
) -> None:
    # The branch's 1 MB result is shown as the main agent's are, in the very request that
    # follows it; read_message(result N) from the branch pages through that same result.
    size = 1_000_003
    branch_requests: list[RecordedRequest] = []

    def branch(request: RecordedRequest) -> Reply:
        branch_requests.append(request)
        if not tool_results(request):
            return Reply(calls=[Call(TOOL, {"size": size})])
        if len(tool_results(request)) == 1:
            return page_of(request)
        return Reply(text="Read page 2.")

    convo = Conversation([delegate("Dump and read."), final("Done.")], branch, branches=3)
    convo.install(scripted, f"hostile-branch-read-{stack.backend}")
    handle = await start_task(
        client,
        stack.settings.task_queue,
        "Have it dumped and read.",
        model=f"openai:hostile-branch-read-{stack.backend}",
    )
    result = await asyncio.wait_for(handle.result(), REPLY_WITHIN)

    assert result.status == "replied", result.error
    thread = ids.child_workflow_id(handle.id, 0, 1)
    row = stack.store.get(ids.thread_tool_result_id(thread, 0, 0))
    assert row is not None and len(row.text) == size
    after = branch_requests[1]
    assert fits_the_window(after), f"{len(after.raw):,} bytes sent to a {WINDOW:,}-token model"
    (shown,) = tool_results(after)
    assert shown.startswith("dump start\nline 0000000000")  # its head
    assert shown.endswith("dump end")  # its tail
    assert "characters are left out here" in shown
    marker = MARKER.search(shown)
    assert marker is not None and int(marker.group(1)) == row.seq
    read = branch_requests[2]
    assert fits_the_window(read)
    page = tool_results(read)[-1]
    pages = -(-size // PAGE_CHARS)
    assert page.startswith(
        f"(result {row.seq}, page 2 of {pages}: characters "
        f"{PAGE_CHARS + 1:,}-{2 * PAGE_CHARS:,} of {size:,}; page 3 goes on)\n"
    ), page[:200]
    assert page.endswith(row.text[PAGE_CHARS : 2 * PAGE_CHARS])
    stored_page = stack.store.get(ids.thread_tool_result_id(thread, 1, 0))
    assert stored_page is not None and stored_page.text == page
