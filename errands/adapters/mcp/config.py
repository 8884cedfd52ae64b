"""MCP servers in errands' settings: ``ERRANDS_MCP_SERVERS``, tool names, what a call returns.

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

A model sees a server's tool under ``tool_name(server, tool)``: ``mcp__<server>__<tool>``. The
client that talks to a server is ``errands.adapters.mcp.client``; this module imports no part of the
``mcp`` SDK, so reading the settings costs nothing when no server is used.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

SETTING = "ERRANDS_MCP_SERVERS"
IDEMPOTENCY_META_KEY = "errands/idempotency_key"
"""The ``_meta`` key of a ``tools/call`` request that carries the call's idempotency key."""
TOOL_NAME_PREFIX = "mcp__"

Approval = Literal["never", "ask", "always", "approver", "two"]
SessionScope = Literal["shared", "task", "branch"]
"""Whose a server's session is: ``shared`` (any call of any task, on any worker: the server keeps
no state a call relies on), ``task`` (one session per task, its main agent and its branches) or
``branch`` (one per branch, and one for the main agent's own calls)."""
"""A tool's approval policy: ``never`` runs it unasked; the others are
``errands.contracts.approvals.ApprovalPolicy``."""
_Name = Annotated[str, Field(min_length=1)]

_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
_NOT_TOOL_NAME_CHAR = re.compile(r"[^A-Za-z0-9_-]")
_MAX_TOOL_NAME = 64
"""Providers accept tool names of ``^[a-zA-Z0-9_-]{1,64}$``."""
_DIGEST_CHARS = 8
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
    "approval": 'an object of tool name to "never", "ask", "always", "approver" or "two"',
    "timeout_seconds": "a number of seconds above 0",
    "session": '"shared", "task" or "branch"',
    "idle_seconds": "a number of seconds above 0",
    "list_ttl_seconds": "a number of seconds, 0 or more",
}
"""What each field takes, for the error messages of ``parse_mcp_servers``."""

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
    session: SessionScope = "shared"
    """Whose session a call runs in (``SessionScope``). A ``task`` or ``branch`` session lives on
    the worker that opened it, for the life of its task or branch; its calls go to that worker."""
    idle_seconds: float = Field(default=600.0, gt=0, allow_inf_nan=False)
    """A connection (or a ``task``/``branch`` session) unused this long is closed; a session is
    opened again on its next call, the model told that its earlier state is lost."""
    list_ttl_seconds: float = Field(default=300.0, ge=0, allow_inf_nan=False)
    """How long a worker reuses the server's tool list (0: list at every task's start); the
    server's ``notifications/tools/list_changed`` ends it sooner."""

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
