"""The CLI's settings: every bad value refused at start in one line naming it (exit 2), the
effective settings printed with secrets masked, and `run --detach` printing the bare id."""

from __future__ import annotations

import re

import pytest

from errands.adapters.scripted import ScriptedModelServer
from tests.conftest import run_cli
from tests.helpers import final
from tests.test_cli_usage import a_clean_refusal

BAD = [
    ("ERRANDS_LOG_LEVEL", "LOUD", ["status", "x"]),
    ("ERRANDS_SUBTASK_TYPES", "no-colon-here", ["status", "x"]),
    ("ERRANDS_SUBTASK_TYPES", "no_such_module_here:TYPES", ["worker"]),
    ("ERRANDS_METRICS_BIND", "everywhere", ["worker"]),
    ("ERRANDS_ADVISOR_MODEL", "gpt-4", ["run", "x"]),
    ("ERRANDS_FALLBACK_MODEL", "claude", ["run", "x"]),
    ("ERRANDS_STEP_BUDGET", "0", ["run", "x"]),
    ("ERRANDS_ASK_TIMEOUT", "soon", ["run", "x"]),
    ("ERRANDS_MAX_SUBTASKS", "many", ["config"]),
]


@pytest.mark.parametrize(("variable", "value", "args"), BAD, ids=[f"{b[0]}={b[1]}" for b in BAD])
async def test_a_bad_setting_exits_2_with_one_line_naming_it(
    cli_env: dict[str, str], variable: str, value: str, args: list[str]
) -> None:
    result = await run_cli({**cli_env, variable: value}, *args)
    assert result.code == 2, result.stderr
    assert variable in a_clean_refusal(result.stderr)


async def test_config_prints_the_effective_settings_with_secrets_masked(
    cli_env: dict[str, str],
) -> None:
    key = "sk-live-" + "abcdef" * 5
    env = {**cli_env, "OPENAI_API_KEY": key, "ERRANDS_STEP_BUDGET": "7"}
    shown = await run_cli(env, "config", "--json")
    assert shown.code == 0, shown.stderr
    report = shown.json()
    assert report["ERRANDS_STEP_BUDGET"]["value"] == 7
    assert report["ERRANDS_STEP_BUDGET"]["default"] is False
    assert report["ERRANDS_MAX_SUBTASKS"]["default"] is True
    assert key not in shown.stdout and key[-4:] in report["OPENAI_API_KEY"]["value"]
    text = await run_cli(env, "config")
    assert text.code == 0 and key not in text.stdout
    assert re.search(r"^ERRANDS_STEP_BUDGET\s+7\b", text.stdout, re.M), text.stdout


async def test_run_detach_prints_the_bare_task_id(
    cli_env: dict[str, str], worker: object, scripted: ScriptedModelServer
) -> None:
    scripted.script("gpt-detach", final("detached"))
    env = {**cli_env, "ERRANDS_MODEL": "openai:gpt-detach"}
    started = await run_cli(env, "run", "go", "--detach")
    assert started.code == 0, started.stderr
    task_id = started.stdout.strip()
    assert re.fullmatch(r"task-s-[0-9a-f]{8}-[0-9a-f]{16}", task_id), started.stdout
    waited = await run_cli(env, "wait", task_id, "--json", "--timeout", "60")
    assert waited.json()["reply"] == "detached"
