"""A client for one MCP server: ``list_tools`` and ``call_tool``, through the official SDK.

Each call here opens its own session (connect, initialize, one request, close) and keeps nothing
between calls; a worker keeps its sessions open in ``errands.adapters.mcp.pool``, whose
connections (``errands.adapters.mcp._connection``) make the same requests through the same
functions (``every_page``, ``caller``) and word failures the same way.

Failures fall in two groups:

- the server cannot be reached or does not answer (a stdio program that will not start or exits,
  a refused connection, an HTTP error status, the timeout): ``ConnectionError`` or
  ``TimeoutError`` (the builtins), whose message names the server and what to check;
- the server answers the call with a failure (the tool's own error result, or a JSON-RPC error
  such as an unknown tool or invalid arguments): a ``ToolOutcome`` with ``is_error=True`` and the
  server's text, for the model to read and repair.

This module imports nothing from Temporal: activities call it. Importing it imports the SDK
(about a second): only code that talks to a server should.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp import types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from errands.adapters.mcp._connection import opened_session
from errands.adapters.mcp._http import Exchange
from errands.adapters.mcp._stdio import OVERSIZED, Oversized
from errands.adapters.mcp.config import (
    IDEMPOTENCY_META_KEY,
    SETTING,
    McpServerConfig,
    McpTool,
    ToolOutcome,
)
from errands.agent.reading import capped_result

T = TypeVar("T")


# -- results -------------------------------------------------------------------------------------


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


_SSE_TOO_LONG = "Server-sent event exceeded"
"""How the SDK says it stopped reading an answer over Streamable HTTP (its event limit)."""
_ENVELOPE = 64 * 1024
"""Bytes of an answer beside its text (JSON-RPC framing, other blocks) read on top of the text."""
_TEXT = re.compile(rb'"text"\s*:\s*"')
_STRING_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*')


def head_text(oversized: Oversized, max_bytes: int | None, *, more: bool = False) -> str:
    """The text of the first text block of an answer the transport stopped reading, as far as
    its head holds it, cut and marked as ``capped_result`` does. ``more``: ``oversized.size``
    is only what was read before the transport stopped (HTTP), not the whole answer's size."""
    head = oversized.head
    found = _TEXT.search(head)
    body = head[found.end() :] if found else b""
    raw = _STRING_BODY.match(body)
    assert raw is not None  # the pattern matches the empty string
    whole = raw.end() < len(body)  # its closing quote is in the head
    text = ""
    for cut in range(7):  # a cut escape or a cut UTF-8 character at the end
        try:
            text = json.loads(b'"' + raw.group()[: len(raw.group()) - cut] + b'"')
            break
        except ValueError:
            continue
    limit = max_bytes if max_bytes is not None else len(head)
    return capped_result(text, limit, read_bytes=None if whole else oversized.size, more=more)


# -- the client ----------------------------------------------------------------------------------


async def list_tools(
    config: McpServerConfig, *, timeout: float, server: str | None = None
) -> list[McpTool]:
    """The server's tools that ``config.tools`` allows, in the server's order, every page of them.

    ``timeout`` bounds the whole exchange (callers usually pass ``config.timeout_seconds``);
    ``server`` names the server in error messages. Raises ``ConnectionError`` or ``TimeoutError``
    when the server cannot be reached or does not answer.
    """

    return allowed(config, await _exchange(config, server, timeout, every_page))


def allowed(config: McpServerConfig, listed: list[types.Tool]) -> list[McpTool]:
    """The listed tools ``config.tools`` allows, in the server's order."""
    return [
        McpTool(name=tool.name, description=tool.description or "", input_schema=tool.input_schema)
        for tool in listed
        if config.tools is None or tool.name in config.tools
    ]


async def every_page(session: ClientSession, exchange: Exchange) -> list[types.Tool]:
    """Every page of the server's tool list."""
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


async def call_tool(
    config: McpServerConfig,
    tool: str,
    arguments: dict[str, Any],
    *,
    idempotency_key: str,
    timeout: float,
    server: str | None = None,
    max_bytes: int | None = None,
) -> ToolOutcome:
    """Call the server-side tool ``tool`` with ``arguments``.

    ``max_bytes``: the most bytes of the result's text kept; a longer one is cut, the cut said
    at its end (``errands.agent.reading.capped_result``), and the server's answer is read no
    further than about twice that (its JSON may repeat the text as structured content), over
    stdio and over HTTP alike: what was read of a longer one gives its head, as a success.

    The request's ``_meta`` carries ``{"errands/idempotency_key": idempotency_key}``, so a server
    can recognise a call errands retries. A tool ``config.tools`` does not allow is refused
    without contacting the server. The tool's error result and a JSON-RPC error in answer to the
    call come back as ``ToolOutcome(is_error=True)``; ``ConnectionError`` or ``TimeoutError``
    when the server cannot be reached or does not answer within ``timeout``.
    """
    refused = refusal(config, tool)
    if refused is not None:
        return refused
    action = caller(tool, arguments, idempotency_key, max_bytes)
    return await _exchange(config, server, timeout, action, max_line=line_for(max_bytes))


def refusal(config: McpServerConfig, tool: str) -> ToolOutcome | None:
    """The error outcome of a call of a tool ``config.tools`` does not allow (None: allowed)."""
    if config.tools is not None and tool not in config.tools:
        allowed = ", ".join(config.tools) or "none"
        return ToolOutcome(
            text=f"no tool {tool!r} on this server; the tools are: {allowed}", is_error=True
        )
    return None


def line_for(max_bytes: int | None) -> int | None:
    """The most bytes of an answer read for a call that keeps ``max_bytes`` of its text."""
    return None if max_bytes is None else 2 * max_bytes + _ENVELOPE


def caller(
    tool: str, arguments: dict[str, Any], idempotency_key: str, max_bytes: int | None
) -> Callable[[ClientSession, Exchange], Awaitable[ToolOutcome]]:
    """The ``tools/call`` request of ``call_tool``, to run on an open session; a failed
    transport is raised (``failure`` words it), every answer is a ``ToolOutcome``."""
    meta = cast(types.RequestParamsMeta, {IDEMPOTENCY_META_KEY: idempotency_key})

    async def call(session: ClientSession, exchange: Exchange) -> ToolOutcome:
        try:
            result = await session.call_tool(tool, arguments, meta=meta, allow_input_required=True)
        except MCPError as error:
            if exchange.oversized.size and error.code in (OVERSIZED, types.CONNECTION_CLOSED):
                return ToolOutcome(text=head_text(exchange.oversized, max_bytes), is_error=False)
            if exchange.max_line is not None and _SSE_TOO_LONG in error.message:
                # The SDK read no more of it over HTTP (the tool ran; nothing is retried): its
                # head, as far as it was read, as over stdio.
                text = head_text(exchange.posted, max_bytes, more=True)
                return ToolOutcome(text=text, is_error=False)
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
        outcome = tool_outcome(result)
        if max_bytes is not None:
            outcome.text = capped_result(outcome.text, max_bytes)
        return outcome

    return call


def _answers_the_call(error: MCPError, exchange: Exchange) -> bool:
    """Whether a JSON-RPC error is the server's answer to the call, not a failed transport.

    The SDK makes up errors of its own when the connection closes (-32000), the request times out
    (-32001) or an HTTP POST gets an error status (a generic -32603, see ``Exchange``). Invalid
    params (-32602, an unknown tool among them) is the server's answer even at an HTTP 400, where
    a server may send it.
    """
    if error.code == types.INVALID_PARAMS:
        return True
    return exchange.http_status is None and error.code not in (
        types.CONNECTION_CLOSED,
        types.REQUEST_TIMEOUT,
    )


async def _exchange(
    config: McpServerConfig,
    server: str | None,
    timeout: float,
    action: Callable[[ClientSession, Exchange], Awaitable[T]],
    *,
    max_line: int | None = None,
) -> T:
    """Open a session, run ``action`` on it, close it; transport failures become the builtins."""
    exchange = Exchange(label=server_label(config, server), max_line=max_line)
    try:
        with anyio.fail_after(timeout):
            async with opened_session(config, exchange, timeout) as session:
                return await action(session, exchange)
    except TimeoutError as error:
        raise timed_out(exchange, timeout) from error
    except Exception as error:
        worded = failure(error, exchange, timeout)
        if worded is None:
            raise
        raise worded from error


def failure(
    error: BaseException, exchange: Exchange, timeout: float
) -> ConnectionError | TimeoutError | None:
    """The builtin a transport failure (in exception groups or not) becomes, or ``None``."""
    return next(
        (found for leaf in leaves(error) if (found := _failure(leaf, exchange, timeout))), None
    )


def leaves(error: BaseException) -> Iterator[BaseException]:
    """The exceptions inside (nested) exception groups: the SDK's task groups wrap every error."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from leaves(inner)
    else:
        yield error


def _failure(
    error: BaseException, exchange: Exchange, timeout: float
) -> ConnectionError | TimeoutError | None:
    """The builtin a transport failure becomes, or ``None`` for an error that is no such failure."""
    label = exchange.label
    if error is exchange.failure:
        return exchange.failure
    if isinstance(error, TimeoutError | httpx2.TimeoutException):
        return timed_out(exchange, timeout)
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
    error: MCPError, exchange: Exchange, timeout: float
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
        return timed_out(exchange, timeout)
    if error.code == types.CONNECTION_CLOSED:
        return ConnectionError(
            f"{label} closed the connection; check that it is an MCP server that stays up "
            "(for a command: its output on stderr)"
        )
    return ConnectionError(
        f"{label} answered with an error: {error.message} (MCP error {error.code})"
    )


def timed_out(exchange: Exchange, timeout: float) -> TimeoutError:
    return TimeoutError(
        f"{exchange.label} did not answer within {timeout:g} s; check that it is up and not "
        f"overloaded, or give it longer with timeout_seconds in {SETTING}"
    )


def server_label(config: McpServerConfig, server: str | None) -> str:
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


def broken_outcome(label: str, *, in_session: bool) -> ToolOutcome:
    """What the model reads when a kept connection was lost after the call was sent
    (``errands.adapters.mcp.pool``)."""
    text = (
        f"{label} exited or closed the connection during the call, so the call may or may not "
        "have taken effect; check before calling it again."
    )
    if in_session:
        text += (
            " Its session was lost with it: the server's state from earlier calls is lost, and "
            "the next call starts a new session."
        )
    return ToolOutcome(text=text, is_error=True)
