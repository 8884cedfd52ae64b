"""The CLI and its settings against bad input (issue 23, item 8): secrets in URLs masked by one
function wherever a URL is shown; an invalid ERRANDS_MCP_SERVERS, a setting or an argument that
is not UTF-8, a one-line error and exit 2 for every command; SIGTERM stops `errands serve`
quietly."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from typing import Any

import pytest
from temporalio.client import Client

from errands.adapters.devserver import free_port
from errands.adapters.scripted import ScriptedModelServer
from errands.client import task_input
from errands.client._task_calls import TASK_WORKFLOW
from errands.contracts import search
from errands.contracts.urls import SECRET_PARAMETERS, masked_url
from errands.settings import Settings
from tests.conftest import read_stderr_until, run_cli, running_cli
from tests.helpers import DATABASE, ask, final, until_waiting
from tests.test_ask_user import MODEL
from tests.test_cli_usage import a_clean_refusal

COMMANDS = [
    ["config"],
    ["status", "task-x"],
    ["wait", "task-x"],
    ["run", "hello"],
    ["run", "hello", "--detach"],
    ["history", "s-1"],
    ["watch", "task-x"],
    ["answer", "task-x", "q1=yes"],
    ["say", "task-x", "hi"],
    ["btw", "task-x", "what now?"],
    ["cancel", "task-x"],
    ["worker"],
    ["serve", "--port", "0"],
    ["dev", "--port", "0"],
    ["principals", "list"],
]
"""Every kind of command: each must refuse bad input the same way."""
IDS = [" ".join(c[:2]) if c[0] == "run" and len(c) > 2 else c[0] for c in COMMANDS]


# -- one masking function for URLs ----------------------------------------------------------


@pytest.mark.fast
@pytest.mark.parametrize(
    "name",
    [
        *sorted(SECRET_PARAMETERS),
        "api-key",
        "API_KEY",
        "X-Api-Key",
        "client_secret",
        "refresh_token",
    ],
)
def test_a_secret_query_parameter_is_masked(name: str) -> None:
    url = f"https://proxy.example/v1?model=x&{name}=s3cr3t-value&mode=fast#top"
    assert masked_url(url) == f"https://proxy.example/v1?model=x&{name}=****&mode=fast#top"


@pytest.mark.fast
@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://app:hunter2@db:5432/app", "postgresql://app:****@db:5432/app"),
        (
            "postgresql://app:p@ss:w@db/app?sslmode=require",
            "postgresql://app:****@db/app?sslmode=require",
        ),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("sqlite:///var/lib/errands/sessions.db", "sqlite:///var/lib/errands/sessions.db"),
        ("https://host/x?keyboard=1&monkey=2#keys", "https://host/x?keyboard=1&monkey=2#keys"),
        ("http://[::1/?token=abc", "****"),
        ("https://ghp_T0KEN@github.com/o/r.git", "https://****@github.com/o/r.git"),
        ("wss://T0KEN@stream.example/v1", "wss://****@stream.example/v1"),
        ("postgresql://app@db/app", "postgresql://app@db/app"),
        (
            "https://app.example/cb#access_token=T0KEN&token_type=bearer&state=x",
            "https://app.example/cb#access_token=****&token_type=bearer&state=x",
        ),
        (
            "https://acct.blob.core.windows.net/c/b?sv=2024-11-04&se=2027&sig=S1G%3D#part",
            "https://acct.blob.core.windows.net/c/b?sv=2024-11-04&se=2027&sig=****#part",
        ),
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA&X-Amz-Signature=ab12",
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA&X-Amz-Signature=****",
        ),
        ("https://host/p#/callback?token=T0KEN&x=1", "https://host/p#/callback?token=****&x=1"),
    ],
    ids=[
        "password",
        "password-with-@-and-:",
        "plain",
        "sqlite",
        "look-alikes",
        "unreadable",
        "token-as-user",
        "token-as-user-websocket",
        "database-user-is-a-name",
        "oauth-fragment",
        "azure-sas-sig",
        "aws-signature",
        "a-query-inside-a-fragment",
    ],
)
def test_a_url_keeps_everything_but_its_secrets(url: str, expected: str) -> None:
    assert masked_url(url) == expected


async def test_config_masks_every_secret_in_every_url(cli_env: dict[str, str]) -> None:
    secrets = ["hunter2pw", "sslpw-42", "openai-key-9", "anth-token-7", "ui-token-5"]
    env = {
        **cli_env,
        "ERRANDS_DATABASE_URL": (
            f"postgresql://app:{secrets[0]}@127.0.0.1:5432/test?sslpassword={secrets[1]}"
        ),
        "OPENAI_BASE_URL": f"http://127.0.0.1:9/v1?api-key={secrets[2]}&region=eu",
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:9/?access_token={secrets[3]}",
        "ERRANDS_TEMPORAL_UI_URL": f"http://ui.example/?token={secrets[4]}",
    }
    text = await run_cli(env, "config")
    as_json = await run_cli(env, "config", "--json")
    for shown in (text, as_json):
        assert shown.code == 0, shown.stderr
        leaked = [s for s in secrets if s in shown.stdout or s in shown.stderr]
        assert not leaked, shown.stdout
    report = as_json.json()
    assert report["ERRANDS_DATABASE_URL"]["value"] == (
        "postgresql://app:****@127.0.0.1:5432/test?sslpassword=****"
    )
    assert report["OPENAI_BASE_URL"]["value"] == "http://127.0.0.1:9/v1?api-key=****&region=eu"
    assert report["ANTHROPIC_BASE_URL"]["value"] == "http://127.0.0.1:9/?access_token=****"
    assert "token=****" in report["ERRANDS_TEMPORAL_UI_URL"]["value"]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OPENAI_BASE_URL", "ftp://proxy.example/v1?api-key=never-shown-1"),
        ("ERRANDS_DATABASE_URL", "file:sessions.db?mode=memory&password=never-shown-1"),
        ("ERRANDS_DATABASE_URL", "mysql://app:never-shown-1@db/app?token=never-shown-1"),
    ],
    ids=["base-url", "in-memory-store", "unsupported-store"],
)
async def test_a_refused_url_setting_does_not_repeat_its_secret(
    cli_env: dict[str, str], variable: str, value: str
) -> None:
    result = await run_cli({**cli_env, variable: value}, "config")
    assert result.code == 2
    line = a_clean_refusal(result.stderr)
    assert variable in line and "never-shown-1" not in line


# -- bad settings and arguments: one line, exit 2, every command ------------------------------


@pytest.mark.parametrize("args", COMMANDS, ids=IDS)
async def test_invalid_mcp_servers_json_is_one_line_and_exit_2(
    cli_env: dict[str, str], args: list[str]
) -> None:
    result = await run_cli({**cli_env, "ERRANDS_MCP_SERVERS": '{"notes": {"command": '}, *args)
    assert result.code == 2, result.stderr
    line = a_clean_refusal(result.stderr)
    assert "ERRANDS_MCP_SERVERS" in line and "not valid JSON" in line


@pytest.mark.parametrize(
    ("servers", "says"),
    [
        ('{"notes": {"command": "python"}}', "server 'notes': field 'command'"),
        ('{"notes": {}}', "server 'notes'"),
        ('["notes"]', "ERRANDS_MCP_SERVERS"),
        ('{"web": {"url": "https://x/mcp", "headers": {"Authorization": 5}}}', "server 'web'"),
    ],
    ids=["command-not-a-list", "neither-command-nor-url", "not-an-object", "bad-header"],
)
@pytest.mark.parametrize("args", [["config"], ["status", "task-x"], ["worker"]], ids=str)
async def test_an_invalid_mcp_server_is_one_line_and_exit_2(
    cli_env: dict[str, str], servers: str, says: str, args: list[str]
) -> None:
    result = await run_cli({**cli_env, "ERRANDS_MCP_SERVERS": servers}, *args)
    assert result.code == 2, result.stderr
    line = a_clean_refusal(result.stderr)
    assert line.startswith("errands: ERRANDS_MCP_SERVERS is not allowed: ")
    assert says in line


async def test_a_refused_mcp_setting_does_not_repeat_its_headers(cli_env: dict[str, str]) -> None:
    servers = (
        '{"web": {"url": "https://x/mcp", "headers": {"Authorization": "Bearer tok-88"}, "x": 1}}'
    )
    result = await run_cli({**cli_env, "ERRANDS_MCP_SERVERS": servers}, "config")
    assert result.code == 2
    assert "tok-88" not in a_clean_refusal(result.stderr)


@pytest.mark.parametrize("args", COMMANDS, ids=IDS)
async def test_an_argument_that_is_not_utf8_is_one_line_and_exit_2(
    cli_env: dict[str, str], args: list[str]
) -> None:
    bad = os.fsdecode(b"caf\xe9")  # Latin-1 bytes, as a misconfigured terminal sends them
    given = [*args[:-1], args[-1] + bad] if len(args) > 1 else [*args, bad]
    result = await run_cli(cli_env, *given)
    assert result.code == 2, result.stderr
    line = a_clean_refusal(result.stderr)
    assert f"argument {len(given)} (" in line and r"caf\xe9" in line and "not UTF-8" in line


@pytest.mark.parametrize("args", [["config"], ["status", "task-x"], ["run", "hi"]], ids=str)
async def test_a_setting_that_is_not_utf8_is_one_line_and_exit_2(
    cli_env: dict[str, str], args: list[str]
) -> None:
    env = {**cli_env, "ERRANDS_SUBTASK_TYPES": os.fsdecode(b"mod\xff:TYPES")}
    result = await run_cli(env, *args)
    assert result.code == 2, result.stderr
    line = a_clean_refusal(result.stderr)
    assert "ERRANDS_SUBTASK_TYPES is not UTF-8" in line


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["watch", "task-x", "--after", "9" * 20], "is not a position: use 0 to"),
        (["watch", "task-x", "--after", "-1"], "is not a position: use 0 to"),
        (["serve", "--port", "70000"], "is not a TCP port: use 0 to 65535"),
        (["dev", "--port", "0x50"], "is not a TCP port: use 0 to 65535"),
    ],
    ids=["after 20 digits", "after -1", "port 70000", "port 0x50"],
)
async def test_a_number_out_of_its_bounds_is_refused_before_use(
    cli_env: dict[str, str], args: list[str], said: str
) -> None:
    result = await run_cli(cli_env, *args)
    assert result.code == 2 and "Traceback" not in result.stderr, result.stderr
    assert said in result.stderr


# -- a quiet stop -----------------------------------------------------------------------------


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_serve_stops_quietly_on_a_signal(
    cli_env: dict[str, str], stop: signal.Signals
) -> None:
    port = free_port()
    async with running_cli(cli_env, "serve", "--port", str(port)) as proc:
        await read_stderr_until(proc, f"errands gateway on http://127.0.0.1:{port}")
        proc.send_signal(stop)
        code = await asyncio.wait_for(proc.wait(), 60)
        assert proc.stderr is not None
        rest = (await proc.stderr.read()).decode()
    assert code == (0 if stop == signal.SIGTERM else 130), rest
    assert "Traceback" not in rest and "ERROR" not in rest, rest


# -- a task id the CLI is given is printed as text ------------------------------------------


async def test_a_task_id_with_control_characters_is_echoed_escaped_by_every_command(
    client: Client,
    worker: Any,
    settings: Settings,
    cli_env: dict[str, str],
    scripted: ScriptedModelServer,
) -> None:
    """Such an id is refused by every frontend now; a task started under one by other means
    (before, or straight through Temporal) is still answered, and its id shown as text."""
    scripted.script("gpt-ask", ask(DATABASE), final("no choice then"))
    weird = f"task-\x1b]0;owned\x07-\x9b2J-{uuid.uuid4().hex[:6]}"
    data = task_input(settings, "Set it up", session="cli-ids", model=MODEL).model_copy(
        update={"task_id": weird}
    )
    await client.start_workflow(
        TASK_WORKFLOW,
        data,
        id=weird,
        task_queue=settings.task_queue,
        search_attributes=search.initial("cli-ids"),
    )
    await until_waiting(client.get_workflow_handle(weird))
    env = {**cli_env, "ERRANDS_MODEL": MODEL}
    dismissed = await run_cli(env, "answer", weird, "--dismiss")
    assert dismissed.code == 0, dismissed
    await client.get_workflow_handle(weird).result()
    status = await run_cli(env, "status", weird)
    assert status.code == 0, status
    ended = await run_cli(env, "cancel", weird)
    assert ended.code == 2 and "has already ended" in ended.stderr, ended
    for printed in (dismissed.stdout, status.stdout, ended.stderr):
        assert not any(c in printed for c in "\x1b\x07\x9b"), printed
        assert "task-\\x1b]0;owned\\x07-\\x9b2J" in printed, printed
