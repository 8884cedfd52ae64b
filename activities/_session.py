"""Activities that read and write the session: every write is an ``append_once`` under a
deterministic id, so retries and replays never duplicate or change a message."""

from __future__ import annotations

from temporalio import activity

from activities._events import event
from activities._rounds import RoundRecords, replied
from activities._threads import read_stored, write_branch_row
from errands.adapters.store import SessionStore, store_work
from errands.agent.reading import READ_MESSAGE
from errands.agent.subtask_types import SubtaskType
from errands.contracts import ids
from errands.contracts.activities import (
    AckOutput,
    AppendMessageInput,
    DecisionsOutput,
    JoinInput,
    JoinOutput,
    MessageOutput,
    ReadMessageInput,
    ReadMessageOutput,
    RecordBranchInput,
    RememberApprovalInput,
    RememberInput,
    ReplyOutput,
    SessionRef,
)
from errands.contracts.events import NewEvent, named
from errands.contracts.messages import NewMessage
from errands.contracts.rounds import (
    AppendAckInput,
    AppendReplyInput,
    OpenTaskInput,
    OpenTaskOutput,
    PrepareRoundInput,
    RoundState,
)
from errands.contracts.rows import (
    ApprovedToolMeta,
    BranchMeta,
    ReplyMeta,
    ToolResultMeta,
    UserMeta,
)
from errands.settings import Settings


class SessionActivities:
    """The store calls a workflow makes as local activities. A round's own (the opening, the
    preparation, the acknowledgement, the reply) are ``RoundRecords``', which ``settings`` is
    given to; since 0.3.0 a round's model steps make them instead."""

    def __init__(
        self, store: SessionStore, types: dict[str, SubtaskType], settings: Settings | None = None
    ) -> None:
        self._store = store
        self._rounds = RoundRecords(store, types, settings)

    @activity.defn(name="open_task")
    async def open_task(self, data: OpenTaskInput) -> OpenTaskOutput:
        """Append the user's message once and name the installed subtask types; asked to, also
        prepare round 0, which saves the first round a store call of its own."""
        return await store_work(self._store, self._rounds.open_task, data)

    @activity.defn(name="prepare_round")
    async def prepare_round(self, data: PrepareRoundInput) -> RoundState:
        return await store_work(self._store, self._rounds.prepare, data)

    @activity.defn(name="append_ack")
    async def append_ack(self, data: AppendAckInput) -> AckOutput:
        """The round's acknowledgement, and its branches' threads opened with it: one render
        of the session here instead of one per branch, each in its own activity at once."""
        return AckOutput(text=await store_work(self._store, self._rounds.append_ack, data))

    @activity.defn(name="append_message")
    async def append_message(self, data: AppendMessageInput) -> MessageOutput:
        """A message the user sent into the running task, in the session once; its seq."""
        return MessageOutput(seq=await store_work(self._store, self._append_message, data))

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
        text = await store_work(
            self._store, self._rounds.append_reply, data.task_id, data.session_id, data.text
        )
        return ReplyOutput(text=text)

    @activity.defn(name="record_branch")
    async def record_branch(self, data: RecordBranchInput) -> None:
        """Write a branch's row into the session; a completed branch's text is its last step."""
        await store_work(self._store, write_branch_row, self._store, data)

    @activity.defn(name="read_message")
    async def read_message(self, data: ReadMessageInput) -> ReadMessageOutput:
        """Store the page a round's ``read_message`` call asks for; True if it is an error."""
        return ReadMessageOutput(is_error=await store_work(self._store, self._read_message, data))

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
        decisions = await store_work(self._store, self._store.list_decisions, data.session_id)
        return DecisionsOutput(decisions=decisions)

    @activity.defn(name="remember_decision")
    async def remember_decision(self, data: RememberInput) -> None:
        await store_work(
            self._store, self._store.put_decision, data.session_id, data.decision_id, data.record
        )

    @activity.defn(name="record_event")
    async def record_event(self, data: NewEvent) -> None:
        """An event only the workflow sees (the task failed, or was canceled), written once."""
        await store_work(self._store, self._store.append_event, data)

    @activity.defn(name="remember_approval")
    async def remember_approval(self, data: RememberApprovalInput) -> None:
        """Store once that the session's user approved every call of a tool."""
        await store_work(
            self._store,
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
        return JoinOutput(text=await store_work(self._store, self._join, data))

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
