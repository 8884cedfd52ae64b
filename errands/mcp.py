"""Work tools from MCP servers: the ``ERRANDS_MCP_SERVERS`` settings and a client for one server.

``ERRANDS_MCP_SERVERS`` is a JSON object of server name to settings; a server is either a program
that speaks MCP on stdin/stdout or a Streamable HTTP endpoint::

    {
      "notes": {"command": ["python", "-m", "notes_server"], "env": {"NOTES_DIR": "/srv/notes"}},
      "search": {
        "url": "https://search.example.com/mcp",
        "headers": {"Authorization": "Bearer …"},
        "tools": ["search"],
        "for": ["main"],
        "approval": {"search": "never"},
        "timeout_seconds": 30
      }
    }

A model sees a server's tool under ``tool_name(server, tool)``: ``mcp__<server>__<tool>``.

The client is two functions, ``list_tools`` and ``call_tool``. Each opens its own session
(connect, initialize, one request, close) and keeps nothing between calls, so any worker can run
any call, and a crashed server costs one call rather than a broken connection.

Failures fall in two groups:

- the server cannot be reached or does not answer (a stdio program that will not start or exits,
  a refused connection, an HTTP error status, the timeout): ``ConnectionError`` or
  ``TimeoutError`` (the builtins), whose message names the server and what to check;
- the server answers the call with a failure (the tool's own error result, or a JSON-RPC error
  such as an unknown tool or invalid arguments): a ``ToolOutcome`` with ``is_error=True`` and the
  server's text, for the model to read and repair.

This module imports nothing from Temporal: activities call it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, cast
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from errands import __version__

SETTING = "ERRANDS_MCP_SERVERS"
IDEMPOTENCY_META_KEY = "errands/idempotency_key"
"""The ``_meta`` key of a ``tools/call`` request that carries the call's idempotency key."""
TOOL_NAME_PREFIX = "mcp__"

Approval = Literal["never", "ask", "always"]
_Name = Annotated[str, Field(min_length=1)]

_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
_NOT_TOOL_NAME_CHAR = re.compile(r"[^A-Za-z0-9_-]")
_MAX_TOOL_NAME = 64
"""Providers accept tool names of ``^[a-zA-Z0-9_-]{1,64}$``."""
_DIGEST_CHARS = 8
_CLIENT_INFO = types.Implementation(name="errands", version=__version__)
_EXAMPLE = (
    '{"notes": {"command": ["python", "-m", "notes_server"]}, "web": {"url": "https://…/mcp"}}'
)
_EXPECTED = {
    "command": 'a non-empty list of strings, e.g. ["npx", "-y", "some-mcp-server"]',
    "env": "an object of variable name to string value",
    "cwd": "a directory path",
    "url": "an http:// or https:// URL",
    "headers": "an object of header name to string value",
    "tools": "a list of tool names, or null for all of them",
    "for": '"main", "*" or subtask type keys, e.g. ["main", "*"]',
    "approval": 'an object of tool name to "never", "ask" or "always"',
    "timeout_seconds": "a number of seconds above 0",
}
"""What each field takes, for the error messages of ``parse_mcp_servers``."""

T = TypeVar("T")


# -- settings ------------------------------------------------------------------------------------


class McpServerConfig(BaseModel):
    """One server of ``ERRANDS_MCP_SERVERS``: how to reach it and which of its tools errands uses.

    Exactly one of ``command`` (a stdio server: the program and its arguments, started with
    ``env`` added to a minimal environment of PATH, HOME and the like, in ``cwd``) and ``url`` (a
    Streamable HTTP endpoint, sent ``headers`` with every request). ``env`` and ``headers`` may
    hold secrets, so they stay out of ``repr`` and out of every error message.
    """

    model_config = ConfigDict(
        extra="forbid", validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )

    command: list[str] | None = Field(default=None, min_length=1)
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    tools: list[_Name] | None = None
    """The server's tools errands offers, by their server-side names; ``None`` offers them all."""
    for_: list[_Name] = Field(default_factory=lambda: ["main", "*"], alias="for")
    """Who gets the tools: ``"main"`` (the main agent), ``"*"`` (every subtask type) or subtask
    type keys."""
    approval: dict[_Name, Approval] = Field(default_factory=dict)
    """Per server-side tool name, whether a call waits for the user's approval; ``"never"`` for a
    tool not listed (see ``approval_of``)."""
    timeout_seconds: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    """How long one exchange with the server (connect, initialize, request) may take."""

    @field_validator("command")
    @classmethod
    def _program_given(cls, command: list[str] | None) -> list[str] | None:
        if command is not None and not command[0].strip():
            raise ValueError("its first item, the program to run, is empty")
        return command

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        # The message never repeats the URL: it may carry credentials.
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError("it is not an http:// or https:// URL with a host")
            try:
                parts.port  # noqa: B018 - urlsplit checks the port only when asked for it
            except ValueError:
                raise ValueError("its port is not a number from 0 to 65535") from None
        return url

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                'give exactly one of "command" (a stdio server) and "url" (a Streamable HTTP '
                "server)" + (", not both" if self.command is not None else "")
            )
        given = self.model_fields_set
        if self.url is not None and given & {"env", "cwd"}:
            raise ValueError('"env" and "cwd" are for a "command" server, not a "url" one')
        if self.command is not None and "headers" in given:
            raise ValueError('"headers" are for a "url" server, not a "command" one')
        return self

    def approval_of(self, tool: str) -> Approval:
        """The approval setting of the server-side tool ``tool``."""
        return self.approval.get(tool, "never")


def parse_mcp_servers(raw: str | None) -> dict[str, McpServerConfig]:
    """The servers of ``ERRANDS_MCP_SERVERS`` by name; ``{}`` when it is unset or blank.

    Raises ``ValueError`` with one line that starts with ``ERRANDS_MCP_SERVERS`` and says what is
    wrong (naming the server and the field) and what is expected. Values are never repeated, so
    a header or environment secret cannot end up in a log.
    """
    if raw is None or not raw.strip():
        return {}
    try:
        document = json.loads(raw, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{SETTING} is not valid JSON ({error.msg} at line {error.lineno} column "
            f"{error.colno}); give an object of server name to settings, e.g. {_EXAMPLE}"
        ) from None
    if not isinstance(document, dict):
        raise ValueError(
            f"{SETTING} must be a JSON object of server name to settings, not "
            f"{_json_kind(document)}; e.g. {_EXAMPLE}"
        )
    return {name: _parse_server(name, value) for name, value in document.items()}


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads`` keeps the last of two equal keys; a second server of one name is a mistake.

    The ``ValueError`` passes through ``json.loads`` unchanged.
    """
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(
                f"{SETTING} gives the key {key[:40]!r} twice in one object; give it once"
            )
        found[key] = value
    return found


def _parse_server(name: str, value: Any) -> McpServerConfig:
    if not valid_server_name(name):
        raise ValueError(
            f"{SETTING}: the server name {name[:40]!r} is not allowed; give 1 to 32 letters, "
            "digits, '-' or '_', without '__' and not ending in '_' (tool names are "
            "mcp__<server>__<tool>)"
        )
    if not isinstance(value, dict):
        raise ValueError(
            f'{SETTING}: server {name!r} must be an object with a "command" or a "url", not '
            f'{_json_kind(value)}; e.g. {{"command": ["python", "server.py"]}}'
        )
    try:
        return McpServerConfig.model_validate(value, by_alias=True, by_name=False)
    except ValidationError as error:
        problems = "; ".join(_problem(detail) for detail in error.errors())
        raise ValueError(f"{SETTING}: server {name!r}: {problems}") from None


def _problem(detail: Any) -> str:
    """One pydantic error: ``field 'x': what is wrong; give what it takes``, never the input."""
    loc = ".".join(str(part) for part in detail["loc"] if str(part))
    message = " ".join(str(detail["msg"]).split()).removeprefix("Value error, ")
    if detail["type"] == "extra_forbidden":
        return f"unknown field {loc!r}; the fields are {', '.join(_EXPECTED)}"
    if not loc:
        return message
    field = str(detail["loc"][0])
    if detail["type"] == "value_error":
        return f"field {field!r}: {message}"
    message = message[:1].lower() + message[1:]
    return f"field {loc!r}: {message}; give {_EXPECTED.get(field, 'a valid value')}"


def _json_kind(value: Any) -> str:
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return kinds.get(type(value), "a number")


# -- tool names ----------------------------------------------------------------------------------


def valid_server_name(name: str) -> bool:
    """Whether ``name`` can name a server: ``^[A-Za-z0-9_-]{1,32}$``, and neither ``__`` inside nor
    ``_`` at the end, so ``mcp__<server>__<tool>`` splits back at its first ``__``."""
    return bool(_SERVER_NAME.fullmatch(name)) and "__" not in name and not name.endswith("_")


def tool_name(server: str, tool: str) -> str:
    """The name a model calls the MCP tool ``tool`` of ``server`` by: ``mcp__<server>__<tool>``.

    Providers take only ``^[a-zA-Z0-9_-]{1,64}$``. A tool name that fits as it is stays as it is;
    any other (a character outside that set, which becomes ``_``, or a result longer than 64) gets
    a suffix ``_`` plus the first 8 hex digits of the sha256 of the server-side name, after as much
    of the sanitised name as fits. So ``files.read`` and ``files_read`` stay distinct, and the name
    is the same on every worker. Raises ``ValueError`` for a server name ``valid_server_name``
    refuses.
    """
    if not valid_server_name(server):
        raise ValueError(f"{server!r} is not a valid MCP server name")
    prefix = f"{TOOL_NAME_PREFIX}{server}__"
    safe = _NOT_TOOL_NAME_CHAR.sub("_", tool)
    if tool and safe == tool and len(prefix) + len(tool) <= _MAX_TOOL_NAME:
        return prefix + tool
    digest = hashlib.sha256(tool.encode()).hexdigest()[:_DIGEST_CHARS]
    room = _MAX_TOOL_NAME - len(prefix) - 1 - _DIGEST_CHARS
    return f"{prefix}{safe[:room]}_{digest}"


def split_tool_name(name: str) -> tuple[str, str] | None:
    """``(server, tool)`` of a name ``tool_name`` made, or ``None`` for a name it cannot have made.

    The tool part is the name as the model saw it: the server-side name itself unless
    ``tool_name`` had to sanitise or shorten it. To call such a tool, find the listed tool whose
    ``tool_name`` equals ``name``.
    """
    if not name.startswith(TOOL_NAME_PREFIX):
        return None
    server, separator, tool = name[len(TOOL_NAME_PREFIX) :].partition("__")
    if not separator or not tool or not valid_server_name(server):
        return None
    return server, tool


# -- results -------------------------------------------------------------------------------------


class McpTool(BaseModel):
    """A tool as the server lists it: its server-side name, description and argument schema."""

    name: str
    description: str = ""
    input_schema: dict[str, Any]


class ToolOutcome(BaseModel):
    """What a tool call came back with: the text for the model, and whether it is a failure."""

    text: str
    is_error: bool = False


def tool_outcome(result: types.CallToolResult) -> ToolOutcome:
    """The ``ToolOutcome`` of a ``tools/call`` result.

    Text blocks (and embedded text resources) are joined with newlines; images, audio, links
    and binary resources become a one-line summary such as ``[image: image/png, 1234 bytes]``.
    With no text at all, the structured content, as JSON, comes first.
    """
    parts = [_describe(block) for block in result.content]
    has_text = any(isinstance(block, types.TextContent) for block in result.content)
    if not has_text and result.structured_content is not None:
        parts.insert(0, json.dumps(result.structured_content, ensure_ascii=False))
    return ToolOutcome(text="\n".join(parts), is_error=result.is_error)


def _describe(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        return f"[{block.type}: {block.mime_type}, {_base64_size(block.data)} bytes]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link: {block.name}, {block.uri}]"
    resource = block.resource
    if isinstance(resource, types.TextResourceContents):
        return resource.text
    mime = resource.mime_type or "application/octet-stream"
    return f"[resource: {resource.uri}, {mime}, {_base64_size(resource.blob)} bytes]"


def _base64_size(data: str) -> int:
    """The decoded size of base64 text, without decoding it."""
    data = "".join(data.split())
    return len(data) * 3 // 4 - (len(data) - len(data.rstrip("=")))


# -- the client ----------------------------------------------------------------------------------


async def list_tools(
    config: McpServerConfig, *, timeout: float, server: str | None = None
) -> list[McpTool]:
    """The server's tools that ``config.tools`` allows, in the server's order, every page of them.

    ``timeout`` bounds the whole exchange (callers usually pass ``config.timeout_seconds``);
    ``server`` names the server in error messages. Raises ``ConnectionError`` or ``TimeoutError``
    when the server cannot be reached or does not answer.
    """

    async def every_page(session: ClientSession, exchange: _Exchange) -> list[types.Tool]:
        found: list[types.Tool] = []
        cursor: str | None = None
        seen: set[str] = set()
        while True:
            params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
            page = await session.list_tools(params=params)
            found.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None or cursor in seen:  # a repeated cursor would never end
                return found
            seen.add(cursor)

    listed = await _exchange(config, server, timeout, every_page)
    return [
        McpTool(name=tool.name, description=tool.description or "", input_schema=tool.input_schema)
        for tool in listed
        if config.tools is None or tool.name in config.tools
    ]


async def call_tool(
    config: McpServerConfig,
    tool: str,
    arguments: dict[str, Any],
    *,
    idempotency_key: str,
    timeout: float,
    server: str | None = None,
) -> ToolOutcome:
    """Call the server-side tool ``tool`` with ``arguments``.

    The request's ``_meta`` carries ``{"errands/idempotency_key": idempotency_key}``, so a server
    can recognise a call errands retries. A tool ``config.tools`` does not allow is refused
    without contacting the server. The tool's error result and a JSON-RPC error in answer to the
    call come back as ``ToolOutcome(is_error=True)``; ``ConnectionError`` or ``TimeoutError``
    when the server cannot be reached or does not answer within ``timeout``.
    """
    if config.tools is not None and tool not in config.tools:
        allowed = ", ".join(config.tools) or "none"
        return ToolOutcome(
            text=f"no tool {tool!r} on this server; the tools are: {allowed}", is_error=True
        )
    meta = cast(types.RequestParamsMeta, {IDEMPOTENCY_META_KEY: idempotency_key})

    async def call(session: ClientSession, exchange: _Exchange) -> ToolOutcome:
        try:
            result = await session.call_tool(tool, arguments, meta=meta, allow_input_required=True)
        except MCPError as error:
            if not _answers_the_call(error, exchange):
                raise  # the transport failed, not the call: _exchange names the cause
            return ToolOutcome(text=f"{error.message} (MCP error {error.code})", is_error=True)
        except RuntimeError as error:  # the SDK's check of the result against the output schema
            return ToolOutcome(text=str(error), is_error=True)
        if isinstance(result, types.InputRequiredResult):
            return ToolOutcome(
                text="the tool asked for more input (elicitation), which errands cannot give",
                is_error=True,
            )
        return tool_outcome(result)

    return await _exchange(config, server, timeout, call)


def _answers_the_call(error: MCPError, exchange: _Exchange) -> bool:
    """Whether a JSON-RPC error is the server's answer to the call, not a failed transport.

    The SDK makes up errors of its own when the connection closes (-32000), the request times out
    (-32001) or an HTTP POST gets an error status (a generic -32603, see ``_Exchange``). Invalid
    params (-32602, an unknown tool among them) is the server's answer even at an HTTP 400, where
    a server may send it.
    """
    if error.code == types.INVALID_PARAMS:
        return True
    return exchange.http_status is None and error.code not in (
        types.CONNECTION_CLOSED,
        types.REQUEST_TIMEOUT,
    )


@dataclass
class _Exchange:
    """One session's bookkeeping: the server's label for messages, and the last HTTP refusal.

    The SDK turns a POST answered with an HTTP error status into a generic JSON-RPC error
    ("Server returned an error response"); the status, recorded here by an httpx event hook, is
    what tells the operator to check a token or a URL.
    """

    label: str
    http_status: int | None = None
    """The status of the last POST, when it was an error (400 or above)."""
    failure: ConnectionError | None = None
    """A failure raised inside the session, already worded."""

    async def record(self, response: httpx2.Response) -> None:
        if response.request.method == "POST":
            status = response.status_code
            self.http_status = status if status >= 400 else None


async def _exchange(
    config: McpServerConfig,
    server: str | None,
    timeout: float,
    action: Callable[[ClientSession, _Exchange], Awaitable[T]],
) -> T:
    """Open a session, run ``action`` on it, close it; transport failures become the builtins."""
    exchange = _Exchange(label=_label(config, server))
    try:
        with anyio.fail_after(timeout):
            async with _session(config, exchange, timeout) as session:
                return await action(session, exchange)
    except TimeoutError as error:
        raise _timed_out(exchange, timeout) from error
    except Exception as error:
        failure = next(
            (found for leaf in _leaves(error) if (found := _failure(leaf, exchange, timeout))),
            None,
        )
        if failure is None:
            raise
        raise failure from error


@asynccontextmanager
async def _session(
    config: McpServerConfig, exchange: _Exchange, timeout: float
) -> AsyncIterator[ClientSession]:
    """An initialized session over the transport ``config`` names."""
    async with _streams(config, exchange, timeout) as (read, write):
        async with ClientSession(read, write, client_info=_CLIENT_INFO) as session:
            try:
                await session.initialize()
            except RuntimeError as error:  # e.g. no protocol version in common
                exchange.failure = ConnectionError(f"{exchange.label} cannot be used: {error}")
                raise exchange.failure from error
            yield session


@asynccontextmanager
async def _streams(
    config: McpServerConfig, exchange: _Exchange, timeout: float
) -> AsyncIterator[Any]:
    """The read and write streams of a stdio or Streamable HTTP transport."""
    if config.command is not None:
        program, *arguments = config.command
        parameters = StdioServerParameters(
            command=program, args=arguments, env=config.env or None, cwd=config.cwd
        )
        async with stdio_client(parameters) as streams:
            yield streams
        return
    assert config.url is not None
    http = httpx2.AsyncClient(
        headers=config.headers,
        timeout=httpx2.Timeout(timeout),
        event_hooks={"response": [exchange.record]},
    )
    async with http, streamable_http_client(config.url, http_client=http) as streams:
        yield streams


def _leaves(error: BaseException) -> Iterator[BaseException]:
    """The exceptions inside (nested) exception groups: the SDK's task groups wrap every error."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


def _failure(
    error: BaseException, exchange: _Exchange, timeout: float
) -> ConnectionError | TimeoutError | None:
    """The builtin a transport failure becomes, or ``None`` for an error that is no such failure."""
    label = exchange.label
    if error is exchange.failure:
        return exchange.failure
    if isinstance(error, TimeoutError | httpx2.TimeoutException):
        return _timed_out(exchange, timeout)
    if isinstance(error, MCPError):
        return _mcp_failure(error, exchange, timeout)
    if isinstance(error, httpx2.TransportError):
        return ConnectionError(
            f"cannot reach {label}: {str(error) or type(error).__name__}; check that the server is "
            f"running and that its url in {SETTING} is right"
        )
    if isinstance(error, OSError):
        return ConnectionError(
            f"cannot start {label}: {error}; check its command, cwd and env in {SETTING}"
        )
    if isinstance(error, anyio.BrokenResourceError | anyio.ClosedResourceError | anyio.EndOfStream):
        return ConnectionError(f"{label} closed the connection; check the server's logs")
    if isinstance(error, ValidationError):
        return ConnectionError(
            f"{label} answered with something that is not MCP; check that it is an MCP server"
        )
    return None


def _mcp_failure(
    error: MCPError, exchange: _Exchange, timeout: float
) -> ConnectionError | TimeoutError:
    label = exchange.label
    status = exchange.http_status
    if status in (401, 403):
        return ConnectionError(
            f"{label} refused the request with HTTP {status}; check the credentials in its "
            f"headers in {SETTING}"
        )
    if status == 404:
        return ConnectionError(f"{label} answered HTTP 404; check the path of its url in {SETTING}")
    if status is not None:
        return ConnectionError(
            f"{label} answered HTTP {status}; check that the server is healthy (its logs)"
        )
    if error.code == types.REQUEST_TIMEOUT:
        return _timed_out(exchange, timeout)
    if error.code == types.CONNECTION_CLOSED:
        return ConnectionError(
            f"{label} closed the connection; check that it is an MCP server that stays up "
            "(for a command: its output on stderr)"
        )
    return ConnectionError(
        f"{label} answered with an error: {error.message} (MCP error {error.code})"
    )


def _timed_out(exchange: _Exchange, timeout: float) -> TimeoutError:
    return TimeoutError(
        f"{exchange.label} did not answer within {timeout:g} s; check that it is up and not "
        f"overloaded, or give it longer with timeout_seconds in {SETTING}"
    )


def _label(config: McpServerConfig, server: str | None) -> str:
    """How messages name the server: its name and where it is, without secrets.

    A URL loses its user info, query and fragment; a command shows only its program, since
    arguments can carry credentials (a database URL, a token).
    """
    if config.url is not None:
        parts = urlsplit(config.url)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host  # an IPv6 address
        port = f":{parts.port}" if parts.port else ""
        where = f"{parts.scheme}://{host}{port}{parts.path}"
    else:
        assert config.command is not None
        where = f"command {config.command[0]!r}"
    return f"MCP server {server!r} ({where})" if server else f"MCP server ({where})"
