"""ask_user: structured questions answered through the workflow update and signal (SPEC §2)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError

from errands.adapters.scripted import Call, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.contracts.workflows import TaskResult
from tests.conftest import StartTask, run_cli
from tests.helpers import DATABASE, ask, eventually, final, keep_history, until_waiting

MODEL = "openai:gpt-ask"


def last_tool_result(request: RecordedRequest) -> str:
    return [m for m in request.body["messages"] if m["role"] == "tool"][-1]["content"]


async def test_a_question_is_answered_through_the_cli_and_the_same_round_resumes(
    client: Client, worker, cli_env, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-ask", ask(DATABASE), final("Going with PostgreSQL."))
    env = {**cli_env, "ERRANDS_MODEL": MODEL}
    started = await run_cli(env, "run", "Set up the new service", "--detach", "--json")
    task = started.json()["task_id"]
    await until_waiting(client.get_workflow_handle(task))

    status = (await run_cli(env, "status", task, "--json")).json()
    assert status["status"] == "waiting_for_user"
    pending = status["pending_question"]
    assert [q["id"] for q in pending["questions"]] == ["q1"]
    labels = [o["label"] for o in pending["questions"][0]["options"]]
    assert labels[:2] == ["PostgreSQL", "SQLite"]

    rejected = await run_cli(env, "answer", task, "q1=MongoDB")
    assert rejected.code == 2
    assert "PostgreSQL" in rejected.stderr and "SQLite" in rejected.stderr
    assert (await run_cli(env, "status", task, "--json")).json()["status"] == "waiting_for_user"

    accepted = await run_cli(env, "answer", task, "q1=PostgreSQL", "--json")
    assert accepted.code == 0, accepted.stderr
    done = (await run_cli(env, "wait", task, "--json", "--timeout", "60")).json()
    assert done["status"] == "replied" and done["reply"] == "Going with PostgreSQL."
    assert done["rounds"] == 1, "the answer resumed the same round"

    second = scripted.requests_for("gpt-ask")[1]
    result = last_tool_result(second)
    assert "Database: PostgreSQL" in result
    assert f"decision_id: {pending['decision_id']}" in result

    # The event log holds the question and its one accepted answer (the refused one is not).
    watched = await run_cli(env, "watch", task, "--json")
    events = [json.loads(line) for line in watched.stdout.splitlines()]
    types = [e["type"] for e in events]
    asked = [e for e in events if e["type"] == "question_asked"]
    answered = [e for e in events if e["type"] == "question_answered"]
    assert [(e["question_set_id"], e["headers"], e["round"]) for e in asked] == [
        (pending["id"], ["Database"], 0)
    ]
    assert [(e["question_set_id"], e["status"]) for e in answered] == [(pending["id"], "answered")]
    assert types.index("question_asked") < types.index("question_answered") < types.index("replied")
    await keep_history(client, task, "ask_user_answered")


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ({"question": "  ", "header": "H", "options": DATABASE["options"]}, "question 1"),
        ({**DATABASE, "options": [{"label": "Only"}]}, "option"),
        ({**DATABASE, "options": [{"label": "A"}, {"label": "  "}]}, "label"),
        ({**DATABASE, "options": [{"label": "A "}, {"label": " A"}]}, "same label"),
        (
            {
                "question": "Name it?",
                "header": "Name",
                "type": "text",
                "options": [{"label": "x"}, {"label": "y"}],
            },
            "text",
        ),
        ({**DATABASE, "type": "essay"}, "type"),
    ],
    ids=[
        "blank-question",
        "one-option",
        "blank-label",
        "duplicate-label",
        "options-on-text",
        "unknown-type",
    ],
)
async def test_an_invalid_ask_comes_back_as_an_error_the_model_repairs(
    scripted: ScriptedModelServer, bad: dict, error: str, start: StartTask
) -> None:
    scripted.script("gpt-ask", ask(bad), final("fixed without asking"))
    handle = await start("q", model=MODEL)
    assert (await handle.result()).reply == "fixed without asking"
    result = last_tool_result(scripted.requests_for("gpt-ask")[1])
    assert error in result.lower() and "nothing was started" in result


async def test_questions_sent_as_a_json_string_are_accepted(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script(
        "gpt-ask",
        Reply(calls=[Call("ask_user", {"questions": json.dumps([DATABASE])})]),
        final("ok"),
    )
    handle = await start("q", model=MODEL)
    status = await until_waiting(handle)
    assert status.pending_question is not None
    await handle.execute_update(
        "answer_question",
        {"question_set_id": status.pending_question["id"], "answers": {"q1": ["SQLite"]}},
    )
    assert (await handle.result()).reply == "ok"


async def test_a_dismissed_question_ends_the_round_with_a_short_reply(
    cli_env, scripted: ScriptedModelServer, store: SessionStore, start: StartTask
) -> None:
    scripted.script("gpt-ask", ask(DATABASE), final("Understood, tell me when you decide."))
    handle = await start("q", model=MODEL)
    await until_waiting(handle)
    assert (await run_cli(cli_env, "answer", handle.id, "--dismiss")).code == 0
    result = await handle.result()
    assert result.reply == "Understood, tell me when you decide."
    follow_up = scripted.requests_for("gpt-ask")[1]
    assert "without choosing anything" in last_tool_result(follow_up)
    assert [t["function"]["name"] for t in follow_up.body["tools"]] == ["final_reply"]
    assert store.list_decisions(result.session_id) == {}, "a dismissal is not a decision"


async def test_a_cancelled_question_tells_the_model_nothing_was_chosen(
    cli_env, scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-ask", ask(DATABASE), final("carrying on without it"))
    handle = await start("q", model=MODEL)
    await until_waiting(handle)
    assert (await run_cli(cli_env, "answer", handle.id, "--cancel")).code == 0
    assert (await handle.result()).reply == "carrying on without it"
    assert "cancelled" in last_tool_result(scripted.requests_for("gpt-ask")[1])


async def test_a_headless_task_gets_an_explicit_assumption_instead_of_waiting(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-ask", ask(DATABASE), final("Assumed PostgreSQL."))
    handle = await start("q", model=MODEL, headless=True)
    assert (await handle.result()).reply == "Assumed PostgreSQL."
    result = last_tool_result(scripted.requests_for("gpt-ask")[1])
    assert "your own assumption, not the user's answer" in result and "easiest to undo" in result


async def test_an_invalid_signal_is_recorded_and_the_question_stays_pending(
    client: Client, scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-ask", ask(DATABASE), final("done"))
    handle = await start("q", model=MODEL)
    status = await until_waiting(handle)
    qs_id = status.pending_question["id"]  # type: ignore[index]
    await handle.signal("submit_answer", {"question_set_id": qs_id, "answers": {"q1": ["Oracle"]}})
    await handle.signal("submit_answer", {"question_set_id": "nope", "answers": {}})

    async def both_recorded() -> TaskResult | None:
        status = await handle.query("status", result_type=TaskResult)
        return status if len(status.answer_errors) == 2 else None

    status = await eventually(both_recorded, "both bad answers in answer_errors")
    assert status.status == "waiting_for_user"
    assert "PostgreSQL" in status.answer_errors[0] and "nope" in status.answer_errors[1]
    await handle.signal(
        "submit_answer", {"question_set_id": qs_id, "answers": {"q1": ["PostgreSQL"]}}
    )
    assert (await handle.result()).reply == "done"
    await keep_history(client, handle.id, "ask_user_signals")


async def test_an_update_with_a_single_select_given_two_labels_is_rejected(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-ask", ask(DATABASE), final("done"))
    handle = await start("q", model=MODEL)
    status = await until_waiting(handle)
    qs_id = status.pending_question["id"]  # type: ignore[index]
    with pytest.raises(WorkflowUpdateFailedError) as rejected:
        await handle.execute_update(
            "answer_question",
            {"question_set_id": qs_id, "answers": {"q1": ["PostgreSQL", "SQLite"]}},
        )
    assert "one" in str(rejected.value.cause).lower()
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update("answer_question", {"question_set_id": "other", "answers": {}})
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update(
            "answer_question", {"question_set_id": qs_id, "answers": {"q1": ["  "], "q9": ["x"]}}
        )
    assert (await handle.query("status", result_type=TaskResult)).status == "waiting_for_user"
    await handle.execute_update(
        "answer_question", {"question_set_id": qs_id, "answers": {"q1": "SQLite"}}
    )
    assert (await handle.result()).reply == "done"


async def test_the_same_question_in_the_same_session_is_answered_from_memory(
    scripted: ScriptedModelServer, start: StartTask
) -> None:
    session = f"mem-{uuid.uuid4().hex[:6]}"
    scripted.script("gpt-ask", ask(DATABASE), final("first"))
    first = await start("q1", model=MODEL, session=session)
    status = await until_waiting(first)
    await first.execute_update(
        "answer_question",
        {"question_set_id": status.pending_question["id"], "answers": {"q1": ["PostgreSQL"]}},  # type: ignore[index]
    )
    await first.result()

    similar = {**DATABASE, "question": "Which database should this new service use?"}
    scripted.script("gpt-ask", ask(similar), final("second"))
    second = await start("q2", model=MODEL, session=session)
    assert (await second.result()).reply == "second", "answered without waiting"
    remembered = last_tool_result(scripted.requests_for("gpt-ask")[-1])
    assert "PostgreSQL" in remembered and status.pending_question["decision_id"] in remembered  # type: ignore[index]


async def test_citing_a_decision_with_new_evidence_asks_again_and_overwrites(
    scripted: ScriptedModelServer, store: SessionStore, start: StartTask
) -> None:
    session = f"reopen-{uuid.uuid4().hex[:6]}"
    scripted.script("gpt-ask", ask(DATABASE), final("first"))
    first = await start("q1", model=MODEL, session=session)
    status = await until_waiting(first)
    decision = status.pending_question["decision_id"]  # type: ignore[index]
    await first.execute_update(
        "answer_question",
        {"question_set_id": status.pending_question["id"], "answers": {"q1": ["PostgreSQL"]}},  # type: ignore[index]
    )
    await first.result()

    scripted.script(
        "gpt-ask",
        ask(DATABASE, decision_id="dec-0000000000000000", new_evidence="x"),
        ask(DATABASE, decision_id=decision, new_evidence="The host has no PostgreSQL any more."),
        final("second"),
    )
    second = await start("q2", model=MODEL, session=session)
    status = await until_waiting(second)
    unknown = last_tool_result(scripted.requests_for("gpt-ask")[-1])
    assert "dec-0000000000000000" in unknown
    await second.execute_update(
        "answer_question",
        {"question_set_id": status.pending_question["id"], "answers": {"q1": ["SQLite"]}},  # type: ignore[index]
    )
    assert (await second.result()).reply == "second"
    stored = store.list_decisions(session)
    assert list(stored) == [decision]
    assert stored[decision]["answers"] == {"q1": ["SQLite"]}


async def test_the_search_attribute_finds_exactly_the_waiting_tasks(
    client: Client, scripted: ScriptedModelServer, start: StartTask
) -> None:
    scripted.script("gpt-ask", ask(DATABASE), final("a"))
    scripted.script("gpt-other", final("b"))
    # Sessions of their own: other tests' tasks may be waiting on the same queue.
    sessions = [f"sa-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    waiting = await start("q", model=MODEL, session=sessions[0])
    done = await start("q", model="openai:gpt-other", session=sessions[1])
    await done.result()
    status = await until_waiting(waiting)
    query = (
        f'ErrandsWaitingForUser = true AND (ErrandsSession = "{sessions[0]}" '
        f'OR ErrandsSession = "{sessions[1]}")'
    )

    async def listed() -> list[str]:
        return [w.id async for w in client.list_workflows(query)]

    assert await eventually(listed, "the waiting task in visibility") == [waiting.id]
    await waiting.execute_update(
        "answer_question",
        {"question_set_id": status.pending_question["id"], "answers": {"q1": ["SQLite"]}},  # type: ignore[index]
    )
    await waiting.result()


async def test_errands_run_on_a_terminal_answers_with_the_picker(
    worker, cli_env, scripted: ScriptedModelServer
) -> None:
    import os
    import pty
    import subprocess
    import sys

    from tests.conftest import ROOT

    scripted.script("gpt-ask", ask(DATABASE), final("SQLite chosen."))
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "errands.cli", "run", "Set it up"],
        env={**cli_env, "ERRANDS_MODEL": MODEL, "TERM": "xterm"},
        cwd=ROOT,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    seen = b""

    async def read_until(marker: bytes, timeout: float = 60) -> None:
        nonlocal seen
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while marker not in seen:
            assert loop.time() < deadline, f"never saw {marker!r} in {seen[-500:]!r}"
            try:
                seen += await asyncio.wait_for(loop.run_in_executor(None, os.read, master, 4096), 5)
            except (TimeoutError, OSError):
                continue

    try:
        await read_until(b"SQLite")
        os.write(master, b"\x1b[B")
        await read_until(b"> SQLite")  # redrawn with the cursor on it: Enter now chooses it
        os.write(master, b"\r")
        await read_until(b"SQLite chosen.")
        assert await asyncio.to_thread(proc.wait, 60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert "Database: SQLite" in last_tool_result(scripted.requests_for("gpt-ask")[1])
