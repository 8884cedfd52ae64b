"""Model-calling activities. Each provider call is one activity attempt: Temporal owns retries,
the SDK clients have theirs off, and provider errors are classified once at this boundary."""

from __future__ import annotations

import asyncio
import json

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities._context import ContextFitter, SessionView, session_view
from activities._heartbeats import heartbeating
from activities._requests import round_request
from activities._threads import open_threads, read_stored, thread_messages, write_branch_row
from errands import context, ids, prompts, reading
from errands.activity_io import (
    BranchStepInput,
    BranchStepOutput,
    OpenBranchInput,
    RecordBranchInput,
    RoundStepInput,
    RoundStepOutput,
    RunToolInput,
    RunToolOutput,
)
from errands.contracts import Message, ModelRequest, NewMessage, StoredMessage, ToolCall
from errands.routing import ModelRouter
from errands.store import SessionStore
from errands.subtask_types import SubtaskType


class ModelActivities:
    def __init__(
        self, store: SessionStore, router: ModelRouter, types: dict[str, SubtaskType]
    ) -> None:
        self._store = store
        self._router = router
        self._types = types
        self._fitter = ContextFitter(store, router)

    @activity.defn(name="round_step")
    async def round_step(self, data: RoundStepInput) -> RoundStepOutput:
        return await heartbeating(self._round_step(data))

    async def _round_step(self, data: RoundStepInput) -> RoundStepOutput:
        fitting = self._fitter.fitting(
            data.model, lambda previews: round_request(self._store, self._types, data, previews)
        )
        response, catalog_size = await fitting.complete(self._router)
        return RoundStepOutput(
            response=response,
            catalog_size=catalog_size,
            attempt=activity.info().attempt,
            compaction=fitting.spent if fitting.spent.calls else None,
            view=fitting.pinned(),
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
            )
        fitting = self._fitter.fitting(
            data.model, lambda previews: self._branch_request(data, previews)
        )
        response, _ = await fitting.complete(self._router)
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
        await asyncio.to_thread(self._write_step, step, record)
        return BranchStepOutput(
            tool_calls=len(response.tool_calls),
            text_chars=len(response.text),
            usage=response.usage,
            model=data.model,
            attempt=activity.info().attempt,
            compaction=fitting.spent if fitting.spent.calls else None,
        )

    def _stored_step(self, data: BranchStepInput) -> StoredMessage | None:
        """The step already stored by an earlier attempt (opening the thread first on a
        branch's first step, which is usually opened already, with the acknowledgement)."""
        if data.open is not None:
            open_threads(self._store, [data.open])
        return self._store.get(ids.thread_step_id(data.thread_id, data.step))

    def _branch_request(
        self, data: BranchStepInput, previews: int
    ) -> tuple[ModelRequest, int, SessionView]:
        """The step's request from the thread as stored: its opening (always word for word),
        the latest compaction summary of the thread, and the steps after it, with bulky tool
        results as previews to the level asked (``errands.reading``). Blocking."""
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
        tools = [t.spec for t in subtask_type.tools]
        if shortened or any(r.meta.get("tool_name") == reading.READ_MESSAGE for r in rows):
            tools.append(reading.read_message_spec())
        request = ModelRequest(
            system=subtask_type.instructions,
            messages=messages,
            tools=[] if data.last_step else tools,
            tool_choice="auto",
            max_output_tokens=data.max_output_tokens,
        )
        shown_bytes = context.messages_bytes(compactable)
        return request, 0, SessionView(data.thread_id, view.summary, rows, shown_bytes)

    def _write_step(self, step: NewMessage, record: RecordBranchInput | None) -> None:
        self._store.append_once(step)
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
        text, is_error = await self._run_tool(data.subtask_type, call, data.thread_id)
        await asyncio.to_thread(
            self._store.append_once,
            NewMessage(
                id=result_id,
                session_id=data.thread_id,
                role="tool",
                kind="tool_result",
                text=text,
                meta={"tool_call_id": call.id, "tool_name": call.name, "is_error": is_error},
            ),
        )
        return RunToolOutput(ok=not is_error, chars=len(text))

    async def _run_tool(
        self, subtask_type: str, call: ToolCall, thread_id: str
    ) -> tuple[str, bool]:
        tools = {t.spec.name: t for t in self._types[subtask_type].tools}
        if call.name == reading.READ_MESSAGE and call.name not in tools:
            return await asyncio.to_thread(read_stored, self._store, thread_id, call.arguments)
        tool = tools.get(call.name)
        if tool is None:
            return f"There is no tool named {call.name!r}; available: {sorted(tools)}.", True
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as error:
            return f"The arguments are not valid JSON ({error.msg}); call {call.name} again.", True
        if not isinstance(arguments, dict):
            return "The arguments must be a JSON object.", True
        try:
            return await tool(arguments), False
        except Exception as error:  # noqa: BLE001 - a tool's failure is the model's to read
            return f"{call.name} failed: {type(error).__name__}: {error}", True
