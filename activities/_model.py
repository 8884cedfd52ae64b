"""Model-calling activities. Each provider call is one activity attempt: Temporal owns retries,
the SDK clients have theirs off, and provider errors are classified once at this boundary."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities._calls import ModelCall
from activities._context import ContextFitter, SessionView, session_view
from activities._events import branch_of, preview, record
from activities._heartbeats import heartbeating
from activities._requests import round_request
from activities._threads import open_threads, read_stored, thread_messages, write_branch_row
from activities._tools import (
    MAIN,
    McpTools,
    OfferedTool,
    PinnedTools,
    approvals_needed,
    arguments_of,
)
from errands.adapters.routing import ModelRouter
from errands.adapters.store import SessionStore
from errands.agent import context, prompts, reading
from errands.agent.control import FINAL_REPLY, REPLY_FIELD
from errands.agent.subtask_types import SubtaskType, WorkTool
from errands.contracts import ids
from errands.contracts.activities import (
    BranchStepInput,
    BranchStepOutput,
    OpenBranchInput,
    RecordBranchInput,
    RoundStepInput,
    RoundStepOutput,
    RunRoundToolInput,
    RunToolInput,
    RunToolOutput,
)
from errands.contracts.approvals import ApprovalNeed
from errands.contracts.events import NewEvent
from errands.contracts.messages import Message, ModelRequest, NewMessage, StoredMessage, ToolCall


def compactions(store: SessionStore, task_id: str, where: str) -> Callable[[StoredMessage], None]:
    """What logs each compaction summary a step's fitting stores."""

    def log(summary: StoredMessage) -> None:
        key = f"{summary.id}:compaction"
        covers = summary.meta.get("covers")
        record(store, task_id, key, "compaction", summary.id, where=where, covers=covers)

    return log


def delivered(store: SessionStore, task_id: str, message_ids: list[str]) -> None:
    """The ``message_delivered`` events of the user's messages a step shows for the first time."""
    for message_id in message_ids:
        key = f"{message_id}:delivered"
        record(
            store,
            task_id,
            key,
            "message_delivered",
            message_id,
            message_id=message_id,
            outcome="delivered",
        )


def cancel_requested() -> bool:
    """Whether the activity is cancelled because its workflow asked (the task or branch was
    cancelled), not because its worker shuts down or its attempt timed out: only then is the
    call's result "cancelled" for good; otherwise another attempt runs it."""
    details = activity.cancellation_details()
    return details is not None and details.cancel_requested


class ToolEvents:
    """The ``tool_requested`` and ``tool_finished`` events of one tool call."""

    def __init__(
        self, store: SessionStore, task_id: str, where: str, call_id: str, call: ToolCall
    ) -> None:
        self._store, self._task_id, self._where = store, task_id, where
        self._call_id, self._call = call_id, call

    async def denied(self, text: str) -> None:
        """Not run: denied, not answered in time, no one to ask, cancelled or failed."""
        await asyncio.to_thread(
            record,
            self._store,
            self._task_id,
            f"{self._call_id}:denied",
            "tool_denied",
            self._call_id,
            where=self._where,
            tool=self._call.name,
            reason=preview(text),
        )

    async def requested(self, *, approved: bool) -> None:
        if approved:
            await asyncio.to_thread(
                record,
                self._store,
                self._task_id,
                f"{self._call_id}:approved",
                "tool_approved",
                self._call_id,
                where=self._where,
                tool=self._call.name,
            )
        await asyncio.to_thread(
            record,
            self._store,
            self._task_id,
            f"{self._call_id}:requested",
            "tool_requested",
            self._call_id,
            where=self._where,
            tool=self._call.name,
            arguments=preview(self._call.arguments),
        )

    async def finished(self, text: str, is_error: bool) -> None:
        await asyncio.to_thread(
            record,
            self._store,
            self._task_id,
            f"{self._call_id}:finished",
            "tool_finished",
            self._call_id,
            where=self._where,
            tool=self._call.name,
            is_error=is_error,
            chars=len(text),
        )


@dataclass(frozen=True)
class ToolResult:
    """Where one tool call's result is stored: the row ``message`` builds."""

    id: str
    session_id: str
    call: ToolCall
    task_id: str | None = None

    def message(self, text: str, is_error: bool) -> NewMessage:
        call = self.call
        return NewMessage(
            id=self.id,
            session_id=self.session_id,
            role="tool",
            kind="tool_result",
            text=text,
            task_id=self.task_id,
            meta={"tool_call_id": call.id, "tool_name": call.name, "is_error": is_error},
        )


class ModelActivities:
    def __init__(
        self,
        store: SessionStore,
        router: ModelRouter,
        types: dict[str, SubtaskType],
        mcp_tools: McpTools | None = None,
        main_tools: Sequence[WorkTool] = (),
    ) -> None:
        self._store = store
        self._router = router
        self._types = types
        self._fitter = ContextFitter(store, router)
        self._mcp = mcp_tools if mcp_tools is not None else McpTools(store, {})
        self._main_tools = {t.spec.name: t for t in main_tools}
        """The main agent's Python tools, by name."""

    @activity.defn(name="round_step")
    async def round_step(self, data: RoundStepInput) -> RoundStepOutput:
        return await heartbeating(self._round_step(data))

    async def _round_step(self, data: RoundStepInput) -> RoundStepOutput:
        offered: list[OfferedTool] = []
        work_tools: list[str] = []
        if data.work_tools and data.final_reason is None:
            # Listed (and pinned) before the request is built: round_request reads the pin.
            pinned = await self._pinned(data.task_id, MAIN)
            offered = pinned.offered(MAIN) if pinned is not None else []
            work_tools = [*self._main_tools, *(t.name for t in offered)]
        main_tools = list(self._main_tools.values())
        fitting = self._fitter.fitting(
            data.model,
            lambda previews: round_request(self._store, self._types, data, previews, main_tools),
            log=compactions(self._store, data.task_id, MAIN),
        )
        await asyncio.to_thread(delivered, self._store, data.task_id, data.delivers)
        call = ModelCall(
            self._store,
            data.task_id,
            MAIN,
            data.step,
            data.model,
            calls={FINAL_REPLY: REPLY_FIELD},  # the reply, as the model writes it
        )
        async with call:
            response, catalog_size = await fitting.complete(self._router, call.take)
            await call.write(await call.finished(response.usage))
        approvals = await asyncio.to_thread(
            approvals_needed,
            self._store,
            data.session_id,
            offered,
            response.tool_calls,
            response.text,
        )
        return RoundStepOutput(
            response=response,
            catalog_size=catalog_size,
            attempt=activity.info().attempt,
            compaction=fitting.spent if fitting.spent.calls else None,
            view=fitting.pinned(),
            work_tools=work_tools,
            approvals=approvals,
        )

    @activity.defn(name="open_branch")
    async def open_branch(self, data: OpenBranchInput) -> None:
        """Start a branch's own thread: its instructions and the messages it cites, verbatim."""
        await asyncio.to_thread(open_threads, self._store, [data])

    @activity.defn(name="branch_step")
    async def branch_step(self, data: BranchStepInput) -> BranchStepOutput:
        """One model step of a branch. Its first step opens the thread and the step that ends
        the branch writes its row, so a one-step branch costs a single activity. The store is
        visited twice: once to read the thread before the call, once to write after it."""
        return await heartbeating(self._branch_step(data))

    async def _branch_step(self, data: BranchStepInput) -> BranchStepOutput:
        stored = await asyncio.to_thread(self._stored_step, data)
        pinned = await self._pinned(data.task_id, data.subtask_type)
        if stored is not None:
            # Written by an attempt that died before reporting: never ask the model again.
            calls = stored.meta.get("tool_calls", [])
            if not calls and data.record is not None:
                await asyncio.to_thread(
                    write_branch_row, self._store, data.record, last_step=stored.text
                )
            return BranchStepOutput(
                tool_calls=len(calls),
                text_chars=len(stored.text),
                usage=stored.meta.get("usage", {}),
                model=stored.meta.get("model", data.model),
                replayed=True,
                approvals=await self._approvals(
                    data, pinned, [ToolCall(**c) for c in calls], stored.text
                ),
            )
        fitting = self._fitter.fitting(
            data.model,
            lambda previews: self._branch_request(data, previews, pinned),
            log=compactions(self._store, data.task_id, branch_of(data.thread_id)),
        )
        where = branch_of(data.thread_id)
        call = ModelCall(self._store, data.task_id, where, data.step, data.model, answer_text=True)
        async with call:
            response, _ = await fitting.complete(self._router, call.take)
            finished = await call.finished(response.usage)
        step = NewMessage(
            id=ids.thread_step_id(data.thread_id, data.step),
            session_id=data.thread_id,
            role="assistant",
            kind="step",
            text=response.text,
            meta={
                # Only tools this type offers may run; anything else is answered as an error.
                "tool_calls": [c.model_dump() for c in response.tool_calls],
                "usage": response.usage.model_dump(),
                "model": data.model,
            },
        )
        record = data.record if not response.tool_calls else None
        # The call's last events go with its step: one transaction.
        await asyncio.to_thread(self._write_step, step, record, finished)
        return BranchStepOutput(
            tool_calls=len(response.tool_calls),
            text_chars=len(response.text),
            usage=response.usage,
            model=data.model,
            attempt=activity.info().attempt,
            compaction=fitting.spent if fitting.spent.calls else None,
            approvals=await self._approvals(data, pinned, response.tool_calls, response.text),
        )

    async def _approvals(
        self, data: BranchStepInput, pinned: PinnedTools | None, calls: list[ToolCall], why: str
    ) -> list[ApprovalNeed]:
        if pinned is None or not calls:
            return []
        offered = pinned.offered(data.subtask_type)
        return await asyncio.to_thread(
            approvals_needed, self._store, data.session_id, offered, calls, why
        )

    def _stored_step(self, data: BranchStepInput) -> StoredMessage | None:
        """The step already stored by an earlier attempt (opening the thread first on a
        branch's first step, which is usually opened already, with the acknowledgement)."""
        if data.open is not None:
            open_threads(self._store, [data.open])
        return self._store.get(ids.thread_step_id(data.thread_id, data.step))

    async def _pinned(self, task_id: str, subtask_type: str) -> PinnedTools | None:
        """The task's MCP tool list, when a server serves this type (listed on first use)."""
        if not task_id or not self._mcp.serve(subtask_type):
            return None
        return await self._mcp.pinned(task_id)

    def _branch_request(
        self, data: BranchStepInput, previews: int, pinned: PinnedTools | None = None
    ) -> tuple[ModelRequest, int, SessionView]:
        """The step's request from the thread as stored: its opening (always word for word),
        the latest compaction summary of the thread, and the steps after it, with bulky tool
        results as previews to the level asked (``errands.agent.reading``). Blocking."""
        opening = self._store.get(ids.thread_instructions_id(data.thread_id))
        view = session_view(self._store, data.thread_id, None)
        rows = [r for r in view.rows if opening is None or r.id != opening.id]
        if view.summary is not None:
            # Results whose call was folded into the summary (a piece may end mid-step).
            while rows and rows[0].kind == "tool_result":
                rows.pop(0)
        latest_step = max((r.seq for r in rows if r.kind == "step"), default=0)
        shortened = 0
        shown: list[StoredMessage] = []
        for row in rows:
            older = row.seq < latest_step
            if (
                (previews == reading.ALL or (previews == reading.OLDER and older))
                and row.kind == "tool_result"
                and row.meta.get("tool_name") != reading.READ_MESSAGE  # what was asked for
                and len(row.text) > reading.PREVIEW_OVER
            ):
                row = row.model_copy(update={"text": reading.preview(row.text, row.seq)})
                shortened += 1
            shown.append(row)
        messages = thread_messages([opening] if opening else [])
        compactable = thread_messages(shown)
        if view.summary is not None:
            summary = Message(role="user", text=prompts.summary_message(view.summary.text))
            compactable.insert(0, summary)
        messages += compactable
        subtask_type = self._types[data.subtask_type]
        if data.last_step:
            messages.append(Message(role="user", text=prompts.BRANCH_LAST_STEP))
        # Its own tools, then the MCP servers' (pinned for the task), then read_message.
        tools = [t.spec for t in subtask_type.tools]
        system = subtask_type.instructions
        if pinned is not None:
            tools += [t.spec() for t in pinned.offered(data.subtask_type)]
            system += prompts.tools_unavailable(pinned.unavailable(data.subtask_type))
        if shortened or any(r.meta.get("tool_name") == reading.READ_MESSAGE for r in rows):
            tools.append(reading.read_message_spec())
        request = ModelRequest(
            system=system,
            messages=messages,
            tools=[] if data.last_step else tools,
            tool_choice="auto",
            max_output_tokens=data.max_output_tokens,
        )
        shown_bytes = context.messages_bytes(compactable)
        return request, 0, SessionView(data.thread_id, view.summary, rows, shown_bytes)

    def _write_step(
        self, step: NewMessage, record: RecordBranchInput | None, events: list[NewEvent]
    ) -> None:
        self._store.append_once(step, events)
        if record is not None:
            write_branch_row(self._store, record, last_step=step.text)

    @activity.defn(name="run_branch_tool")
    async def run_branch_tool(self, data: RunToolInput) -> RunToolOutput:
        return await heartbeating(self._run_branch_tool(data))

    async def _run_branch_tool(self, data: RunToolInput) -> RunToolOutput:
        result_id = ids.thread_tool_result_id(data.thread_id, data.step, data.call_index)
        existing = await asyncio.to_thread(self._store.get, result_id)
        if existing is not None:
            return RunToolOutput(ok=not existing.meta.get("is_error"), chars=len(existing.text))
        step = await asyncio.to_thread(
            self._store.get, ids.thread_step_id(data.thread_id, data.step)
        )
        if step is None:
            raise ApplicationError(
                f"step {data.step} of {data.thread_id} is missing",
                type="internal",
                non_retryable=True,
            )
        call = ToolCall(**step.meta["tool_calls"][data.call_index])
        return await self._settle(
            ToolEvents(self._store, data.task_id, branch_of(data.thread_id), result_id, call),
            ToolResult(result_id, data.thread_id, call),
            data.verdict,
            data.approved,
            lambda: self._run_tool(data, call, result_id),
        )

    async def _settle(
        self,
        events: ToolEvents,
        result: ToolResult,
        verdict: str | None,
        approved: bool,
        run: Callable[[], Awaitable[tuple[str, bool]]],
    ) -> RunToolOutput:
        """Run one tool call (with a ``verdict``, only say why it is not run), store its result
        once and log it. Cancelled with the call open, at the workflow's request, the call gets
        a "cancelled" result, so no stored thread holds a call without one."""
        try:
            if verdict is not None:
                text, is_error = verdict, True  # not run: denied, unanswered or cancelled
                await events.denied(text)
            else:
                await events.requested(approved=approved)
                text, is_error = await run()
        except asyncio.CancelledError:
            if cancel_requested():
                cancelled = result.message(prompts.TOOL_CANCELLED, True)
                await asyncio.shield(asyncio.to_thread(self._store.append_once, cancelled))
            raise
        await asyncio.to_thread(self._store.append_once, result.message(text, is_error))
        if verdict is None:
            await events.finished(text, is_error)
        return RunToolOutput(ok=not is_error, chars=len(text))

    async def _run_tool(self, data: RunToolInput, call: ToolCall, key: str) -> tuple[str, bool]:
        """The text the model reads for ``call``, and whether it is an error. Raises (for
        Temporal to retry) only when an MCP server cannot be reached on an attempt before the
        last."""
        tools = {t.spec.name: t for t in self._types[data.subtask_type].tools}
        if call.name == reading.READ_MESSAGE and call.name not in tools:
            return await asyncio.to_thread(read_stored, self._store, data.thread_id, call.arguments)
        pinned = await self._pinned(data.task_id, data.subtask_type)
        offered = {t.name: t for t in pinned.offered(data.subtask_type)} if pinned else {}
        if call.name not in tools and call.name not in offered:
            available = sorted([*tools, *offered])
            return f"There is no tool named {call.name!r}; available: {available}.", True
        arguments = arguments_of(call.arguments)
        if isinstance(arguments, str):
            return f"{call.name}: {arguments}; call {call.name} again.", True
        if call.name in tools:
            tool = tools[call.name]
            return await self._run_python(tool, call.name, arguments, data.timeout_seconds)
        return await self._call_mcp(
            offered[call.name], arguments, key, data.timeout_seconds, data.max_attempts
        )

    async def _call_mcp(
        self,
        tool: OfferedTool,
        arguments: dict[str, object],
        key: str,
        timeout: float,
        max_attempts: int,
    ) -> tuple[str, bool]:
        """An MCP call's text and whether it is an error. A server that cannot be reached is
        raised for Temporal to retry, except on the last attempt, which tells the model."""
        try:
            outcome = await self._mcp.call(tool, arguments, key=key, timeout=timeout)
        except TimeoutError as error:
            return prompts.tool_timed_out(tool.name, str(error)), True
        except ConnectionError as error:
            attempt = activity.info().attempt
            if attempt < max_attempts:
                raise ApplicationError(str(error), type="tool_unreachable") from None
            return prompts.tool_unreachable(tool.name, attempt, str(error)), True
        except Exception as error:  # noqa: BLE001 - not retried: the tool may have run
            return f"{tool.name} failed: {type(error).__name__}: {error}", True
        return outcome.text, outcome.is_error

    @activity.defn(name="run_round_tool")
    async def run_round_tool(self, data: RunRoundToolInput) -> RunToolOutput:
        """One MCP call of the main agent. Its result is stored in the task's results session
        under ``data.result_id`` and reaches the next step by reference, never through history."""
        return await heartbeating(self._run_round_tool(data))

    async def _run_round_tool(self, data: RunRoundToolInput) -> RunToolOutput:
        existing = await asyncio.to_thread(self._store.get, data.result_id)
        if existing is not None:
            return RunToolOutput(ok=not existing.meta.get("is_error"), chars=len(existing.text))
        return await self._settle(
            ToolEvents(self._store, data.task_id, MAIN, data.result_id, data.call),
            ToolResult(data.result_id, ids.reads_session_id(data.task_id), data.call, data.task_id),
            data.verdict,
            data.approved,
            lambda: self._round_tool(data),
        )

    async def _round_tool(self, data: RunRoundToolInput) -> tuple[str, bool]:
        python = self._main_tools.get(data.call.name)
        if python is not None:
            arguments = arguments_of(data.call.arguments)
            if isinstance(arguments, str):
                return f"{data.call.name}: {arguments}; call {data.call.name} again.", True
            return await self._run_python(python, data.call.name, arguments, data.timeout_seconds)
        pinned = await self._pinned(data.task_id, MAIN)
        offered = {t.name: t for t in pinned.offered(MAIN)} if pinned else {}
        tool = offered.get(data.call.name)
        if tool is None:
            return f"There is no tool named {data.call.name!r}; available: {sorted(offered)}.", True
        arguments = arguments_of(data.call.arguments)
        if isinstance(arguments, str):
            return f"{tool.name}: {arguments}; call {tool.name} again.", True
        return await self._call_mcp(
            tool, arguments, data.result_id, data.timeout_seconds, data.max_attempts
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
