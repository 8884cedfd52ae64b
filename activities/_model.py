"""Model-calling activities: a round's step and a branch's step. Each provider call is one
activity attempt: Temporal owns retries, the SDK clients have theirs off, and provider errors are
classified once at this boundary. The tool calls a step makes run in ``activities._tool_calls``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from temporalio import activity

from activities._calls import ModelCall
from activities._context import ContextFitter, Fitting
from activities._events import branch_of, record
from activities._heartbeats import heartbeating
from activities._requests import branch_request, round_request
from activities._rounds import BeforeStep, RoundRecords
from activities._threads import open_threads, write_branch_row
from activities._tools import (
    MAIN,
    McpTools,
    OfferedTool,
    PinnedTools,
    Pinning,
    approvals_needed,
    session_servers,
)
from errands.adapters.routing import ModelRouter
from errands.adapters.store import SessionStore, store_work
from errands.agent.control import FINAL_REPLY, REPLY_FIELD
from errands.agent.subtask_types import SubtaskType, WorkTool
from errands.contracts import ids
from errands.contracts.activities import BranchStepInput, BranchStepOutput, RecordBranchInput
from errands.contracts.approvals import ApprovalNeed
from errands.contracts.events import NewEvent
from errands.contracts.messages import (
    ModelResponse,
    NewMessage,
    StoredMessage,
    ToolCall,
)
from errands.contracts.rounds import RoundStepInput, RoundStepOutput, RoundView, StoredDecision
from errands.contracts.rows import StepMeta, SummaryMeta


def compactions(store: SessionStore, task_id: str, where: str) -> Callable[[StoredMessage], None]:
    """What logs each compaction summary a step's fitting stores."""

    def log(summary: StoredMessage) -> None:
        key = f"{summary.id}:compaction"
        covers = SummaryMeta.of(summary).covers or None
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


@dataclass(frozen=True)
class RoundTools:
    """The task's tools a round step offers (listed and pinned for the task), and the names of
    every work tool it offers, the main agent's own first."""

    offered: list[OfferedTool] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    pinned: PinnedTools | None = None
    """The task's list they come from, when the step holds it (an empty one when no server
    serves the main agent): its request reads it here. None: the request reads the store's."""


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
        self._rounds = RoundRecords(store, types, router.settings)
        self._mcp = mcp_tools if mcp_tools is not None else McpTools(store, {})
        self._main_tools = {t.spec.name: t for t in main_tools}
        """The main agent's Python tools, by name (offered here; run by ``ToolActivities``)."""

    @activity.defn(name="round_step")
    async def round_step(self, data: RoundStepInput) -> RoundStepOutput:
        return await heartbeating(self._round_step(data))

    async def _round_step(self, data: RoundStepInput) -> RoundStepOutput:
        call = ModelCall(
            self._store,
            data.task_id,
            MAIN,
            data.step,
            data.model,
            calls={FINAL_REPLY: REPLY_FIELD},  # the reply, as the model writes it
        )
        # One visit to the store (``store_work``) before the call: the round's own store work,
        # the task's tools pinned if the step brought them (``McpTools.ahead``), the request and
        # the call's opening events. A step offering tools a server must be asked for first
        # (no listing held) takes two: they are listed and pinned in between.
        ahead = self._mcp.ahead(data.task_id, MAIN)
        before, tools, fitting = await store_work(self._store, self._before_call, data, call, ahead)
        if before.settled:
            # The round has its reply or acknowledgement: written by an attempt of this step
            # that died before reporting (what its call spent is read back with it), or found
            # by the round's preparation. No model call.
            spent = before.prepared.spent if before.prepared is not None else None
            return RoundStepOutput(
                response=ModelResponse(usage=spent) if spent is not None else ModelResponse(),
                catalog_size=0,
                attempt=activity.info().attempt,
                types=before.types,
                prepared=before.prepared,
                settled=True,
            )
        if fitting is None:
            tools = await self._round_tools(before.step)
            fitting = await store_work(self._store, self._ready_call, before.step, call, tools)
        return await self._round_call(before, call, fitting, tools)

    def _before_call(
        self, data: RoundStepInput, call: ModelCall, ahead: Pinning | None
    ) -> tuple[BeforeStep, RoundTools, Fitting | None]:
        """The round opened or prepared as the step was asked, and the user's messages it is
        the first to show logged as delivered; unless the round is settled or the task's tools
        must be listed first (``ahead`` is None), the tools the step offers (pinned here when
        the step brought them), its request built and the call's opening written. Blocking."""
        before = self._rounds.before_step(data)
        if before.settled:
            return before, RoundTools(), None
        delivered(self._store, data.task_id, data.delivers)
        step = before.step
        tools = RoundTools(pinned=self._mcp.nothing_for(MAIN))
        if step.work_tools and step.final_reason is None:
            if ahead is None:
                return before, tools, None
            tools = self._offering(ahead.resolve(self._mcp, step.task_id))
        return before, tools, self._ready_call(step, call, tools)

    def _ready_call(self, data: RoundStepInput, call: ModelCall, tools: RoundTools) -> Fitting:
        """The step's fitting with its first request built, and the call's opening written.
        Blocking."""
        main_tools = list(self._main_tools.values())
        fitting = self._fitter.fitting(
            data.model,
            lambda previews, limit: round_request(
                self._store, self._types, data, previews, main_tools, limit, tools.pinned
            ),
            log=compactions(self._store, data.task_id, MAIN),
        )
        call.write_opening()  # first: a build that fails still supersedes an earlier attempt
        fitting.prepare()
        return fitting

    async def _round_tools(self, data: RoundStepInput) -> RoundTools:
        """The task's tools the step offers: listed and pinned before its request is built."""
        return self._offering(await self._mcp.pinned(data.task_id))

    def _offering(self, pinned: PinnedTools | None) -> RoundTools:
        pinned = pinned if pinned is not None else self._mcp.nothing_for(MAIN)
        offered = pinned.offered(MAIN) if pinned is not None else []
        return RoundTools(offered, [*self._main_tools, *(t.name for t in offered)], pinned)

    async def _round_call(
        self, before: BeforeStep, call: ModelCall, fitting: Fitting, tools: RoundTools
    ) -> RoundStepOutput:
        data = before.step
        async with call:
            response, catalog_size = await fitting.complete(self._router, call.take)
            finished = await call.finished(response.usage)
        view = fitting.pinned()
        approvals, stored = await store_work(
            self._store, self._after_call, data, call, finished, tools, response, catalog_size, view
        )
        return RoundStepOutput(
            response=response,
            catalog_size=catalog_size,
            attempt=activity.info().attempt,
            compaction=fitting.spent if fitting.spent.calls else None,
            view=view,
            work_tools=tools.names,
            approvals=approvals,
            types=before.types,
            prepared=before.prepared,
            stored=stored,
            servers={
                i: t.server
                for i, call in enumerate(response.tool_calls)
                for t in tools.offered
                if t.name == call.name and t.session != "shared"
            },
        )

    def _after_call(
        self,
        data: RoundStepInput,
        call: ModelCall,
        finished: list[NewEvent],
        tools: RoundTools,
        response: ModelResponse,
        catalog_size: int,
        view: RoundView,
    ) -> tuple[list[ApprovalNeed], StoredDecision | None]:
        """The call's last events written; the step's calls that wait for approval, and the
        decision it wrote. Blocking."""
        call.write_blocking(finished)
        approvals = approvals_needed(
            self._store, data.session_id, tools.offered, response.tool_calls, response.text
        )
        if data.writes is None:
            return approvals, None
        return approvals, self._rounds.write_decision(
            data, response, catalog_size, tools.names, view
        )

    @activity.defn(name="branch_step")
    async def branch_step(self, data: BranchStepInput) -> BranchStepOutput:
        """One model step of a branch. Its first step opens the thread and the step that ends
        the branch writes its row, so a one-step branch costs a single activity. The store is
        visited twice (``store_work``): before the call (the task's tools pinned if the step
        brought them, the thread read) and after it (written); a server to be listed first adds
        its own visits (``McpTools.pinned``)."""
        return await heartbeating(self._branch_step(data))

    async def _branch_step(self, data: BranchStepInput) -> BranchStepOutput:
        pinning = self._mcp.ahead(data.task_id, data.subtask_type)
        if pinning is None:  # a server to list first
            pinning = Pinning(known=await self._mcp.pinned(data.task_id))
        where = branch_of(data.thread_id)
        call = ModelCall(self._store, data.task_id, where, data.step, data.model, answer_text=True)
        # One visit to the store before the call and one after it.
        stored, pinned, fitting = await store_work(
            self._store, self._before_branch_call, data, pinning, call
        )
        if stored is not None:
            # Written by an attempt that died before reporting: never ask the model again.
            return await store_work(self._store, self._replayed, data, pinned, stored)
        async with call:
            response, _ = await fitting.complete(self._router, call.take)
            finished = await call.finished(response.usage)
        step = NewMessage(
            id=ids.thread_step_id(data.thread_id, data.step),
            session_id=data.thread_id,
            role="assistant",
            kind="step",
            text=response.text,
            # Only tools this type offers may run; anything else is answered as an error.
            meta=StepMeta(
                tool_calls=response.tool_calls, usage=response.usage, model=data.model
            ).stored(),
        )
        record = data.record if not response.tool_calls else None
        # The call's last events go with its step: one transaction.
        approvals = await store_work(
            self._store, self._write_step, data, pinned, response, step, record, finished
        )
        return BranchStepOutput(
            tool_calls=len(response.tool_calls),
            text_chars=len(response.text),
            usage=response.usage,
            model=data.model,
            attempt=activity.info().attempt,
            compaction=fitting.spent if fitting.spent.calls else None,
            approvals=approvals,
            servers=session_servers(pinned, data.subtask_type, response.tool_calls),
        )

    def _before_branch_call(
        self, data: BranchStepInput, pinning: Pinning, call: ModelCall
    ) -> tuple[StoredMessage | None, PinnedTools | None, Fitting]:
        """The task's tools (pinned here when the step brought them) and the step's fitting;
        the step an earlier attempt stored, if any, else the request built and the call's
        opening written. Blocking."""
        pinned = pinning.resolve(self._mcp, data.task_id)
        where = branch_of(data.thread_id)
        fitting = self._fitter.fitting(
            data.model,
            lambda previews, limit: branch_request(
                self._store, self._types, data, previews, pinned, limit
            ),
            log=compactions(self._store, data.task_id, where),
        )
        stored = self._stored_step(data)
        if stored is None:
            call.write_opening()  # first: a build that fails still supersedes an earlier attempt
            fitting.prepare()
        return stored, pinned, fitting

    def _replayed(
        self, data: BranchStepInput, pinned: PinnedTools | None, stored: StoredMessage
    ) -> BranchStepOutput:
        """The step as an earlier attempt stored it (the branch's row written if it ends the
        branch and the attempt died first). Blocking."""
        done = StepMeta.of(stored)
        calls = done.tool_calls
        if not calls and data.record is not None:
            write_branch_row(self._store, data.record, last_step=stored.text)
        return BranchStepOutput(
            tool_calls=len(calls),
            text_chars=len(stored.text),
            usage=done.usage,
            model=done.model or data.model,
            replayed=True,
            approvals=self._approvals(data, pinned, calls, stored.text),
            servers=session_servers(pinned, data.subtask_type, calls),
        )

    def _approvals(
        self, data: BranchStepInput, pinned: PinnedTools | None, calls: list[ToolCall], why: str
    ) -> list[ApprovalNeed]:
        """The step's calls that wait for approval. Blocking."""
        if pinned is None or not calls:
            return []
        offered = pinned.offered(data.subtask_type)
        return approvals_needed(self._store, data.session_id, offered, calls, why)

    def _stored_step(self, data: BranchStepInput) -> StoredMessage | None:
        """The step already stored by an earlier attempt (opening the thread first on a
        branch's first step, which is usually opened already, with the acknowledgement)."""
        if data.open is not None:
            open_threads(self._store, [data.open])
        return self._store.get(ids.thread_step_id(data.thread_id, data.step))

    def _write_step(
        self,
        data: BranchStepInput,
        pinned: PinnedTools | None,
        response: ModelResponse,
        step: NewMessage,
        record: RecordBranchInput | None,
        events: list[NewEvent],
    ) -> list[ApprovalNeed]:
        """The step written with the call's last events (and the branch's row if it ends the
        branch); the step's calls that wait for approval. Blocking."""
        self._store.append_once(step, events)
        if record is not None:
            write_branch_row(self._store, record, last_step=step.text)
        return self._approvals(data, pinned, response.tool_calls, response.text)
