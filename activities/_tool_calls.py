"""Tool-call activities: one work-tool call of the main agent (``run_round_tool``) or of a
branch (``run_branch_tool``), run once and settled once.

A call is run (or, with a verdict, refused: denied, unanswered, no one to ask), its result is
stored under the call's deterministic id and logged (``tool_requested``, ``tool_finished``,
``tool_denied``). A retried attempt finds the stored result and runs nothing; a call cancelled at
the workflow's request stores a "cancelled" result, so no stored thread holds a call without
one. Python tools run in the worker; MCP tools through the task's pinned list
(``activities._tools``). A tool's failure is the model's to read; only an MCP server that cannot
be reached is raised, for Temporal to retry, until the last attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities._events import branch_of
from activities._heartbeats import heartbeating
from activities._mcp_sessions import ELSEWHERE
from activities._threads import read_stored
from activities._tool_records import Settling, ToolEvents, ToolResult, settled_before
from activities._tools import (
    MAIN,
    McpTools,
    OfferedTool,
    PinnedTools,
    arguments_of,
    session_scope,
)
from errands.adapters.store import SessionStore, store_work
from errands.agent import prompts, reading
from errands.agent.subtask_types import SubtaskType, WorkTool
from errands.contracts import ids
from errands.contracts.activities import (
    CloseSessionsInput,
    McpHolder,
    RunRoundToolInput,
    RunToolInput,
    RunToolOutput,
    SessionRouting,
)
from errands.contracts.messages import ToolCall
from errands.contracts.rows import StepMeta


async def pinned_for(mcp: McpTools, task_id: str, key: str) -> PinnedTools | None:
    """The task's MCP tool list, when a server serves ``key`` (listed on first use)."""
    if not task_id or not mcp.serve(key):
        return None
    return await mcp.pinned(task_id)


def cancel_requested() -> bool:
    """Whether the activity is cancelled because its workflow asked (the task or branch was
    cancelled), not because its worker shuts down or its attempt timed out: only then is the
    call's result "cancelled" for good; otherwise another attempt runs it."""
    details = activity.cancellation_details()
    return details is not None and details.cancel_requested


@dataclass(frozen=True)
class Ran:
    """What one call came back with: the text the model reads, whether it is an error, and the
    stateful MCP session it ran in (if any)."""

    text: str
    is_error: bool
    holder: McpHolder | None = None


@dataclass(frozen=True)
class Where:
    """Whose call it is, for a stateful MCP session's scope, and how it reached this worker."""

    task_id: str
    thread_id: str | None
    """The branch's thread; None for the main agent."""
    routing: SessionRouting


class ToolActivities:
    def __init__(
        self,
        store: SessionStore,
        types: dict[str, SubtaskType],
        mcp_tools: McpTools | None = None,
        main_tools: Sequence[WorkTool] = (),
        *,
        result_max_bytes: int,
    ) -> None:
        self._store = store
        self._types = types
        self._mcp = mcp_tools if mcp_tools is not None else McpTools(store, {})
        self._main_tools = {t.spec.name: t for t in main_tools}
        """The main agent's Python tools, by name."""
        self._result_max_bytes = result_max_bytes
        """The most bytes of one result stored (``ERRANDS_TOOL_RESULT_MAX_BYTES``)."""

    async def _pinned(self, task_id: str, key: str) -> PinnedTools | None:
        return await pinned_for(self._mcp, task_id, key)

    @activity.defn(name="run_branch_tool")
    async def run_branch_tool(self, data: RunToolInput) -> RunToolOutput:
        return await heartbeating(self._run_branch_tool(data))

    async def _run_branch_tool(self, data: RunToolInput) -> RunToolOutput:
        result_id = ids.thread_tool_result_id(data.thread_id, data.step, data.call_index)

        def found() -> RunToolOutput | Settling:
            existing = self._store.get(result_id)
            if existing is not None:
                return settled_before(existing)
            step = self._store.get(ids.thread_step_id(data.thread_id, data.step))
            if step is None:
                raise ApplicationError(
                    f"step {data.step} of {data.thread_id} is missing",
                    type="internal",
                    non_retryable=True,
                )
            call = StepMeta.of(step).tool_calls[data.call_index]
            where = branch_of(data.thread_id)
            return Settling(
                ToolEvents(data.task_id, where, result_id, call, data.by),
                ToolResult(result_id, data.thread_id, call),
                data.verdict,
                data.approved,
            )

        return await self._settle(found, lambda s: self._run_tool(data, s.result.call, result_id))

    async def _settle(
        self,
        found: Callable[[], RunToolOutput | Settling],
        run: Callable[[Settling], Awaitable[Ran]],
    ) -> RunToolOutput:
        """Run one tool call (with a verdict, only say why it is not run), store its result
        once and log it: one visit to the store (``store_work``) before the run (``found``: what
        an earlier attempt stored, else the call to settle, and its request logged) and one after
        (the result and its last event, in one transaction). Cancelled with the call open, at
        the workflow's request, the call gets a "cancelled" result, so no stored thread holds a
        call without one."""
        trip = asyncio.ensure_future(store_work(self._store, self._found, found))
        try:
            settling = await asyncio.shield(trip)
        except asyncio.CancelledError:
            # Work sent to a thread goes on there, and may log the request: settle what it
            # found.
            if isinstance(late := await trip, Settling):
                await self._cancelled(late.result)
            raise
        if isinstance(settling, RunToolOutput):
            return settling
        events, result, holder = settling.events, settling.result, None
        try:
            if settling.verdict is not None:
                text, is_error = settling.verdict, True  # not run: denied, unanswered, cancelled
                last = events.denied(text)
            else:
                ran = await run(settling)
                text, is_error, holder = ran.text, ran.is_error, ran.holder
                text = reading.capped_result(text, self._result_max_bytes)
                last = events.finished(text, is_error)
        except asyncio.CancelledError:
            await self._cancelled(result)
            raise
        await store_work(self._store, self._store.append_once, result.message(text, is_error), last)
        return RunToolOutput(ok=not is_error, chars=len(text), holder=holder)

    async def _cancelled(self, result: ToolResult) -> None:
        """A call cancelled at the workflow's request gets a "cancelled" result for good (one
        cancelled otherwise is run by another attempt)."""
        if cancel_requested():
            cancelled = result.message(prompts.TOOL_CANCELLED, True)
            await asyncio.shield(store_work(self._store, self._store.append_once, cancelled))

    def _found(self, found: Callable[[], RunToolOutput | Settling]) -> RunToolOutput | Settling:
        """``found``, and the request of a call that runs logged, written once however often
        asked. Blocking."""
        settling = found()
        if isinstance(settling, Settling) and settling.verdict is None:
            self._store.append_events(settling.events.requested(approved=settling.approved))
        return settling

    async def _run_tool(self, data: RunToolInput, call: ToolCall, key: str) -> Ran:
        """The text the model reads for ``call``, and whether it is an error. Raises (for
        Temporal to retry) only when an MCP server cannot be reached on an attempt before the
        last."""
        tools = {t.spec.name: t for t in self._types[data.subtask_type].tools}
        if call.name == reading.READ_MESSAGE and call.name not in tools:
            # A branch's tool results are rows of its thread: `result N` and `ref N` are one row.
            thread = data.thread_id
            return Ran(
                *await store_work(
                    self._store, read_stored, self._store, thread, thread, call.arguments
                )
            )
        pinned = await self._pinned(data.task_id, data.subtask_type)
        offered = {t.name: t for t in pinned.offered(data.subtask_type)} if pinned else {}
        if call.name not in tools and call.name not in offered:
            available = sorted([*tools, *offered])
            return Ran(f"There is no tool named {call.name!r}; available: {available}.", True)
        arguments = arguments_of(call.arguments)
        if isinstance(arguments, str):
            return Ran(f"{call.name}: {arguments}; call {call.name} again.", True)
        if call.name in tools:
            tool = tools[call.name]
            return Ran(*await self._run_python(tool, call.name, arguments, data.timeout_seconds))
        where = Where(data.task_id, data.thread_id, data.routing)
        return await self._call_mcp(
            offered[call.name], arguments, key, data.timeout_seconds, data.max_attempts, where
        )

    async def _call_mcp(
        self,
        tool: OfferedTool,
        arguments: dict[str, object],
        key: str,
        timeout: float,
        max_attempts: int,
        where: Where,
    ) -> Ran:
        """An MCP call's text and whether it is an error. A server that cannot be reached is
        raised for Temporal to retry, except on the last attempt, which tells the model (and a
        call sent to its session's holder, which has only one). A call whose session another
        worker holds is sent there (``session_elsewhere``)."""
        routing = where.routing
        try:
            outcome, holder = await self._mcp.call(
                tool,
                arguments,
                key=key,
                timeout=timeout,
                max_bytes=self._result_max_bytes,
                scope=session_scope(tool, where.task_id, where.thread_id),
                routing=routing,
            )
        except TimeoutError as error:
            return Ran(prompts.tool_timed_out(tool.name, str(error)), True)
        except ConnectionError as error:
            attempt = activity.info().attempt
            if attempt < max_attempts and routing.holder is None:
                raise ApplicationError(str(error), type="tool_unreachable") from None
            return Ran(prompts.tool_unreachable(tool.name, attempt, str(error)), True)
        except ApplicationError as error:
            if error.type == ELSEWHERE:
                raise
            return Ran(f"{tool.name} failed: {error}", True)
        except Exception as error:  # noqa: BLE001 - not retried: the tool may have run
            return Ran(f"{tool.name} failed: {type(error).__name__}: {error}", True)
        return Ran(outcome.text, outcome.is_error, holder)

    @activity.defn(name="close_mcp_sessions")
    async def close_mcp_sessions(self, data: CloseSessionsInput) -> int:
        """Close this worker's stateful MCP sessions of ``data.scopes`` (sent to the holder's
        own queue when their task or branch ends): how many were open."""
        return await self._mcp.close_scopes(data.scopes)

    @activity.defn(name="run_round_tool")
    async def run_round_tool(self, data: RunRoundToolInput) -> RunToolOutput:
        """One MCP call of the main agent. Its result is stored in the task's results session
        under ``data.result_id`` and reaches the next step by reference, never through history."""
        return await heartbeating(self._run_round_tool(data))

    async def _run_round_tool(self, data: RunRoundToolInput) -> RunToolOutput:
        def found() -> RunToolOutput | Settling:
            existing = self._store.get(data.result_id)
            if existing is not None:
                return settled_before(existing)
            return Settling(
                ToolEvents(data.task_id, MAIN, data.result_id, data.call, data.by),
                ToolResult(
                    data.result_id, ids.reads_session_id(data.task_id), data.call, data.task_id
                ),
                data.verdict,
                data.approved,
            )

        return await self._settle(found, lambda _: self._round_tool(data))

    async def _round_tool(self, data: RunRoundToolInput) -> Ran:
        python = self._main_tools.get(data.call.name)
        if python is not None:
            arguments = arguments_of(data.call.arguments)
            if isinstance(arguments, str):
                return Ran(f"{data.call.name}: {arguments}; call {data.call.name} again.", True)
            return Ran(
                *await self._run_python(python, data.call.name, arguments, data.timeout_seconds)
            )
        pinned = await self._pinned(data.task_id, MAIN)
        offered = {t.name: t for t in pinned.offered(MAIN)} if pinned else {}
        tool = offered.get(data.call.name)
        if tool is None:
            available = sorted(offered)
            return Ran(f"There is no tool named {data.call.name!r}; available: {available}.", True)
        arguments = arguments_of(data.call.arguments)
        if isinstance(arguments, str):
            return Ran(f"{tool.name}: {arguments}; call {tool.name} again.", True)
        where = Where(data.task_id, None, data.routing)
        return await self._call_mcp(
            tool, arguments, data.result_id, data.timeout_seconds, data.max_attempts, where
        )

    @staticmethod
    async def _run_python(
        tool: WorkTool, name: str, arguments: dict[str, object], timeout: float
    ) -> tuple[str, bool]:
        """A Python tool's text; its exception, or its running out of time, as an error."""
        scope = asyncio.timeout(timeout)
        try:
            async with scope:
                return await tool(arguments), False
        except Exception as error:  # noqa: BLE001 - a tool's failure is the model's to read
            if scope.expired():
                limit = f"it did not finish within {timeout:g} s"
                return prompts.tool_timed_out(name, limit), True
            return f"{name} failed: {type(error).__name__}: {error}", True
