"""What a round step writes of its own decision (activities/_rounds.py), on a real SQLite store:
exactly what the workflow will read, and nothing when it cannot be sure."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from activities._rounds import RoundRecords
from errands.adapters.store import SessionStore, open_store
from errands.agent.steps import types_digest
from errands.agent.subtask_types import GENERAL, SubtaskType
from errands.contracts import ids
from errands.contracts.messages import ModelResponse, NewMessage, ToolCall, Usage
from errands.contracts.rounds import OpenTaskInput, RoundStepInput, StepWrites

pytestmark = pytest.mark.fast

TYPES = {GENERAL.key: GENERAL}


@pytest.fixture
def records_store(tmp_path: Path) -> Iterator[SessionStore]:
    opened = open_store(f"sqlite:///{tmp_path / 'sessions.db'}")
    yield opened
    opened.close()


def call(name: str, **arguments: object) -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall(id="c1", name=name, arguments=json.dumps(arguments))])


def opened_step(records: RoundRecords, task: str, digest: str | None = None) -> RoundStepInput:
    """Round 0's first step of a new task, as the workflow sends it, once it has run."""
    step = RoundStepInput(
        task_id=task,
        session_id=f"s-{task}",
        round=0,
        upto_seq=0,
        slot="primary",
        model="openai:m",
        opens=OpenTaskInput(
            task_id=task, session_id=f"s-{task}", text="hi", prepare_first_round=True
        ),
        writes=StepWrites(types_digest=digest, workflow_id=task),
    )
    return records.before_step(step).step


def test_a_delegation_is_acknowledged_with_its_threads_opened(records_store: SessionStore) -> None:
    store = records_store
    records = RoundRecords(store, TYPES)
    step = opened_step(records, "t1")
    assert step.upto_seq == 1, "the round renders up to the user's message the step appended"
    decided = call("delegate", reply="On it.", subtasks=[{"type": "general", "prompt": "look"}])
    stored = records.write_decision(step, decided, 1, [], None)
    assert stored is not None and (stored.kind, stored.text) == ("ack", "On it.")
    ack = store.get(ids.ack_message_id("t1", 0))
    assert ack is not None and ack.text == "On it."
    thread = ids.child_workflow_id("t1", 0, 1)
    assert store.get(ids.thread_instructions_id(thread)) is not None


def test_a_worker_whose_types_are_not_the_tasks_writes_nothing(records_store: SessionStore) -> None:
    store = records_store
    other = SubtaskType(key="other", description="theirs", guidance="g", instructions="x")
    records = RoundRecords(store, TYPES)
    theirs = types_digest([other.info()])
    step = opened_step(records, "t2").model_copy(
        update={
            "opens": None,
            "writes": StepWrites(types_digest=theirs, workflow_id="t2"),
        }
    )
    decided = call("delegate", reply="On it.", subtasks=[{"type": "general", "prompt": "look"}])
    assert records.write_decision(step, decided, 1, [], None) is None
    assert store.get(ids.ack_message_id("t2", 0)) is None


def test_a_reply_is_not_written_past_a_message_the_user_sent_since(
    records_store: SessionStore,
) -> None:
    store = records_store
    records = RoundRecords(store, TYPES)
    step = opened_step(records, "t3")
    store.append_once(
        NewMessage(
            id=ids.steer_message_id("t3", 1),
            session_id="s-t3",
            role="user",
            kind="user",
            text="also check the logs",
            task_id="t3",
        )
    )
    assert records.write_decision(step, call("final_reply", text="done"), 1, [], None) is None
    assert store.get(ids.reply_message_id("t3")) is None


def test_a_rejected_call_writes_nothing(records_store: SessionStore) -> None:
    store = records_store
    records = RoundRecords(store, TYPES)
    step = opened_step(records, "t4")
    unknown = call("delegate", reply="On it.", subtasks=[{"type": "nope", "prompt": "look"}])
    assert records.write_decision(step, unknown, 1, [], None) is None
    blank = call("final_reply", text="  ")
    assert records.write_decision(step, blank, 1, [], None) is None
    assert store.get(ids.ack_message_id("t4", 0)) is None
    assert store.get(ids.reply_message_id("t4")) is None


def test_a_retried_step_finds_the_decision_an_earlier_attempt_wrote(
    records_store: SessionStore,
) -> None:
    store = records_store
    records = RoundRecords(store, TYPES)
    step = opened_step(records, "t5")
    stored = records.write_decision(step, call("final_reply", text="done"), 1, [], None)
    assert stored is not None and stored.kind == "reply"
    again = records.before_step(step.model_copy(update={"opens": None}))
    assert again.settled and again.prepared is not None and again.prepared.reply == "done"


def test_a_retry_of_the_step_that_wrote_reads_back_what_its_call_spent(
    records_store: SessionStore,
) -> None:
    """The attempt that called the model died after its writes: its retry charges the call's
    usage (the ledger then agrees with the event log); any other step finds none to charge."""
    records = RoundRecords(records_store, TYPES)
    step = opened_step(records, "t6").model_copy(update={"step": 4})
    decided = call("delegate", reply="On it.", subtasks=[{"type": "general", "prompt": "look"}])
    decided.usage = Usage(input_tokens=120, output_tokens=30)
    assert records.write_decision(step, decided, 1, [], None) is not None
    retry = records.before_step(step.model_copy(update={"opens": None}))
    assert retry.settled and retry.prepared is not None
    assert retry.prepared.spent == Usage(input_tokens=120, output_tokens=30)
    other = records.before_step(step.model_copy(update={"opens": None, "step": 5}))
    assert other.settled and other.prepared is not None and other.prepared.spent is None
