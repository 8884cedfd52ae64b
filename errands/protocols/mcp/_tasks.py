"""The MCP tasks extension (SEP-2663, ``io.modelcontextprotocol/tasks``) over errands' tasks,
through the SDK's extension hooks: a client that declares the extension gets, for a
``tools/call`` of ``run_task``, a task handle at once instead of a result, and follows it with
``tasks/get``, ``tasks/update`` and ``tasks/cancel``. The MCP task id is the errands task id,
so any server process (any gateway replica) serves any task, and the task outlives them all.

::

    errands                                  MCP task
    running, nothing pending                 working
    a question pending                       input_required; inputRequests: {QUESTION_SET_ID:
                                               an elicitation/create form (see _forms)}
    a tool call waiting for approval         working; statusMessage names it (approve / deny tools)
    replied                                  completed; result: the tool result (reply + status)
    failed                                   failed; result with isError, statusMessage the error
    canceled                                 cancelled

    tasks/update {inputResponses: {QUESTION_SET_ID: ElicitResult}}   answer (accept → answered,
                                               decline → dismissed, cancel → question cancelled);
                                               a refused answer is an INVALID_PARAMS error and
                                               changes nothing
    tasks/cancel                             cancel the task
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolRequestParams, ElicitResult, RequestParams
from pydantic import Field

from errands.client import Client, TaskHandle
from errands.contracts.workflows import TaskResult
from errands.errors import ErrandsError, InvalidRequest
from errands.protocols.mcp._acting import Frontend
from errands.protocols.mcp._forms import answers_from, form_message, form_schema
from errands.protocols.mcp._views import approval_summary, summary, task_view

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TASK_TOOLS = frozenset({"run_task"})
"""The tools a client that declares the extension gets a task handle from."""
TTL_MS = 7 * 24 * 3600 * 1000
"""How long a task handle is good for, as far as the client is told: errands keeps the task's
result as long as Temporal keeps the workflow (its namespace retention)."""
POLL_MS = 1000

STATES = {"replied": "completed", "failed": "failed", "canceled": "cancelled"}


class TaskIdParams(RequestParams):
    task_id: str = Field(alias="taskId")


class UpdateParams(RequestParams):
    task_id: str = Field(alias="taskId")
    input_responses: dict[str, Any] = Field(alias="inputResponses")


def declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    return bool(
        capabilities and capabilities.extensions and TASKS_EXTENSION in capabilities.extensions
    )


class TasksExtension(Extension):
    """``run_task`` as an MCP task, for clients that declare the extension."""

    identifier = TASKS_EXTENSION

    def __init__(self, frontend: Frontend) -> None:
        self._frontend = frontend

    def settings(self) -> dict[str, Any]:
        return {"tools": sorted(TASK_TOOLS)}

    def _client(self, ctx: ServerRequestContext[Any, Any]) -> Client:
        return self._frontend.acting(ctx.request)

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        if params.name not in TASK_TOOLS or not declared(ctx):
            return await call_next(ctx)
        arguments = params.arguments or {}
        with _protocol_errors():
            client = self._client(ctx)
            task_id, text = arguments.get("task_id"), arguments.get("text")
            if task_id is not None:
                handle = client.task(str(task_id))
            elif text is not None:
                session = arguments.get("session")
                handle = await client.start(str(text), session=session and str(session))
            else:
                raise InvalidRequest(
                    "give the task's text to start one, or task_id to continue one"
                )
            status = await handle.status()
            return {"resultType": "task", **await _task(handle, status)}

    def methods(self) -> list[MethodBinding]:
        async def get(ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
            with _protocol_errors():
                handle = self._client(ctx).task(params.task_id)
                return await _task(handle, await handle.status())

        async def update(
            ctx: ServerRequestContext[Any, Any], params: UpdateParams
        ) -> dict[str, Any]:
            with _protocol_errors():
                handle = self._client(ctx).task(params.task_id)
                pending = (await handle.status()).pending_question
                if not pending or str(pending["id"]) not in params.input_responses:
                    waiting = f"question set {pending['id']}" if pending else "no question"
                    raise InvalidRequest(
                        f"task {params.task_id} waits for {waiting}; tasks/get shows what it "
                        "waits for, and inputResponses is keyed by its inputRequests key"
                    )
                response = ElicitResult.model_validate(params.input_responses[str(pending["id"])])
                question_set = str(pending["id"])
                if response.action == "accept":
                    given = answers_from(pending, response.content)
                    await handle.answer(given, question_set_id=question_set)
                elif response.action == "decline":
                    await handle.answer(dismiss=True, question_set_id=question_set)
                else:
                    await handle.answer(cancel=True, question_set_id=question_set)
                return {}

        async def cancel(
            ctx: ServerRequestContext[Any, Any], params: TaskIdParams
        ) -> dict[str, Any]:
            with _protocol_errors():
                handle = self._client(ctx).task(params.task_id)
                status = await handle.status()
                if status.status in STATES:
                    return await _task(handle, status)
                await handle.cancel()
                return await _task(handle, await handle.status())

        return [
            MethodBinding("tasks/get", TaskIdParams, get),
            MethodBinding("tasks/update", UpdateParams, update),
            MethodBinding("tasks/cancel", TaskIdParams, cancel),
        ]


@contextmanager
def _protocol_errors() -> Iterator[None]:
    """errands' refusals as protocol errors: INVALID_PARAMS with errands' message."""
    try:
        yield
    except ErrandsError as error:
        raise MCPError(code=INVALID_PARAMS, message=" ".join(error.message.split())) from None


async def _task(handle: TaskHandle, status: TaskResult) -> dict[str, Any]:
    """The MCP task object of ``status``."""
    now = datetime.now(UTC).isoformat()
    first = await handle.events_after(0, limit=1)
    created = first[0].at if first else now
    task: dict[str, Any] = {
        "taskId": handle.task_id,
        "status": STATES.get(status.status, "working"),
        "createdAt": created,
        "lastUpdatedAt": now,
        "ttlMs": TTL_MS,
        "pollIntervalMs": POLL_MS,
    }
    pending = status.pending_question
    if task["status"] == "working" and pending:
        task["status"] = "input_required"
        task["statusMessage"] = form_message(handle.task_id, pending)
        form = {
            "mode": "form",
            "message": form_message(handle.task_id, pending),
            "requestedSchema": form_schema(pending),
        }
        task["inputRequests"] = {
            str(pending["id"]): {"method": "elicitation/create", "params": form}
        }
    elif task["status"] == "working" and status.pending_approval:
        task["statusMessage"] = approval_summary(handle.task_id, status.pending_approval)
    elif task["status"] == "working":
        task["statusMessage"] = status.phase or "working"
    elif task["status"] in ("completed", "failed"):
        view = task_view(status)
        task["statusMessage"] = summary(status)
        task["result"] = {
            "content": [{"type": "text", "text": view["summary"]}],
            "structuredContent": view,
            "isError": status.status == "failed",
        }
    return task
