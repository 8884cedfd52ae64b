"""The `errands` command as a user meets it: refusals, configuration mistakes, a task nobody
serves, pending questions, cancelling, and stopping the long-running commands."""

from __future__ import annotations

import argparse
import asyncio
import re
import shlex
import signal
import socket
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from errands.adapters.devserver import DevServer, free_port, port_open
from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.cli import _parser
from errands.settings import render_configuration
from tests.conftest import ROOT, read_stderr_until, run_cli, running_cli
from tests.helpers import DATABASE, ask, final, until_waiting
from tests.test_ask_user import MODEL

README = (ROOT / "README.md").read_text()
GUIDE = (ROOT / "docs" / "guide.md").read_text()
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()
OPERATIONS = (ROOT / "docs" / "operations.md").read_text()


def new_session() -> str:
    return f"u-{uuid.uuid4().hex[:8]}"


def a_clean_refusal(stderr: str) -> str:
    """The one line an exit-2 refusal prints, without a traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("errands: ")]
    assert len(lines) == 1, stderr
    return lines[0]


# -- input the gateway refuses is refused here too, before anything is written ----------------


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["run", ""], "blank"),
        (["run", "   "], "blank"),
        (["run", "hi", "--model", "foo"], "--model: model 'foo'"),
        (["run", "hi", "--fallback-model", "openai"], "--fallback-model: model 'openai'"),
    ],
    ids=["empty-text", "blank-text", "bad-model", "bad-fallback-model"],
)
async def test_a_task_the_gateway_would_refuse_is_refused_before_anything_is_written(
    cli_env, store: SessionStore, args: list[str], reason: str
) -> None:
    session = new_session()
    result = await run_cli(cli_env, *args, "--session", session, "--detach")
    assert result.code == 2
    assert reason in a_clean_refusal(result.stderr)
    assert store.list_session(session) == []


@pytest.mark.parametrize("session", ["bad id", "x" * 200, "-leading-dash", ""])
async def test_a_session_id_the_gateway_could_not_address_is_refused(cli_env, session: str) -> None:
    result = await run_cli(cli_env, "run", "hi", f"--session={session}", "--detach")
    assert result.code == 2
    assert "session id" in a_clean_refusal(result.stderr)


# -- configuration and connection mistakes: one line naming the fix, exit 2 ------------------


@pytest.mark.parametrize(
    ("env", "args", "named"),
    [
        ({"ERRANDS_DEV_PORT": "abc"}, ["status", "x"], "ERRANDS_DEV_PORT"),
        ({"ERRANDS_PRICES": "{bad"}, ["run", "x"], "ERRANDS_PRICES"),
        ({"ERRANDS_PRICES": '{"demo": {"input": "free"}}'}, ["run", "x"], "ERRANDS_PRICES"),
        ({"ERRANDS_PRICES": "[1]"}, ["run", "x"], "ERRANDS_PRICES"),
        ({"ERRANDS_DATABASE_URL": "mysql://x"}, ["history", "s1"], "ERRANDS_DATABASE_URL"),
        ({"TEMPORAL_ADDRESS": "127.0.0.1:1"}, ["status", "x"], "TEMPORAL_ADDRESS"),
        ({"TEMPORAL_ADDRESS": "127.0.0.1:1"}, ["worker"], "TEMPORAL_ADDRESS"),
        (
            {"ERRANDS_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"},
            ["worker"],
            "ERRANDS_DATABASE_URL",
        ),
    ],
    ids=[
        "dev-port",
        "prices-json",
        "prices-value",
        "prices-not-an-object",
        "database-url",
        "temporal-address",
        "worker-temporal-address",
        "worker-database-refused",
    ],
)
async def test_a_configuration_mistake_is_one_line_naming_the_setting(
    cli_env, env: dict[str, str], args: list[str], named: str
) -> None:
    result = await run_cli({**cli_env, **env}, *args)
    assert result.code == 2
    assert named in a_clean_refusal(result.stderr)


async def test_dev_on_a_taken_port_says_which_and_how_to_choose_another(
    cli_env, dev_server: DevServer, tmp_path: Path
) -> None:
    result = await run_cli(
        cli_env,
        "dev",
        "--port",
        str(dev_server.port),
        "--ui-port",
        str(free_port()),
        "--data-dir",
        str(tmp_path),
    )
    assert result.code == 2
    line = a_clean_refusal(result.stderr)
    assert f"port {dev_server.port} is already taken" in line
    assert "ERRANDS_DEV_PORT" in line


# -- a task no worker serves ----------------------------------------------------------------


async def test_status_of_a_task_no_worker_serves_names_the_queue_instead_of_hanging(
    client: Client, cli_env
) -> None:
    queue = f"nobody-{uuid.uuid4().hex[:6]}"
    env = {**cli_env, "ERRANDS_TASK_QUEUE": queue}
    task = (await run_cli(env, "run", "hi", "--detach", "--json")).json()["task_id"]
    try:
        status = await run_cli(env, "status", task, timeout=30)
        assert status.code == 2
        line = a_clean_refusal(status.stderr)
        assert f"no worker is polling task queue {queue}" in line
        assert "errands worker" in line

        # The wait's first read takes up to QUERY_TIMEOUT (5 s) to find nobody serves the task:
        # 15 s leaves it room on a loaded machine.
        waited = await run_cli(env, "wait", task, "--timeout", "15", timeout=45)
        assert waited.code == 2
        assert waited.stderr.count(f"no worker is polling task queue {queue}") == 1
        assert "Still waiting" in waited.stderr
        assert "did not end within 15 s" in waited.stderr
        assert "Traceback" not in waited.stderr

        asked = await run_cli(env, "btw", task, "what is it doing?", timeout=30)
        assert asked.code == 2
        assert f"no worker is polling task queue {queue}" in a_clean_refusal(asked.stderr)
    finally:
        await client.get_workflow_handle(task).terminate("test cleanup")


# -- pending questions in text output -------------------------------------------------------


async def test_status_shows_the_question_and_the_command_that_answers_it(
    client: Client, worker, cli_env, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-ask", ask(DATABASE), final("Going with PostgreSQL."))
    env = {**cli_env, "ERRANDS_MODEL": MODEL}
    task = (await run_cli(env, "run", "Set it up", "--detach", "--json")).json()["task_id"]
    await until_waiting(client.get_workflow_handle(task))

    status = await run_cli(env, "status", task)
    assert status.code == 0, status.stderr
    assert f"{task}: waiting_for_user" in status.stdout
    assert "Which database should the new service use?" in status.stdout
    assert "PostgreSQL: Recommended: we already run it" in status.stdout
    assert "SQLite" in status.stdout
    command = re.search(r"answer with: (.+)", status.stdout)
    assert command is not None
    assert command.group(1) == f"errands answer {task} q1=PostgreSQL"

    answered = await run_cli(env, *shlex.split(command.group(1))[1:])
    assert answered.code == 0, answered.stderr
    assert answered.stdout.strip() == f"{task}: answer accepted; the task goes on"
    done = await run_cli(env, "wait", task, "--json", "--timeout", "60")
    assert done.json()["reply"] == "Going with PostgreSQL."


async def test_run_without_a_terminal_prints_the_question_once_and_keeps_waiting(
    client: Client, worker, cli_env, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-ask", ask(DATABASE), final("SQLite it is."))
    session = new_session()
    env = {**cli_env, "ERRANDS_MODEL": MODEL}
    async with running_cli(env, "run", "Set it up", "--session", session) as proc:
        seen = await read_stderr_until(proc, "answer with:")
        task = re.search(r"answer with: errands answer (\S+) q1=PostgreSQL", seen)
        assert task is not None, seen
        assert "Which database should the new service use?" in seen
        handle = client.get_workflow_handle(task.group(1))
        status = await until_waiting(handle)
        await handle.execute_update(
            "answer_question",
            {"question_set_id": status.pending_question["id"], "answers": {"q1": ["SQLite"]}},  # type: ignore[index]
        )
        assert proc.stderr is not None
        rest = (await asyncio.wait_for(proc.stderr.read(), 60)).decode()
        assert await proc.wait() == 0
    assert "answer with:" not in rest, "the question is shown once"


async def test_a_dismissal_is_reported_as_a_dismissal(
    client: Client, worker, cli_env, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-ask", ask(DATABASE), final("Tell me when you decide."))
    env = {**cli_env, "ERRANDS_MODEL": MODEL}
    task = (await run_cli(env, "run", "Set it up", "--detach", "--json")).json()["task_id"]
    await until_waiting(client.get_workflow_handle(task))
    dismissed = await run_cli(env, "answer", task, "--dismiss")
    assert dismissed.code == 0, dismissed.stderr
    assert "dismissed" in dismissed.stdout and "accepted" not in dismissed.stdout
    await client.get_workflow_handle(task).result()


# -- cancel ---------------------------------------------------------------------------------


async def test_cancel_stops_a_running_task_and_refuses_an_ended_or_unknown_one(
    client: Client, worker, cli_env, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-ask", ask(DATABASE))
    env = {**cli_env, "ERRANDS_MODEL": MODEL}
    task = (await run_cli(env, "run", "Set it up", "--detach", "--json")).json()["task_id"]
    await until_waiting(client.get_workflow_handle(task))

    canceled = await run_cli(env, "cancel", task)
    assert canceled.code == 0, canceled.stderr
    assert f"{task}: cancel requested" in canceled.stdout
    ended = await run_cli(env, "wait", task, "--json", "--timeout", "60")
    assert ended.code == 1
    assert ended.json()["status"] == "canceled"

    again = await run_cli(env, "cancel", task)
    assert again.code == 2
    assert "has already ended" in a_clean_refusal(again.stderr)
    unknown = await run_cli(env, "cancel", "task-nope-000000")
    assert unknown.code == 2
    assert "no task 'task-nope-000000'" in a_clean_refusal(unknown.stderr)


# -- stopping the long-running commands -----------------------------------------------------


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
async def test_dev_stopped_by_a_signal_stops_its_temporal_server(
    cli_env, tmp_path: Path, stop: signal.Signals
) -> None:
    port, ui_port = free_port(), free_port()
    args = ["dev", "--port", str(port), "--ui-port", str(ui_port), "--data-dir", str(tmp_path)]
    async with running_cli(cli_env, *args) as proc:
        await read_stderr_until(proc, "worker running")
        assert port_open("127.0.0.1", port)
        proc.send_signal(stop)
        assert await asyncio.wait_for(proc.wait(), 60) == 128 + stop
    assert not port_open("127.0.0.1", port), "the dev server outlived `errands dev`"
    assert not port_open("127.0.0.1", ui_port)


async def test_serve_says_where_it_listens(cli_env) -> None:
    port = free_port()
    async with running_cli(cli_env, "serve", "--port", str(port)) as proc:
        await read_stderr_until(proc, f"errands gateway on http://127.0.0.1:{port}")
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)


async def test_serve_on_a_busy_port_says_so(cli_env) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = await run_cli(cli_env, "serve", "--port", str(port))
    assert result.code == 2
    line = a_clean_refusal(result.stderr)
    assert f"port {port} on 127.0.0.1 is already in use" in line
    assert "--port" in line


# -- help and the docs ----------------------------------------------------------------------


async def test_help_is_plain_text(cli_env) -> None:
    result = await run_cli(cli_env, "--help")
    assert result.code == 0
    assert "``" not in result.stdout
    assert "cancel" in result.stdout


def test_docs_configuration_md_is_the_settings_as_generated() -> None:
    assert CONFIGURATION == render_configuration(), (
        "regenerate docs/configuration.md from errands.settings.render_configuration()"
    )


def test_the_guide_names_every_command_and_the_readme_links_it() -> None:
    parser = _parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for command in commands.choices:
        assert f"errands {command} " in GUIDE, f"docs/guide.md does not show `errands {command}`"
    assert "(docs/guide.md)" in README
    assert "DESIGN.md" not in README


def test_the_operations_doc_names_every_search_attribute() -> None:
    from errands.adapters.devserver import SEARCH_ATTRIBUTES

    for name in SEARCH_ATTRIBUTES:
        assert f"`{name}`" in OPERATIONS


async def test_history_refuses_a_store_that_is_not_there_and_creates_none(
    cli_env, tmp_path: Path
) -> None:
    missing = tmp_path / "elsewhere" / "sessions.db"
    result = await run_cli(
        {**cli_env, "ERRANDS_DATABASE_URL": f"sqlite:///{missing}"}, "history", "s1"
    )
    assert result.code == 2
    assert f"no session store at {missing}" in a_clean_refusal(result.stderr)
    assert not missing.parent.exists()
