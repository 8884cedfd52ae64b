"""errands as an MCP server (SPEC §12): ``errands mcp`` over stdio, ``mount_mcp`` for ``/mcp``
over Streamable HTTP on the gateway. Not to be confused with ``errands.adapters.mcp``, where
errands is the *client* of MCP tool servers.

Three paths reach the same task, chosen by what the client declares (docs/mcp-server.md):

- plain tools for every client: ``start_task`` (returns the id at once), ``task_status``,
  ``answer``, ``approve``, ``deny``, ``side_question``, ``say``, ``cancel``, ``history``;
- ``run_task``: waits a bounded time and asks the task's questions through the client's form
  elicitation (``_run``, ``_forms``);
- the tasks extension (SEP-2663): ``run_task`` answers with a task handle whose id is the
  errands task id; ``tasks/get``, ``tasks/update``, ``tasks/cancel`` (``_tasks``).

Every call acts through ``errands.Client`` as a principal: the operator over stdio (as the
CLI), the bearer's principal over HTTP.
"""

from errands.protocols.mcp._acting import Frontend
from errands.protocols.mcp._http import MCP_PATH, PrincipalGate, mount_mcp
from errands.protocols.mcp._run import WAIT_DEFAULT, WAIT_MAX
from errands.protocols.mcp._server import build_server, serve_stdio
from errands.protocols.mcp._tasks import TASKS_EXTENSION, TasksExtension

__all__ = [
    "MCP_PATH",
    "TASKS_EXTENSION",
    "WAIT_DEFAULT",
    "WAIT_MAX",
    "Frontend",
    "PrincipalGate",
    "TasksExtension",
    "build_server",
    "mount_mcp",
    "serve_stdio",
]
