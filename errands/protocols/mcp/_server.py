"""errands' MCP server: its tools (``_tools``) and the tasks extension (``_tasks``) on one
``MCPServer``, and ``serve_stdio`` for ``errands mcp``."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.request_state import RequestStateSecurity

from errands.client import Client
from errands.protocols.mcp._acting import Frontend
from errands.protocols.mcp._tasks import TasksExtension
from errands.protocols.mcp._tools import add_tools

NAME = "errands"
INSTRUCTIONS = """errands runs long tasks durably: a task may take minutes or days and may stop to
ask the user a question or to have a tool call approved. start_task returns a task id at once;
task_status shows where it is, with any pending question (answer it with answer) or approval
(approve / deny). run_task waits a bounded time and asks questions through a form where the
client supports it. side_question asks about a task without disturbing it; say steers it."""


def build_server(frontend: Frontend, state_keys: list[str] | None = None) -> MCPServer[Any]:
    """The MCP server of errands, every call acting through ``frontend``. ``state_keys``
    (``ERRANDS_MCP_STATE_KEYS``, the first sealing) seal a form's ``requestState`` so that any
    replica holding them takes the retry that answers it; none: a key of this process."""
    server: MCPServer[Any] = MCPServer(
        name=NAME,
        instructions=INSTRUCTIONS,
        extensions=[TasksExtension(frontend)],
        log_level="WARNING",
        request_state_security=RequestStateSecurity(keys=state_keys) if state_keys else None,
    )
    add_tools(server, frontend)
    return server


async def serve_stdio(client: Client) -> None:
    """``errands mcp``: the server over stdin/stdout until the client closes it, every call
    acting as ``client`` does (the CLI's operator)."""
    await build_server(Frontend(client)).run_stdio_async()
