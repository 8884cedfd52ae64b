"""Activities that read and write the session: every write is an ``append_once`` under a
deterministic id, so retries and replays never duplicate or change a message."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from temporalio import activity

from activities._events import event, preview, record
from activities._quotas import CostQuotas
from activities._threads import open_threads, read_stored, write_branch_row
from errands.adapters.store import SessionStore, TaskStart
from errands.agent.reading import READ_MESSAGE
from errands.agent.subtask_types import SubtaskType
from errands.contracts import ids
from errands.contracts.activities import (
    AckOutput,
    AppendAckInput,
    AppendMessageInput,
    AppendReplyInput,
    BranchOutcome,
    DecisionsOutput,
    JoinInput,
    JoinOutput,
    MessageOutput,
    OpenBranchInput,
    OpenTaskInput,
    OpenTaskOutput,
    PrepareRoundInput,
    ReadMessageInput,
    ReadMessageOutput,
    RecordBranchInput,
    RememberApprovalInput,
    RememberInput,
    ReplyOutput,
    RoundState,
    SessionRef,
)
from errands.contracts.events import NewEvent, named
from errands.contracts.messages import NewMessage
from errands.contracts.rows import (
    AckMeta,
    ApprovedToolMeta,
    BranchMeta,
    ReplyMeta,
    ToolResultMeta,
    UserMeta,
)
from errands.settings import Settings


def replied(task_id: str, by: str, text: str) -> NewEvent:
    """The task's ``replied`` event, written with its reply (by a model or the join)."""
    cause = ids.reply_message_id(task_id)
    return event(task_id, "replied", "replied", cause, replied_by=by, chars=len(text))


class SessionActivities:
    """``settings``: the worker's, for its daily cost quotas (``ERRANDS_QUOTAS``, at its
    prices); None: no quota is checked at round boundaries."""

    def __init__(
        self, store: SessionStore, types: dict[str, SubtaskType], settings: Settings | None = None
    ) -> None:
        self._store = store
        self._types = types
        self._cost = CostQuotas.of(settings)

    @activity.defn(name="open_task")
    async def open_task(self, data: OpenTaskInput) -> OpenTaskOutput:
        """Append the user's message once and name the installed subtask types; asked to, also
        prepare round 0, which saves the first round a store call of its own."""
        return await asyncio.to_thread(self._open_task, data)

    def _open_task(self, data: OpenTaskInput) -> OpenTaskOutput:
        if data.owner is not None:
            # Also for a task no errands.Client started (queued by its task, another program):
            # its owner's quotas count it, once (a client may have recorded it already, or,
            # for a queued message, under the message's id: that record becomes this task's).
            self._store.record_start(
                TaskStart(
                    task_id=data.task_id,
                    owner=data.owner,
                    session_id=data.session_id,
                    started_at=datetime.now(UTC),
                ),
                replacing=None if data.queued_as is None else ids.queued_start_id(data.queued_as),
            )
        self._store.append_once(
            NewMessage(
                id=ids.user_message_id(data.task_id),
                session_id=data.session_id,
                role="user",
                kind="user",
                text=data.text,
                task_id=data.task_id,
            ),
            [
                event(
                    data.task_id,
                    "task_started",
                    "task_started",
                    data.task_id,
                    session_id=data.session_id,
                    text=preview(data.text),
                    owner=data.owner,
                )
            ],
        )
        first_round = None
        if data.prepare_first_round:
            first_round = self._prepare_round(
                PrepareRoundInput(
                    task_id=data.task_id,
                    session_id=data.session_id,
                    round=0,
                    owner=data.owner,
                    owner_role=data.owner_role,
                )
            )
        return OpenTaskOutput(
            types=[t.info() for t in self._types.values()], first_round=first_round
        )

    @activity.defn(name="prepare_round")
    async def prepare_round(self, data: PrepareRoundInput) -> RoundState:
        return await asyncio.to_thread(self._prepare_round, data)

    def _prepare_round(self, data: PrepareRoundInput) -> RoundState:
        store = self._store
        state = RoundState(upto_seq=store.last_seq(data.session_id))
        reply = store.get(ids.reply_message_id(data.task_id))
        if reply is None:
            key = f"round:{data.round}"
            record(store, data.task_id, key, "round_started", key, round=data.round)
        if reply is not None:
            state.reply = reply.text
            joined = ReplyMeta.of(reply)
            if joined.deterministic_join:
                state.join_reason = joined.reason or "no model could answer"
            return state
        state.over_quota = self._cost.over(store, data.owner, data.owner_role)
        ack = store.get(ids.ack_message_id(data.task_id, data.round))
        if ack is not None:
            state.ack = ack.text
            acked = AckMeta.of(ack)
            state.ack_subtasks, state.ack_upto_seq = acked.subtasks, acked.upto_seq
            prefix = ids.branch_rows_prefix(data.task_id, data.round)
            state.branches = [
                BranchOutcome(
                    ordinal=branch.ordinal,
                    type=branch.type,
                    status=branch.status,
                    error=row.text if branch.status != "completed" else None,
                )
                for row in store.list_by_prefix(data.session_id, prefix)
                for branch in [BranchMeta.of(row)]
            ]
        return state

    @activity.defn(name="append_ack")
    async def append_ack(self, data: AppendAckInput) -> AckOutput:
        """The round's acknowledgement, and its branches' threads opened with it: one render
        of the session here instead of one per branch, each in its own activity at once."""
        return AckOutput(text=await asyncio.to_thread(self._append_ack, data))

    def _append_ack(self, data: AppendAckInput) -> str:
        row = self._store.append_once(
            NewMessage(
                id=ids.ack_message_id(data.task_id, data.round),
                session_id=data.session_id,
                role="assistant",
                kind="ack",
                text=data.reply,
                task_id=data.task_id,
                round=data.round,
                meta=AckMeta(upto_seq=data.upto_seq, subtasks=data.subtasks).stored(),
            ),
            [
                event(
                    data.task_id,
                    f"round:{data.round}:delegated",
                    "delegated",
                    f"round:{data.round}",
                    round=data.round,
                    subtasks=len(data.subtasks),
                    types=[s.type for s in data.subtasks],
                    reply=preview(data.reply),
                )
            ],
        )
        open_threads(
            self._store,
            [
                OpenBranchInput(
                    thread_id=thread_id,
                    task_id=data.task_id,
                    session_id=data.session_id,
                    catalog_upto_seq=data.upto_seq,
                    prompt=draft.prompt,
                    references=draft.references,
                    view=data.view,
                )
                # No thread ids from a task started before they were sent: its branches
                # open their own threads, as they always can.
                for thread_id, draft in zip(data.thread_ids, data.subtasks, strict=False)
            ],
        )
        return row.text

    @activity.defn(name="append_message")
    async def append_message(self, data: AppendMessageInput) -> MessageOutput:
        """A message the user sent into the running task, in the session once; its seq."""
        return MessageOutput(seq=await asyncio.to_thread(self._append_message, data))

    def _append_message(self, data: AppendMessageInput) -> int:
        row = self._store.append_once(
            NewMessage(
                id=data.message_id,
                session_id=data.session_id,
                role="user",
                kind="user",
                text=data.text,
                task_id=data.task_id,
                meta=UserMeta(message=data.mode).stored(),
            ),
            [
                event(
                    data.task_id,
                    f"{data.message_id}:received",
                    "message_received",
                    data.message_id,
                    message_id=data.message_id,
                    mode=data.mode,
                    by=named(data.by),
                )
            ],
        )
        return row.seq

    @activity.defn(name="append_reply")
    async def append_reply(self, data: AppendReplyInput) -> ReplyOutput:
        row = await asyncio.to_thread(
            self._store.append_once,
            NewMessage(
                id=ids.reply_message_id(data.task_id),
                session_id=data.session_id,
                role="assistant",
                kind="reply",
                text=data.text,
                task_id=data.task_id,
            ),
            [replied(data.task_id, "model", data.text)],
        )
        return ReplyOutput(text=row.text)

    @activity.defn(name="record_branch")
    async def record_branch(self, data: RecordBranchInput) -> None:
        """Write a branch's row into the session; a completed branch's text is its last step."""
        await asyncio.to_thread(write_branch_row, self._store, data)

    @activity.defn(name="read_message")
    async def read_message(self, data: ReadMessageInput) -> ReadMessageOutput:
        """Store the page a round's ``read_message`` call asks for; True if it is an error."""
        return ReadMessageOutput(is_error=await asyncio.to_thread(self._read_message, data))

    def _read_message(self, data: ReadMessageInput) -> bool:
        stored = self._store.get(data.result_id)
        if stored is not None:
            return ToolResultMeta.of(stored).is_error
        results = ids.reads_session_id(data.task_id)
        text, is_error = read_stored(self._store, data.session_id, results, data.arguments)
        self._store.append_once(
            NewMessage(
                id=data.result_id,
                session_id=ids.reads_session_id(data.task_id),
                role="tool",
                kind="tool_result",
                text=text,
                task_id=data.task_id,
                meta=ToolResultMeta(tool_name=READ_MESSAGE, is_error=is_error).stored(),
            )
        )
        return is_error

    @activity.defn(name="recall_decisions")
    async def recall_decisions(self, data: SessionRef) -> DecisionsOutput:
        """The session's remembered decisions; small by nature (one per distinct question)."""
        decisions = await asyncio.to_thread(self._store.list_decisions, data.session_id)
        return DecisionsOutput(decisions=decisions)

    @activity.defn(name="remember_decision")
    async def remember_decision(self, data: RememberInput) -> None:
        await asyncio.to_thread(
            self._store.put_decision, data.session_id, data.decision_id, data.record
        )

    @activity.defn(name="record_event")
    async def record_event(self, data: NewEvent) -> None:
        """An event only the workflow sees (the task failed, or was canceled), written once."""
        await asyncio.to_thread(self._store.append_event, data)

    @activity.defn(name="remember_approval")
    async def remember_approval(self, data: RememberApprovalInput) -> None:
        """Store once that the session's user approved every call of a tool."""
        await asyncio.to_thread(
            self._store.append_once,
            NewMessage(
                id=ids.approved_always_id(data.session_id, data.tool),
                session_id=ids.approvals_session_id(data.session_id),
                role="user",
                kind="note",
                text=f"approved every call of {data.tool} in this session",
                meta=ApprovedToolMeta(tool=data.tool).stored(),
            ),
        )

    @activity.defn(name="deterministic_join")
    async def deterministic_join(self, data: JoinInput) -> JoinOutput:
        """Deliver completed branches when no model can answer: no inference, just a join."""
        return JoinOutput(text=await asyncio.to_thread(self._join, data))

    def _join(self, data: JoinInput) -> str | None:
        rows = self._store.list_by_prefix(data.session_id, ids.branch_rows_prefix(data.task_id))
        branches = sorted(
            (r for r in rows if r.kind == "branch"),
            key=lambda r: (r.round or 0, BranchMeta.of(r).ordinal),
        )
        done = [r for r in branches if BranchMeta.of(r).status == "completed" and r.text.strip()]
        if not done:
            return None
        text = "\n\n".join(r.text.strip() for r in done)
        missing = len(branches) - len(done)
        if missing:
            text += (
                f"\n\n(Note: {missing} of {len(branches)} subtasks did not complete, and no model "
                "was available to write a full answer; the results above are the completed ones.)"
            )
        row = self._store.append_once(
            NewMessage(
                id=ids.reply_message_id(data.task_id),
                session_id=data.session_id,
                role="assistant",
                kind="reply",
                text=text,
                task_id=data.task_id,
                meta=ReplyMeta(deterministic_join=True, reason=data.reason).stored(),
            ),
            [replied(data.task_id, "join", text)],
        )
        return row.text
