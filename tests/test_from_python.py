"""examples/from_python.py, run as a Python developer would run it: the plugin on their own
client and worker, a subtask type of their own whose branch calls a typed Python tool."""

from __future__ import annotations

import asyncio
import importlib
import os
import re
from pathlib import Path
from typing import Any

import pytest
from temporalio.worker import Worker

from errands.adapters.devserver import DevServer
from errands.adapters.scripted import Call, RecordedRequest, Reply, ScriptedModelServer
from errands.settings import Settings
from tests.conftest import OPENAI_KEY, ROOT
from tests.helpers import Conversation

EXAMPLE = ROOT / "examples" / "from_python.py"
ARGUMENTS = {"amount": 250, "source": "EUR", "target": "USD"}
FINAL = "250 euros are 270 US dollars at today's rate."


def tool_messages(request: RecordedRequest) -> list[dict[str, Any]]:
    return [m for m in request.body["messages"] if m["role"] == "tool"]


def fx_branch(request: RecordedRequest) -> Reply:
    if not tool_messages(request):
        return Reply(calls=[Call("convert", ARGUMENTS)])
    return Reply(text="250 EUR is 270.0 USD.")


@pytest.fixture
def example_env(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    dev_server: DevServer,
    model_server: ScriptedModelServer,
) -> None:
    for name in ("ERRANDS_SUBTASK_TYPES", "ERRANDS_TASK_QUEUE", "ERRANDS_FALLBACK_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TEMPORAL_ADDRESS", dev_server.address)
    monkeypatch.setenv("ERRANDS_MODEL", "openai:gpt-fx")
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ERRANDS_DATABASE_URL", f"sqlite:///{tmp_path / 'sessions.db'}")


async def test_the_example_delegates_to_its_own_type_whose_branch_runs_the_python_tool(
    example_env: None, scripted: ScriptedModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    example = importlib.import_module("examples.from_python")
    example.calls.clear()
    convo = Conversation(
        [
            Reply(
                calls=[
                    Call(
                        "delegate",
                        {
                            "reply": "Converting.",
                            "subtasks": [{"type": "fx", "prompt": "250 EUR in USD"}],
                        },
                    )
                ]
            ),
            Reply(calls=[Call("final_reply", {"text": FINAL})]),
        ],
        fx_branch,
        branches=2,
    ).install(scripted, "gpt-fx")

    result = await example.main()

    assert result.status == "replied"
    assert capsys.readouterr().out == FINAL + "\n"
    assert example.calls == [ARGUMENTS], "the tool ran once, with the model's arguments"
    offered, answered = convo.branch_requests
    assert [t["function"]["name"] for t in offered.body["tools"]] == ["convert"]
    assert [m["content"] for m in tool_messages(answered)] == ["270.0"]


def python_block(path: Path, heading: str) -> str:
    """The first python code block of the ``## heading`` section of a markdown file."""
    section = path.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    shown = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert shown is not None, f"{path.name}'s {heading} section has a python code block"
    return shown.group(1)


def test_the_guide_shows_the_example_as_it_is() -> None:
    assert python_block(ROOT / "docs" / "guide.md", "From Python") == EXAMPLE.read_text()


async def test_the_readmes_python_runs_a_task_and_prints_its_events_and_reply(
    monkeypatch: pytest.MonkeyPatch,
    dev_server: DevServer,
    model_server: ScriptedModelServer,
    settings: Settings,
    worker: Worker,
    scripted: ScriptedModelServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in [n for n in os.environ if n.startswith(("ERRANDS_", "OPENAI_", "ANTHROPIC_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPORAL_ADDRESS", dev_server.address)
    monkeypatch.setenv("ERRANDS_TASK_QUEUE", settings.task_queue)
    monkeypatch.setenv("ERRANDS_DATABASE_URL", settings.session_database_url())
    monkeypatch.setenv("ERRANDS_MODEL", "openai:gpt-readme")
    scripted.script("gpt-readme", Reply(calls=[Call("final_reply", {"text": FINAL})]))
    code = python_block(ROOT / "README.md", "From Python")

    # As a user runs it: a program of its own, with its own asyncio.run (here in a thread, so
    # the session's loop keeps running the worker meanwhile).
    await asyncio.to_thread(exec, compile(code, "README.md", "exec"), {"__name__": "__main__"})

    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "1 task_started"
    assert lines[-2].endswith(" replied")
    assert lines[-1] == FINAL
