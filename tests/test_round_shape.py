"""A round waiting on the user is one slot record: the decider hands it out, continue-as-new
carries it, the next run hands it back with the answer and the round steps on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from errands.adapters.scripted import ScriptedModelServer
from errands.contracts.workflows import RoundSettings, TaskInput, TaskResult
from errands.settings import Settings
from tests.helpers import DATABASE, ask, events_of, final, history_events, start_task, until_waiting
from tests.test_ask_user import last_tool_result

OLDER_RUNS_RESUME = {
    "round": 2,
    "upto": 17,
    "final_reason": None,
    "slot_index": 1,
    "repair": 1,
    "extra": [{"role": "user", "text": "earlier exchange"}],
    "steps_left": 5,
    "reason": None,
    "call": {"id": "call_1", "name": "ask_user", "arguments": "{}"},
    "questions": {
        "id": "t-q3",
        "questions": [
            {
                "id": "q1",
                "question": "Which database?",
                "header": "Database",
                "options": [{"label": "PostgreSQL"}, {"label": "SQLite"}],
            }
        ],
    },
    "deadline": "2030-01-02T03:04:05Z",
}
"""The ``carry.resume`` an older run wrote when it continued as new with a question pending."""


@pytest.mark.fast
def test_a_slot_reads_the_resume_record_an_older_run_carried() -> None:
    carried = TaskInput.model_validate(
        {
            "task_id": "t",
            "session_id": "s",
            "text": "q",
            "model": "demo",
            "carry": {"round": 2, "resume": OLDER_RUNS_RESUME},
        }
    )
    assert carried.carry is not None and carried.carry.resume is not None
    slot = carried.carry.resume
    assert (slot.round, slot.upto_seq, slot.repair, slot.steps_left) == (2, 17, 1, 5)
    assert slot.name == "fallback" and slot.extra[0].text == "earlier exchange"
    assert slot.call is not None and slot.call.name == "ask_user"
    assert slot.questions is not None and slot.questions.id == "t-q3"
    assert slot.deadline == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    written = slot.model_dump(mode="json")
    assert set(OLDER_RUNS_RESUME) <= set(written), "a newer run writes the same field names"


async def park_across_a_handover(
    client: Client, settings: Settings, model: str
) -> tuple[WorkflowHandle[Any, TaskResult], TaskResult]:
    """A task waiting on DATABASE that continued as new while it waited (invalid signals grow
    its history past a small bound); its status in the new run."""
    handle = await start_task(
        client,
        settings.task_queue,
        "set it up",
        model=f"openai:{model}",
        settings=RoundSettings(max_history_events=40),
    )
    await until_waiting(handle)
    first_run = (await handle.describe()).run_id
    for _ in range(40):
        await handle.signal("submit_answer", {"question_set_id": "stale", "answers": {}})
        if (await handle.describe()).run_id != first_run:
            break
    assert (await handle.describe()).run_id != first_run, "the task continued as new"
    return handle, await until_waiting(client.get_workflow_handle(handle.id))


async def test_a_dismissal_after_continue_as_new_ends_the_round_with_a_short_reply(
    client: Client, worker, settings: Settings, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-shape-dismiss", ask(DATABASE), final("Understood, tell me later."))
    handle, status = await park_across_a_handover(client, settings, "gpt-shape-dismiss")
    assert status.pending_question is not None
    await client.get_workflow_handle(handle.id).execute_update(
        "answer_question", {"question_set_id": status.pending_question["id"], "answers": {}}
    )
    result = await client.get_workflow_handle(handle.id, result_type=TaskResult).result()
    assert result.reply == "Understood, tell me later." and result.rounds == 1
    last_step = scripted.requests_for("gpt-shape-dismiss")[-1]
    assert "without choosing anything" in last_tool_result(last_step)
    assert [t["function"]["name"] for t in last_step.body["tools"]] == ["final_reply"]


async def test_the_run_after_a_handover_waits_for_the_questions_first_deadline(
    client: Client, worker, settings: Settings, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-shape-deadline", ask(DATABASE), final("PostgreSQL then."))
    handle, status = await park_across_a_handover(client, settings, "gpt-shape-deadline")
    new_run = client.get_workflow_handle(handle.id)
    timers = events_of(await history_events(new_run), EventType.EVENT_TYPE_TIMER_STARTED)
    assert len(timers) == 1, "the new run waits on one timer, the question's"
    remaining = timers[0].timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
    assert timedelta(hours=23) < remaining < timedelta(hours=24), "the deadline did not restart"
    assert status.pending_question is not None
    await new_run.execute_update(
        "answer_question",
        {"question_set_id": status.pending_question["id"], "answers": {"q1": ["PostgreSQL"]}},
    )
    assert (await client.get_workflow_handle(handle.id, result_type=TaskResult).result()).reply == (
        "PostgreSQL then."
    )
