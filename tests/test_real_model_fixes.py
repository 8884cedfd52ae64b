"""What real models and servers turned up (issue 14), on the real dev server and SDK clients:
narration repaired on the slot, a call cut off by the output limit, the advisor withdrawn after
its limit and sent as one system message with alternating turns, a round waiting to retry that
says why, a failure that does not promise a retry, and a side question's fallback with a time
budget of its own."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from temporalio.client import Client

from errands.adapters.scripted import Call, Fail, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.agent.advisor import ADVISOR_INSTRUCTIONS, advisor_request
from errands.contracts.activities import SideAnswer, SideQuestionInput
from errands.contracts.messages import Message, ToolCall
from errands.contracts.workflows import RoundSettings, SideQuestion, TaskResult
from errands.settings import Settings
from tests.conftest import StartTask
from tests.helpers import (
    ACTIVITY_SCHEDULED,
    DATABASE,
    advisor_call,
    ask,
    events_of,
    eventually,
    final,
    history_events,
    keep_history,
    start_task,
    until_waiting,
)

MODEL = "openai:gpt-real"


def tool_names(request: RecordedRequest) -> list[str]:
    return [t["function"]["name"] for t in request.body.get("tools", [])]


# -- narration and empty replies, repaired on the slot ------------------------------------------


async def test_narration_with_no_fallback_is_repaired_on_the_same_slot(
    client: Client, store: SessionStore, scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-real", Reply(text="The answer is 4."), final("4"))
    handle = await start("2 + 2?", model=MODEL)
    result = await handle.result()
    assert (result.status, result.reply) == ("replied", "4")
    assert result.steps == 2, "the narrating step and its repair are both charged"
    first, second = scripted.requests_for("gpt-real")
    said, told = second.body["messages"][-2:]
    assert said == {"role": "assistant", "content": "The answer is 4."}
    assert told["role"] == "user" and "control tool" in told["content"]
    assert "`final_reply`" in told["content"]
    assert second.body["messages"][:-2] == first.body["messages"]
    assert [r.kind for r in store.list_session(result.session_id)] == ["user", "reply"]
    await keep_history(client, handle.id, "narration_repaired")


async def test_an_empty_reply_is_repaired_on_the_same_slot(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-real", Reply(text=""), final("here"))
    handle = await start("q", model=MODEL)
    assert (await handle.result()).reply == "here"
    first, second = scripted.requests_for("gpt-real")
    assert len(second.body["messages"]) == len(first.body["messages"]) + 1
    told = second.body["messages"][-1]
    assert told["role"] == "user" and "empty" in told["content"]


async def test_with_a_fallback_narration_goes_to_the_fallback_first(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-real", Reply(text="prose"))
    scripted.script("gpt-real-fallback", final("from the fallback"))
    handle = await start("q", model=MODEL, fallback_model="openai:gpt-real-fallback")
    result = await handle.result()
    assert result.reply == "from the fallback" and result.steps == 2
    assert len(scripted.requests_for("gpt-real")) == 1, "the primary is not repaired"


async def test_narration_on_the_fallback_too_is_repaired_on_the_fallback(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-real", Reply(text="the primary narrates"))
    scripted.script("gpt-real-fallback", Reply(text="the fallback narrates"), final("fixed"))
    handle = await start("q", model=MODEL, fallback_model="openai:gpt-real-fallback")
    result = await handle.result()
    assert result.reply == "fixed" and result.steps == 3
    repaired = scripted.requests_for("gpt-real-fallback")[1].body["messages"]
    assert repaired[-2] == {"role": "assistant", "content": "the fallback narrates"}
    assert "narrates" not in json.dumps(scripted.requests_for("gpt-real-fallback")[0].body)


async def test_narration_repairs_stop_at_the_repair_limit(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-real", *[Reply(text="Sure, I can help with that.")] * 3)
    handle = await start("q", model=MODEL, settings=RoundSettings(max_repairs=2))
    result = await handle.result()
    assert result.status == "failed" and result.error is not None
    assert result.error.kind == "exhausted" and result.steps == 3
    assert "attempt 3" in result.error.message and "text length=27" in result.error.message


async def test_narration_repairs_stop_at_the_step_budget(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-real", Reply(text="prose"), Reply(text="prose again"))
    handle = await start("q", model=MODEL, settings=RoundSettings(step_budget=2))
    result = await handle.result()
    assert result.status == "failed" and result.error is not None
    assert result.error.kind == "exhausted" and result.steps == 2


# -- a tool call cut off by the output limit -----------------------------------------------------


async def test_a_call_cut_off_by_the_output_limit_is_asked_again_shorter(
    client: Client, scripted: ScriptedModelServer, start: StartTask
) -> None:
    cut = Reply(
        calls=[Call("final_reply", '{"text": "A very long answer th')], finish_reason="length"
    )
    scripted.script("gpt-real", cut, final("short"))
    handle = await start("q", model=MODEL, settings=RoundSettings(max_output_tokens=64))
    result = await handle.result()
    assert result.reply == "short" and result.steps == 2
    rejected, error = scripted.requests_for("gpt-real")[1].body["messages"][-2:]
    assert error["role"] == "tool" and error["tool_call_id"] == rejected["tool_calls"][0]["id"]
    assert "hit the limit of 64 tokens" in error["content"]
    assert "shorter call" in error["content"]
    assert "JSON" not in error["content"], "not mistaken for malformed JSON"
    # The partial arguments are not sent back: servers refuse arguments that are not JSON.
    json.loads(rejected["tool_calls"][0]["function"]["arguments"])
    await keep_history(client, handle.id, "output_limit_repaired")


async def test_a_cut_off_work_tool_call_is_not_run(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    cut = Reply(calls=[Call("advisor", '{"question": "Should I')], finish_reason="length")
    scripted.script("gpt-real", cut, final("done"))
    handle = await start("q", model=MODEL)
    assert (await handle.result()).reply == "done"
    events = await history_events(handle)
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events_of(events, ACTIVITY_SCHEDULED)
    ]
    assert scheduled == ["round_step", "round_step"], "no advisor call on a cut-off question"


# -- the advisor: withdrawn after its limit, one system message, alternating turns -------------


async def test_the_advisor_is_withdrawn_once_its_limit_is_used(
    client: Client, worker, settings: Settings, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-real", advisor_call("first"), final("done"))
    scripted.script("gpt-real-advisor", Reply(text="advice"))
    handle = await start_task(
        client,
        settings.task_queue,
        "q",
        model=MODEL,
        advisor_model="openai:gpt-real-advisor",
        settings=RoundSettings(advisor_limit=1),
    )
    result = await handle.result()
    assert result.reply == "done" and result.steps == 2
    first, second = scripted.requests_for("gpt-real")
    assert tool_names(first) == ["final_reply", "delegate", "ask_user", "advisor"]
    assert tool_names(second) == ["final_reply", "delegate", "ask_user"]


async def test_the_advisor_request_has_one_system_message_and_alternating_turns(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    session = f"adv-{uuid.uuid4().hex[:6]}"
    scripted.script("gpt-real", final("Earlier: SQLite will do."))
    earlier = await start("Pick one", model=MODEL, session=session)
    await earlier.result()
    scripted.script("gpt-real", advisor_call("Which one?"), final("done"))
    scripted.script("gpt-real-advisor", Reply(text="PostgreSQL."))
    handle = await start(
        "Set it up",
        model=MODEL,
        advisor_model="openai:gpt-real-advisor",
        session=session,
    )
    assert (await handle.result()).reply == "done"
    messages = scripted.requests_for("gpt-real-advisor")[0].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"].endswith(ADVISOR_INSTRUCTIONS)
    assert messages[2]["content"].endswith("Earlier: SQLite will do.")
    assert messages[3]["content"].endswith("Set it up\n\nWhich one?")


@pytest.mark.fast
def test_system_messages_merge_into_one_and_same_role_turns_join() -> None:
    conversation = [
        Message(role="user", text="Fix the test."),
        Message(role="system", text="injected later"),
        Message(role="user", text="Quickly."),
        Message(role="assistant", text="Looking.", tool_calls=[ToolCall(id="c1", name="read")]),
        Message(role="tool", tool_call_id="c1", text="def f(): ..."),
    ]
    request = advisor_request(["base prompt"], conversation, "What next?")
    assert request.system == f"base prompt\n\ninjected later\n\n{ADVISOR_INSTRUCTIONS}"
    assert [(m.role, m.text) for m in request.messages] == [
        ("user", "Fix the test.\n\nQuickly."),
        ("assistant", "Looking."),
        (
            "user",
            "[Note: the agent ran read with input {} and got: def f(): ...]\n\nWhat next?",
        ),
    ]


# -- a round that waits to retry, and a failure that does not promise one ----------------------


async def test_a_round_waiting_to_retry_shows_why_and_its_failure_promises_no_retry(
    client: Client, worker, settings: Settings, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-real", *[Fail(503, "upstream overloaded")] * 2)
    handle = await start_task(
        client,
        settings.task_queue,
        "q",
        model=MODEL,
        settings=RoundSettings(model_max_attempts=1, round_retry_limit=1, round_retry_seconds=2),
    )

    async def shows_the_error() -> TaskResult | None:
        status = await handle.query("status", result_type=TaskResult)
        return status if status.last_error is not None else None

    # Seen while the round waits its 2 s to retry.
    waiting = await eventually(shows_the_error, "the status to show the round's error")
    assert waiting.status == "running" and waiting.error is None
    assert "retry 1 of 1 in 2 s" in waiting.phase
    assert waiting.last_error is not None and waiting.last_error.kind == "transient"
    assert "HTTP 503 (upstream overloaded)" in waiting.last_error.message

    result = await handle.result()
    assert result.status == "failed" and result.error is not None
    assert result.error.kind == "transient" and result.last_error is None
    assert "HTTP 503 (upstream overloaded)" in result.error.message
    assert "round 0 was retried once and failed each time" in result.error.message
    assert "try again" not in result.error.message


# -- a side question's fallback has a time budget of its own -----------------------------------

SIDE_Q = "btw, which database?"


class SideScript:
    """The task's rounds, then a preferred side-question call that outlasts the timeout and a
    fallback that needs more than the second it would have had left."""

    def __init__(self, main: list[Any]) -> None:
        self.main = list(main)
        self.preferred: list[RecordedRequest] = []
        self.fallback: list[RecordedRequest] = []

    def __call__(self, request: RecordedRequest) -> Reply:
        text = json.dumps(request.body["messages"])
        if SIDE_Q not in text:
            return self.main.pop(0)
        if request.body.get("tools"):
            self.preferred.append(request)
            return Reply(text="too late", delay=5)
        self.fallback.append(request)
        return Reply(text="PostgreSQL, it was asking about.", delay=1.5)


async def test_a_running_tasks_side_question_fallback_gets_its_own_time_budget(
    client: Client, worker, settings: Settings, scripted: ScriptedModelServer
) -> None:
    script = SideScript([ask(DATABASE), final("ok")])
    scripted.script("gpt-real", *[script] * 4)
    handle = await start_task(
        client,
        settings.task_queue,
        "Set it up",
        model=MODEL,
        settings=RoundSettings(side_question_timeout_seconds=3),
    )
    status = await until_waiting(handle)
    answer = await handle.execute_update(
        "ask_side_question", SideQuestion(question=SIDE_Q), result_type=SideAnswer
    )
    assert answer.path == "fallback" and answer.answer.startswith("PostgreSQL")
    assert len(script.preferred) == 1 and len(script.fallback) == 1
    await handle.execute_update(
        "answer_question",
        {"question_set_id": status.pending_question["id"], "answers": {"q1": ["SQLite"]}},  # type: ignore[index]
    )
    result = await handle.result()
    assert result.usage.parts["side_questions"][MODEL].calls == 1
    scheduled = [
        (
            e.activity_task_scheduled_event_attributes.activity_type.name,
            e.activity_task_scheduled_event_attributes.start_to_close_timeout.ToSeconds(),
        )
        for e in events_of(await history_events(handle), ACTIVITY_SCHEDULED)
    ]
    assert scheduled.count(("answer_side_question", 3)) == 2, "a timeout each"
    await keep_history(client, handle.id, "side_question_paths_apart")


async def test_a_finished_tasks_side_question_fallback_gets_its_own_time_budget(
    client: Client, settings: Settings, scripted: ScriptedModelServer, start: StartTask
) -> None:
    script = SideScript([final("Done.")])
    scripted.script("gpt-real", *[script] * 3)
    handle = await start("Set it up", model=MODEL)
    result = await handle.result()
    assert result.last_round is not None
    answer = await client.execute_workflow(
        "SideQuestionWorkflow",
        SideQuestionInput(
            task_id=result.task_id,
            session_id=result.session_id,
            question=SIDE_Q,
            model=MODEL,
            round=result.last_round,
            timeout_seconds=3,
        ),
        id=f"{result.task_id}/btw-{uuid.uuid4().hex[:6]}",
        task_queue=settings.task_queue,
        result_type=SideAnswer,
    )
    assert answer.path == "fallback" and answer.answer.startswith("PostgreSQL")
    assert len(script.preferred) == 1 and len(script.fallback) == 1


# -- a 500 that repeats itself is a refusal, not an outage -----------------------------------


async def test_a_500_with_the_same_words_twice_ends_the_retries_as_an_invalid_request(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    said = "failed to process the prompt"  # words the classifier alone cannot place
    scripted.script("gpt-real", *[Fail(500, said)] * 2)
    handle = await start("q", model=MODEL, settings=RoundSettings(model_max_attempts=6))
    result = await handle.result()
    assert result.status == "failed" and result.error is not None
    assert result.error.kind == "invalid_request"
    assert "same answer came on two attempts in a row" in result.error.message
    assert len(scripted.requests_for("gpt-real")) == 2, "the first repeat ends the retries"


async def test_a_503_that_repeats_itself_is_still_an_outage_and_retried(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-real", Fail(503, "overloaded"), Fail(503, "overloaded"), final("back"))
    handle = await start("q", model=MODEL, settings=RoundSettings(model_max_attempts=6))
    assert (await handle.result()).reply == "back"


@pytest.mark.fast
def test_broken_json_is_described_without_a_doubled_word() -> None:
    from errands.agent.asking import parse_ask_user
    from errands.agent.control import parse_final_reply
    from errands.errors import ModelMistake

    cut = '{"text": "a long answer cut off'
    for parse in (lambda c: parse_final_reply([c]), lambda c: parse_ask_user(c, set_id="q")):
        try:
            parse(ToolCall(id="1", name="final_reply", arguments=cut))
        except ModelMistake as error:
            assert "Unterminated string starting at position 9" in str(error)
            assert "at at" not in str(error)
        else:
            raise AssertionError("broken JSON was accepted")
