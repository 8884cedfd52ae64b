"""examples/from_python.py, run as a Python developer would run it: the plugin on their own
client and worker, a subtask type of their own whose branch calls a typed Python tool."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from errands.devserver import DevServer
from errands.scripted import Call, RecordedRequest, Reply, ScriptedModelServer
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


def test_the_readme_shows_the_example_as_it_is() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## From Python\n", 1)[1].split("\n## ", 1)[0]
    shown = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert shown is not None, "README's From Python section has a python code block"
    assert shown.group(1) == EXAMPLE.read_text()
