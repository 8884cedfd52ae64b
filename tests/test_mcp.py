"""errands.adapters.mcp.client against a real MCP server (tests/mcp_notes_server.py) in a separate
process, over stdio and over Streamable HTTP; plus errands.adapters.mcp.config: the
ERRANDS_MCP_SERVERS parser and the tool names."""

from __future__ import annotations

import base64
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import types

from errands.adapters.devserver import free_port
from errands.adapters.mcp.client import call_tool, list_tools, tool_outcome
from errands.adapters.mcp.config import (
    IDEMPOTENCY_META_KEY,
    McpServerConfig,
    parse_mcp_servers,
    split_tool_name,
    tool_name,
)
from tests.mcp_notes import ROOT, Notes, notes_command, start_listening, stop
from tests.mcp_notes_server import IDEMPOTENCY_META_KEY as SERVER_META_KEY

KEY = "task-1:step-0:call-0"
TOKEN = "t0ken-" + "x" * 20
SECRET = "s3cret-header-value-9f8e7d"
PROVIDER_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
NOTES_TOOLS = ["write", "read", "search", "fail", "sleep"]


@pytest.fixture(scope="module")
def http_notes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Notes]:
    """The notes server as its own process, on Streamable HTTP, behind a bearer token."""
    notes_dir = tmp_path_factory.mktemp("http-notes")
    port = free_port()
    command = notes_command(notes_dir, "--http", str(port), "--token", TOKEN)
    process = start_listening(command, port, notes_dir.parent / "http-notes.log")
    config = McpServerConfig(
        url=f"http://127.0.0.1:{port}/mcp", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    try:
        yield Notes(config, notes_dir)
    finally:
        stop(process)


@pytest.fixture(scope="module")
def stdio_notes(tmp_path_factory: pytest.TempPathFactory) -> Notes:
    """The notes server over stdio: every session starts (and ends) its own process."""
    notes_dir = tmp_path_factory.mktemp("stdio-notes")
    return Notes(McpServerConfig(command=notes_command(notes_dir), cwd=str(ROOT)), notes_dir)


@pytest.fixture(params=["stdio", "http"])
def notes(request: pytest.FixtureRequest) -> Notes:
    return request.getfixturevalue(f"{request.param}_notes")


# -- list_tools ----------------------------------------------------------------------------------


async def test_list_tools_returns_the_five_tools_across_pages(notes: Notes) -> None:
    # The server pages tools/list two at a time: all five means nextCursor was followed.
    tools = await list_tools(notes.config, timeout=30)

    assert [tool.name for tool in tools] == NOTES_TOOLS
    write = tools[0]
    assert write.description == "Write a note called `name` with the given text."
    assert set(write.input_schema["properties"]) == {"name", "text", "delay", "hold"}
    assert write.input_schema["required"] == ["name", "text"]


async def test_list_tools_keeps_only_the_allowed_tools(notes: Notes) -> None:
    config = notes.config.model_copy(update={"tools": ["sleep", "write", "not-on-the-server"]})

    tools = await list_tools(config, timeout=30)

    assert [tool.name for tool in tools] == ["write", "sleep"]


# -- call_tool -----------------------------------------------------------------------------------


async def test_write_creates_the_note_and_the_idempotency_key_reaches_the_server(
    notes: Notes,
) -> None:
    assert IDEMPOTENCY_META_KEY == SERVER_META_KEY == "errands/idempotency_key"

    outcome = await call_tool(
        notes.config,
        "write",
        {"name": "groceries", "text": "milk, eggs"},
        idempotency_key=KEY,
        timeout=30,
    )

    assert (outcome.is_error, outcome.text) == (False, "wrote note groceries")
    assert (notes.dir / "groceries.txt").read_text() == "milk, eggs"
    assert notes.writes("groceries") == [{"name": "groceries", "idempotency_key": KEY}]


async def test_search_finds_the_written_note(notes: Notes) -> None:
    await call_tool(
        notes.config,
        "write",
        {"name": "trip", "text": "pack the zebra-striped umbrella"},
        idempotency_key="task-1:step-1:call-0",
        timeout=30,
    )

    found = await call_tool(
        notes.config, "search", {"query": "zebra"}, idempotency_key="k2", timeout=30
    )
    missing = await call_tool(
        notes.config, "search", {"query": "no-such-word"}, idempotency_key="k3", timeout=30
    )

    assert (found.is_error, found.text.splitlines()) == (False, ["trip"])
    assert (missing.is_error, missing.text) == (False, "no notes match")


async def test_the_tools_error_result_comes_back_as_an_error_outcome(notes: Notes) -> None:
    outcome = await call_tool(notes.config, "fail", {}, idempotency_key=KEY, timeout=30)

    assert (outcome.is_error, outcome.text) == (True, "the fail tool always fails")


async def test_an_unknown_tool_comes_back_as_an_error_outcome(notes: Notes) -> None:
    # The notes server answers an unknown tool with a JSON-RPC error (-32602), not a result.
    outcome = await call_tool(notes.config, "erase_all", {}, idempotency_key=KEY, timeout=30)

    assert outcome.is_error
    assert "Unknown tool: erase_all" in outcome.text
    assert "-32602" in outcome.text


async def test_invalid_arguments_come_back_as_an_error_outcome(notes: Notes) -> None:
    outcome = await call_tool(
        notes.config, "write", {"name": "half"}, idempotency_key=KEY, timeout=30
    )

    assert outcome.is_error
    assert "text" in outcome.text and "Field required" in outcome.text
    assert not (notes.dir / "half.txt").exists()


async def test_a_tool_outside_the_allow_list_is_refused_without_calling_the_server(
    notes: Notes,
) -> None:
    config = notes.config.model_copy(update={"tools": ["search"]})

    outcome = await call_tool(
        config, "write", {"name": "sneaky", "text": "x"}, idempotency_key=KEY, timeout=30
    )

    assert outcome.is_error
    assert "'write'" in outcome.text and "search" in outcome.text
    assert notes.writes("sneaky") == []
    assert not (notes.dir / "sneaky.txt").exists()


async def test_a_call_that_outlasts_the_timeout_raises_timeout_error(notes: Notes) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError) as raised:
        await call_tool(
            notes.config,
            "sleep",
            {"seconds": 5},
            idempotency_key=KEY,
            timeout=1,
            server="notes",
        )
    elapsed = time.monotonic() - started

    # Less than the sleep: the call was abandoned, not waited out. Over stdio, stopping the
    # server process takes part of a 2 s grace period on top of the timeout.
    assert elapsed < 4.5
    message = str(raised.value)
    assert "MCP server 'notes'" in message and "within 1 s" in message


# -- transport failures --------------------------------------------------------------------------


async def test_a_server_that_is_not_running_raises_connection_error_naming_its_url() -> None:
    port = free_port()  # nothing listens there
    config = McpServerConfig(url=f"http://user:{SECRET}@127.0.0.1:{port}/mcp?key={SECRET}")

    with pytest.raises(ConnectionError) as raised:
        await list_tools(config, timeout=10, server="search")

    message = str(raised.value)
    assert f"MCP server 'search' (http://127.0.0.1:{port}/mcp)" in message
    assert "check that the server is running" in message
    assert SECRET not in message


async def test_a_command_that_does_not_exist_raises_connection_error(tmp_path: Path) -> None:
    config = McpServerConfig(command=[str(tmp_path / "no-such-server"), f"--password={SECRET}"])

    with pytest.raises(ConnectionError) as raised:
        await call_tool(config, "write", {}, idempotency_key=KEY, timeout=10, server="notes")

    message = str(raised.value)
    assert message.startswith("cannot start MCP server 'notes'")
    assert "no-such-server" in message and "No such file or directory" in message
    assert SECRET not in message


async def test_a_command_that_exits_at_once_raises_connection_error() -> None:
    config = McpServerConfig(command=[sys.executable, "-c", "pass"])

    with pytest.raises(ConnectionError) as raised:
        await list_tools(config, timeout=10)

    assert "closed the connection" in str(raised.value)


async def test_the_right_bearer_token_is_let_in(http_notes: Notes) -> None:
    tools = await list_tools(http_notes.config, timeout=30)

    assert [tool.name for tool in tools] == NOTES_TOOLS


@pytest.mark.parametrize("headers", [{"Authorization": "Bearer wrong"}, {}])
async def test_a_wrong_or_missing_token_raises_connection_error_naming_401(
    http_notes: Notes, headers: dict[str, str]
) -> None:
    config = http_notes.config.model_copy(update={"headers": headers})

    with pytest.raises(ConnectionError) as raised:
        await call_tool(
            config, "write", {"name": "x", "text": "y"}, idempotency_key=KEY, timeout=30
        )

    assert "HTTP 401" in str(raised.value)
    assert "Bearer wrong" not in str(raised.value)
    assert http_notes.writes("x") == []


@pytest.fixture
def not_an_mcp_server(tmp_path: Path) -> Iterator[str]:
    """Python's http.server in its own process: it answers every POST with 501."""
    port = free_port()
    command = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    process = start_listening(command + ["--directory", str(tmp_path)], port, tmp_path / "log")
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(process)


async def test_an_http_5xx_raises_connection_error_naming_the_status(
    not_an_mcp_server: str,
) -> None:
    config = McpServerConfig(url=not_an_mcp_server)

    with pytest.raises(ConnectionError) as raised:
        await call_tool(config, "write", {}, idempotency_key=KEY, timeout=10)

    assert f"({not_an_mcp_server}) answered HTTP 501" in str(raised.value)


# -- tool results --------------------------------------------------------------------------------


@pytest.mark.fast
def test_a_result_becomes_text_with_non_text_content_summarised() -> None:
    png = base64.b64encode(b"\x89PNG" + bytes(1230)).decode()
    result = types.CallToolResult(
        content=[
            types.TextContent(text="first"),
            types.ImageContent(data=png, mime_type="image/png"),
            types.AudioContent(data=base64.b64encode(b"abcde").decode(), mime_type="audio/wav"),
            types.EmbeddedResource(
                resource=types.BlobResourceContents(
                    uri="file:///a.bin", blob=base64.b64encode(b"xy").decode()
                )
            ),
            types.ResourceLink(name="report", uri="file:///report.pdf"),
            types.TextContent(text="last"),
        ],
        structured_content={"ignored": "because there is text"},
    )

    outcome = tool_outcome(result)

    assert outcome.text.splitlines() == [
        "first",
        "[image: image/png, 1234 bytes]",
        "[audio: audio/wav, 5 bytes]",
        "[resource: file:///a.bin, application/octet-stream, 2 bytes]",
        "[resource link: report, file:///report.pdf]",
        "last",
    ]
    assert outcome.is_error is False


@pytest.mark.fast
def test_structured_content_is_the_text_when_there_is_no_text() -> None:
    result = types.CallToolResult(content=[], structured_content={"total": 3}, is_error=True)

    assert tool_outcome(result).model_dump() == {"text": '{"total": 3}', "is_error": True}


# -- ERRANDS_MCP_SERVERS -------------------------------------------------------------------------


@pytest.mark.fast
def test_parse_accepts_both_kinds_of_server() -> None:
    raw = json.dumps(
        {
            "notes": {
                "command": ["python", "-m", "notes"],
                "env": {"NOTES_TOKEN": SECRET},
                "cwd": "/srv",
                "tools": ["write", "search"],
                "for": ["main", "review"],
                "approval": {"write": "ask", "search": "never"},
            },
            "web-search_2": {
                "url": "https://search.example.com/mcp",
                "headers": {"Authorization": f"Bearer {SECRET}"},
                "for": ["*"],
                "approval": {"fetch": "always"},
                "timeout_seconds": 12.5,
            },
        }
    )

    servers = parse_mcp_servers(raw)

    assert list(servers) == ["notes", "web-search_2"]
    notes, web = servers["notes"], servers["web-search_2"]
    assert (notes.command, notes.env, notes.cwd, notes.url) == (
        ["python", "-m", "notes"],
        {"NOTES_TOKEN": SECRET},
        "/srv",
        None,
    )
    assert (notes.tools, notes.for_, notes.timeout_seconds) == (
        ["write", "search"],
        ["main", "review"],
        60,
    )
    assert (notes.approval_of("write"), notes.approval_of("unlisted")) == ("ask", "never")
    assert (web.url, web.headers, web.command) == (
        "https://search.example.com/mcp",
        {"Authorization": f"Bearer {SECRET}"},
        None,
    )
    assert (web.tools, web.for_, web.timeout_seconds) == (None, ["*"], 12.5)
    assert web.approval_of("fetch") == "always"
    assert SECRET not in repr(servers)
    assert web.model_dump()["for"] == ["*"]


@pytest.mark.fast
def test_parse_defaults_and_empty_values() -> None:
    assert parse_mcp_servers(None) == {}
    assert parse_mcp_servers("  ") == {}
    assert parse_mcp_servers("{}") == {}
    config = parse_mcp_servers('{"s": {"url": "http://127.0.0.1:9/mcp"}}')["s"]
    assert (config.for_, config.tools, config.approval, config.timeout_seconds) == (
        ["main", "*"],
        None,
        {},
        60,
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"s": {"url": ', ["is not valid JSON", "line 1 column 15", "give an object"]),
        ('["s"]', ["must be a JSON object", "not a list"]),
        ('{"bad name": {"url": "http://h"}}', ["server name 'bad name'", "1 to 32 letters"]),
        (json.dumps({"s" * 33: {"url": "http://h"}}), ["is not allowed", "1 to 32"]),
        ('{"a__b": {"url": "http://h"}}', ["'a__b' is not allowed", "without '__'"]),
        ('{"s": "http://h"}', ["server 's' must be an object", "not a string"]),
        (
            '{"s": {"command": ["x"], "url": "http://h"}}',
            ["server 's'", 'exactly one of "command"', '"url"', "not both"],
        ),
        ('{"s": {"tools": ["a"]}}', ["server 's'", 'exactly one of "command"']),
        (
            '{"s": {"url": "http://h", "timeout": 5}}',
            ["server 's'", "unknown field 'timeout'", "timeout_seconds"],
        ),
        ('{"s": {"url": "http://h", "for_": ["main"]}}', ["unknown field 'for_'", "for"]),
        (
            '{"s": {"command": "python server.py"}}',
            ["server 's'", "field 'command'", "valid list", "non-empty list of strings"],
        ),
        ('{"s": {"command": []}}', ["field 'command'", "at least 1 item"]),
        ('{"s": {"command": [" "]}}', ["field 'command'", "the program to run, is empty"]),
        ('{"s": {"url": "ftp://h/mcp"}}', ["field 'url'", "http:// or https://"]),
        ('{"s": {"url": "http://h:port/mcp"}}', ["field 'url'", "port is not a number"]),
        ('{"s": {"url": "http://h", "for": "main"}}', ["field 'for'", '"main", "*"']),
        (
            '{"s": {"url": "http://h", "approval": {"write": "sometimes"}}}',
            ["field 'approval.write'", "'never', 'ask', 'always', 'approver' or 'two'"],
        ),
        (
            '{"s": {"url": "http://h", "timeout_seconds": 0}}',
            ["field 'timeout_seconds'", "greater than 0", "seconds above 0"],
        ),
        ('{"s": {"url": "http://h", "tools": [7]}}', ["field 'tools.0'", "valid string"]),
        ('{"s": {"url": "http://h", "env": {"A": "b"}}}', ['"env" and "cwd" are for a "command"']),
        ('{"s": {"url": "http://h"}, "s": {"url": "http://i"}}', ["the key 's' twice"]),
    ],
)
@pytest.mark.fast
def test_parse_rejects_a_bad_setting_in_one_line(raw: str, expected: list[str]) -> None:
    with pytest.raises(ValueError) as raised:
        parse_mcp_servers(raw)

    message = str(raised.value)
    assert message.startswith("ERRANDS_MCP_SERVERS")
    assert "\n" not in message
    for fragment in expected:
        assert fragment in message


@pytest.mark.parametrize(
    "server",
    [
        {"command": ["x"], "headers": {"Authorization": SECRET}},
        {"url": "http://h", "headers": {"Authorization": SECRET}, "timeout": 1},
        {"url": "http://h", "headers": {"Authorization": [SECRET]}},
        {"url": f"ftp://u:{SECRET}@h/?token={SECRET}", "headers": {"X-Key": SECRET}},
        {"url": "http://h", "command": ["x"], "headers": {"X-Key": SECRET}},
        {"url": "http://h", "headers": {"X-Key": SECRET}, "timeout_seconds": "soon"},
    ],
)
def test_parse_errors_never_show_a_header_value(server: dict[str, object]) -> None:
    with pytest.raises(ValueError) as raised:
        parse_mcp_servers(json.dumps({"s": server}))

    assert str(raised.value).startswith("ERRANDS_MCP_SERVERS: server 's'")
    assert SECRET not in str(raised.value)


@pytest.mark.fast
def test_parse_errors_never_show_a_header_value_in_broken_json() -> None:
    header = json.dumps({"A": SECRET})
    duplicate = '{"s": {"url": "http://h", "headers": {"A": "x", ' + header[1:-1] + "}}}"
    unclosed = '{"s": {"url": "http://h", "headers": ' + header

    for raw in (duplicate, unclosed):
        with pytest.raises(ValueError) as raised:
            parse_mcp_servers(raw)
        assert str(raised.value).startswith("ERRANDS_MCP_SERVERS")
        assert SECRET not in str(raised.value)


# -- tool names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("server", "tool"),
    [("notes", "write"), ("my-server_2", "read_file"), ("s", "a__b"), ("s", "_leading")],
)
def test_tool_names_round_trip(server: str, tool: str) -> None:
    name = tool_name(server, tool)

    assert name == f"mcp__{server}__{tool}"
    assert split_tool_name(name) == (server, tool)


@pytest.mark.fast
def test_split_tool_name_refuses_names_tool_name_cannot_make() -> None:
    for name in ("write", "mcp__notes", "mcp__notes__", "mcp____write", "mcp__a b__write"):
        assert split_tool_name(name) is None, name


@pytest.mark.fast
def test_tool_names_are_sanitised_and_stay_distinct() -> None:
    dotted = tool_name("notes", "files.read/all")
    underscored = tool_name("notes", "files_read_all")
    long_a = tool_name("s" * 32, "x" * 80 + "a")
    long_b = tool_name("s" * 32, "x" * 80 + "b")

    for name in (dotted, underscored, long_a, long_b):
        assert PROVIDER_NAME.match(name), name
    assert underscored == "mcp__notes__files_read_all"
    assert re.fullmatch(r"mcp__notes__files_read_all_[0-9a-f]{8}", dotted)
    assert len(long_a) == len(long_b) == 64 and long_a != long_b
    assert long_a.startswith("mcp__" + "s" * 32 + "__xxxx")
    assert split_tool_name(dotted) == ("notes", dotted.removeprefix("mcp__notes__"))
    assert tool_name("notes", "files.read/all") == dotted  # the same on every worker


@pytest.mark.fast
def test_tool_name_refuses_a_bad_server_name() -> None:
    for server in ("", "a b", "a__b", "trailing_", "s" * 33):
        with pytest.raises(ValueError):
            tool_name(server, "write")
