"""A round's records in the session (SPEC §1): the task's opening, the round's preparation, its
acknowledgement and the reply. Every write is an ``append_once`` under a deterministic id.

Runs before 0.3.0 make each a store call of its own (``SessionActivities``); since then a round's
model steps carry them (``ModelActivities.round_step``): its first step opens the task or
prepares the round, and the step that decides writes what it decided, read with the workflow's
own rules (``errands.agent.steps``). A step retried after it wrote finds what it wrote and asks
no model again. Blocking methods: activities call them through ``store_work``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from activities._events import event, preview, record
from activities._quotas import CostQuotas
from activities._threads import open_threads
from errands.adapters.store import SessionStore, TaskStart
from errands.agent.steps import Offer, Rules, read_step, types_digest
from errands.agent.subtask_types import SubtaskType
from errands.contracts import ids
from errands.contracts.activities import OpenBranchInput
from errands.contracts.events import NewEvent
from errands.contracts.messages import ModelResponse, NewMessage, Usage
from errands.contracts.rounds import (
    AppendAckInput,
    BranchOutcome,
    OpenTaskInput,
    OpenTaskOutput,
    PrepareRoundInput,
    RoundState,
    RoundStepInput,
    RoundView,
    StepSpent,
    StoredDecision,
)
from errands.contracts.rows import AckMeta, BranchMeta, ReplyMeta, WrittenByStep
from errands.contracts.subtasks import DelegateDecision, ReplyDecision, SubtaskTypeInfo
from errands.settings import Settings


def replied(task_id: str, by: str, text: str) -> NewEvent:
    """The task's ``replied`` event, written with its reply (by a model or the join)."""
    cause = ids.reply_message_id(task_id)
    return event(task_id, "replied", "replied", cause, replied_by=by, chars=len(text))


@dataclass(frozen=True)
class BeforeStep:
    """What a round step found before its call: the round's state (None: it was not asked to
    look), the types when it opened the task, and the step as the preparation leaves it."""

    step: RoundStepInput
    prepared: RoundState | None = None
    types: list[SubtaskTypeInfo] | None = None

    @property
    def settled(self) -> bool:
        """The round has its reply or acknowledgement already: no model is to be asked."""
        return self.prepared is not None and self.prepared.settled


class RoundRecords:
    """``settings``: the worker's, for its daily cost quotas (``ERRANDS_QUOTAS``, at its
    prices); None: no quota is checked at round boundaries."""

    def __init__(
        self, store: SessionStore, types: dict[str, SubtaskType], settings: Settings | None = None
    ) -> None:
        self._store = store
        self._cost = CostQuotas.of(settings)
        self._types = [t.info() for t in types.values()]
        self._digest = types_digest(self._types)

    # -- one store call each (runs before 0.3.0, and the rare paths since) ------------------

    def open_task(self, data: OpenTaskInput, step: int | None = None) -> OpenTaskOutput:
        """The task opened once, and round 0 prepared if asked; ``step``: the round step
        opening it (as for ``prepare``)."""
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
            first_round = self.prepare(
                PrepareRoundInput(
                    task_id=data.task_id,
                    session_id=data.session_id,
                    round=0,
                    owner=data.owner,
                    owner_role=data.owner_role,
                ),
                step,
            )
        return OpenTaskOutput(types=self._types, first_round=first_round)

    def prepare(self, data: PrepareRoundInput, step: int | None = None) -> RoundState:
        """What the store already holds for the round, and whether its owner may still spend.
        ``step``: the round step preparing it, which takes what it spent if it wrote the reply
        or acknowledgement found (a retry of that step: ``RoundState.spent``)."""
        state = RoundState(upto_seq=self._store.last_seq(data.session_id))
        if self._reply_found(data.task_id, state, step):
            return state
        key = f"round:{data.round}"
        record(self._store, data.task_id, key, "round_started", key, round=data.round)
        state.over_quota = self._cost.over(self._store, data.owner, data.owner_role)
        self._ack_found(data.task_id, data.session_id, data.round, state, step)
        return state

    def append_ack(self, data: AppendAckInput) -> str:
        row = self._store.append_once(
            NewMessage(
                id=ids.ack_message_id(data.task_id, data.round),
                session_id=data.session_id,
                role="assistant",
                kind="ack",
                text=data.reply,
                task_id=data.task_id,
                round=data.round,
                meta=AckMeta(
                    upto_seq=data.upto_seq,
                    subtasks=data.subtasks,
                    step=data.written_by.step if data.written_by else None,
                    usage=data.written_by.usage if data.written_by else None,
                ).stored(),
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

    def append_reply(
        self, task_id: str, session_id: str, text: str, written_by: StepSpent | None = None
    ) -> str:
        """The task's reply, once; the text as stored (the first write's). ``written_by``: the
        round step writing it (None: the workflow)."""
        meta = (
            ReplyMeta(step=written_by.step, usage=written_by.usage).stored()
            if written_by is not None
            else {}
        )
        row = self._store.append_once(
            NewMessage(
                id=ids.reply_message_id(task_id),
                session_id=session_id,
                role="assistant",
                kind="reply",
                text=text,
                task_id=task_id,
                meta=meta,
            ),
            [replied(task_id, "model", text)],
        )
        return row.text

    # -- carried by a round's model steps (0.3.0) -------------------------------------------

    def before_step(self, data: RoundStepInput) -> BeforeStep:
        """Open the task or prepare the round, as the step was asked; a step that writes its
        decision first looks for one an earlier attempt wrote."""
        types = None
        if data.opens is not None:
            opened = self.open_task(data.opens, data.step)
            prepared, types = opened.first_round, opened.types
        elif data.prepares is not None:
            prepared = self.prepare(data.prepares, data.step)
        elif data.writes is not None:
            prepared = RoundState(upto_seq=data.upto_seq)
            found = self._reply_found(data.task_id, prepared, data.step) or self._ack_found(
                data.task_id, data.session_id, data.round, prepared, data.step
            )
            if not found:
                prepared = None
        else:
            prepared = None
        before = BeforeStep(data, prepared, types)
        if prepared is None or before.settled or (data.opens is None and data.prepares is None):
            return before
        return BeforeStep(_as_prepared(data, prepared), prepared, types)

    def in_flight(self, data: RoundStepInput) -> RoundStepInput:
        """A round step as it renders once it has prepared its round, read without writing: a
        side question asked while the step runs renders up to where the store ends now, which
        is where the step's preparation found it unless the user wrote since (a step that has
        yet to open its task shows no message of it)."""
        asked = data.opens or data.prepares
        if asked is None:
            return data
        found = RoundState(
            upto_seq=self._store.last_seq(data.session_id),
            over_quota=self._cost.over(self._store, asked.owner, asked.owner_role),
        )
        return _as_prepared(data, found)

    def write_decision(
        self,
        data: RoundStepInput,
        response: ModelResponse,
        catalog_size: int,
        work_tools: list[str],
        view: RoundView | None,
    ) -> StoredDecision | None:
        """Write what the step decided, read as the workflow will read it: the acknowledgement
        of a delegation, or the reply unless the user wrote since the step's view (the
        workflow then lets the agent decide again with the message). None: nothing to write,
        or this worker's types are not the task's."""
        writes = data.writes
        if writes is None or (writes.types_digest or self._digest) != self._digest:
            return None
        offer = Offer(
            final=data.final_reason is not None,
            follow_up=data.work_tools,
            work_tools=tuple(work_tools),
        )
        rules = Rules(self._types, data.max_subtasks, data.max_output_tokens)
        decision = read_step(response, offer, rules, catalog_size)
        written_by = StepSpent(step=data.step, usage=response.usage)
        if isinstance(decision, DelegateDecision):
            count = len(decision.subtasks)
            ack = AppendAckInput(
                task_id=data.task_id,
                session_id=data.session_id,
                round=data.round,
                upto_seq=data.upto_seq,
                reply=decision.reply,
                subtasks=decision.subtasks,
                thread_ids=[
                    ids.child_workflow_id(writes.workflow_id, data.round, k)
                    for k in range(1, count + 1)
                ],
                view=view,
                written_by=written_by,
            )
            return StoredDecision(kind="ack", text=self.append_ack(ack))
        if isinstance(decision, ReplyDecision) and not self._written_since(data):
            text = self.append_reply(data.task_id, data.session_id, decision.text, written_by)
            return StoredDecision(kind="reply", text=text)
        return None

    # -- reads -----------------------------------------------------------------------------

    def _reply_found(self, task_id: str, state: RoundState, step: int | None = None) -> bool:
        """Fill ``state`` with the task's reply, when stored; whether it was. ``step``: the
        round step looking, which takes what it spent if it wrote the reply itself."""
        reply = self._store.get(ids.reply_message_id(task_id))
        if reply is None:
            return False
        state.reply = reply.text
        joined = ReplyMeta.of(reply)
        if joined.deterministic_join:
            state.join_reason = joined.reason or "no model could answer"
        state.spent = _spent_by(joined, step)
        return True

    def _ack_found(
        self, task_id: str, session_id: str, round_: int, state: RoundState, step: int | None = None
    ) -> bool:
        """Fill ``state`` with the round's acknowledgement and its branches' outcomes, when
        stored; whether it was. ``step``: as for ``_reply_found``."""
        store = self._store
        ack = store.get(ids.ack_message_id(task_id, round_))
        if ack is None:
            return False
        state.ack = ack.text
        acked = AckMeta.of(ack)
        state.ack_subtasks, state.ack_upto_seq = acked.subtasks, acked.upto_seq
        state.spent = _spent_by(acked, step)
        prefix = ids.branch_rows_prefix(task_id, round_)
        state.branches = [
            BranchOutcome(
                ordinal=branch.ordinal,
                type=branch.type,
                status=branch.status,
                error=row.text if branch.status != "completed" else None,
            )
            for row in store.list_by_prefix(session_id, prefix)
            for branch in [BranchMeta.of(row)]
        ]
        return True

    def _written_since(self, data: RoundStepInput) -> bool:
        """Whether the user sent the task a message the step's view ends before."""
        later = self._store.list_session(data.session_id, after_seq=data.upto_seq)
        return any(row.kind == "user" and row.task_id == data.task_id for row in later)


def _spent_by(row: WrittenByStep, step: int | None) -> Usage | None:
    """What the row's writer spent, when ``step`` wrote it."""
    return row.usage if step is not None and row.step == step else None


def _as_prepared(data: RoundStepInput, found: RoundState) -> RoundStepInput:
    """The step as its round's preparation leaves it: it renders up to where the store was,
    and a quota its owner passed makes it final (``RoundDecider`` takes in the same)."""
    reason = found.over_quota if found.over_quota is not None else data.final_reason
    return data.model_copy(
        update={
            "upto_seq": max(data.upto_seq, found.upto_seq),
            "final_reason": reason,
            "work_tools": data.work_tools and reason is None,
        }
    )
