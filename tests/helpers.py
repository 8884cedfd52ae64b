"""What the tests share: ``eventually`` (wait for state, never for time), the scripted-reply
builders (``final``, ``delegate``, ``general``, ``ask``, ``tool``, ``advisor_call``), starting tasks
and reading their histories. See tests/README.md."""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio.api.enums.v1 import EventType, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from errands.adapters.scripted import Call, Reply
from errands.adapters.store import SessionStore
from errands.agent.prompts import SUMMARY_INSTRUCTIONS
from errands.contracts import ids
from errands.contracts.messages import Message, NewMessage, ToolSpec
from errands.contracts.workflows import RoundSettings, TaskInput, TaskResult

_T = TypeVar("_T")


async def eventually(
    condition: Callable[[], _T | Awaitable[_T]],
    what: str = "the condition",
    *,
    timeout: float = 60,
    interval: float = 0.02,
) -> _T:
    """Poll ``condition`` (sync or async) until it returns something truthy, and return that;
    after ``timeout`` seconds fail with ``what`` it waited for. The timeout is a bound on a
    broken test, never the behaviour under test: keep it generous."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}; it never came")
        await asyncio.sleep(interval)


async def wait_for_pollers(
    client: Client,
    queue: str,
    count: int,
    *,
    kind: TaskQueueType.ValueType = TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    timeout: float = 60,
) -> None:
    """Until ``count`` distinct workers poll ``queue`` (for workflow tasks, or ``kind``), so
    none of them takes a whole burst while another is still starting up."""
    request = DescribeTaskQueueRequest(
        namespace=client.namespace, task_queue=TaskQueue(name=queue), task_queue_type=kind
    )

    async def polling() -> bool:
        try:
            described = await client.workflow_service.describe_task_queue(request)
        except RPCError as err:
            # The server answers "operation was canceled" while it is still loading a queue
            # that was just created; that is "not yet", not a failure.
            if err.status in (RPCStatusCode.CANCELLED, RPCStatusCode.UNAVAILABLE):
                return False
            raise
        return len({p.identity for p in described.pollers}) >= count

    await eventually(polling, f"{count} workers polling {queue}", timeout=timeout, interval=0.2)


# -- scripted replies: what the model answers, in errands' control and work tools ----------------

DATABASE = {
    "question": "Which database should the new service use?",
    "header": "Database",
    "options": [
        {"label": "PostgreSQL", "description": "Recommended: we already run it"},
        {"label": "SQLite"},
    ],
}
"""The question most asking tests put: pick one of two databases."""


def final(text: str, **reply: Any) -> Reply:
    """The model ends the round with ``final_reply(text)`` (``reply``: other ``Reply`` fields)."""
    return Reply(calls=[Call("final_reply", {"text": text})], **reply)


def general(prompt: str, *refs: int) -> dict[str, Any]:
    """A subtask of the built-in ``general`` type, citing catalog entries ``refs``."""
    return {"type": "general", "prompt": prompt, "references": list(refs)}


def delegate(*subtasks: dict[str, Any] | str, reply: str = "On it.", **fields: Any) -> Reply:
    """The model delegates ``subtasks`` (a plain string is a ``general`` one citing nothing)."""
    items = [general(s) if isinstance(s, str) else s for s in subtasks]
    return Reply(calls=[Call("delegate", {"reply": reply, "subtasks": items})], **fields)


def ask(*questions: dict[str, Any], **arguments: Any) -> Reply:
    """The model asks the user ``questions`` with ``ask_user``."""
    return Reply(calls=[Call("ask_user", {"questions": list(questions), **arguments})])


def tool(name: str, /, **arguments: Any) -> Reply:
    """The model calls the work tool ``name`` with ``arguments``."""
    return Reply(calls=[Call(name, arguments)])


def pin_tools(store: SessionStore, task_id: str, servers: dict[str, Any]) -> None:
    """Store ``servers`` as the task's pinned MCP tool list, as if the task had listed them."""
    store.append_once(
        NewMessage(
            id=ids.task_tools_id(task_id),
            session_id=ids.task_tools_id(task_id),
            role="system",
            kind="tools",
            text=json.dumps({"servers": servers}),
            task_id=task_id,
        )
    )


def user(text: str) -> Message:
    """A user message of ``text``, as a session holds it."""
    return Message(role="user", text=text)


def tool_spec(name: str, description: str, **arguments: str) -> ToolSpec:
    """A tool whose ``arguments`` are all required, each of the JSON type named."""
    return ToolSpec(
        name=name,
        description=description,
        parameters={
            "type": "object",
            "properties": {arg: {"type": kind} for arg, kind in arguments.items()},
            "required": list(arguments),
        },
    )


def advisor_call(question: str) -> Reply:
    """The model consults the advisor."""
    return tool("advisor", question=question)


async def until_waiting(handle: WorkflowHandle[Any, Any], timeout: float = 60) -> TaskResult:
    """The task's status once it waits for the user (a question or an approval)."""

    async def waiting() -> TaskResult | None:
        status = await handle.query("status", result_type=TaskResult)
        return status if status.status == "waiting_for_user" else None

    return await eventually(waiting, f"task {handle.id} to wait for the user", timeout=timeout)


def new_ids(prefix: str = "t") -> tuple[str, str]:
    session = f"{prefix}-{uuid.uuid4().hex[:8]}"
    return session, f"task-{session}-1"


async def start_task(
    client: Client,
    task_queue: str,
    text: str,
    *,
    model: str,
    fallback_model: str | None = None,
    session: str | None = None,
    settings: RoundSettings | None = None,
    headless: bool = False,
    advisor_model: str | None = None,
    **extra: Any,
) -> WorkflowHandle[Any, TaskResult]:
    session_id, task_id = new_ids()
    if session:
        session_id, task_id = session, f"task-{session}-{uuid.uuid4().hex[:6]}"
    task_id = extra.pop("task_id", task_id)
    return await client.start_workflow(
        "TaskWorkflow",
        TaskInput(
            task_id=task_id,
            session_id=session_id,
            text=text,
            model=model,
            fallback_model=fallback_model,
            headless=headless,
            advisor_model=advisor_model,
            settings=settings or RoundSettings(),
            **extra,
        ),
        id=task_id,
        task_queue=task_queue,
        result_type=TaskResult,
    )


async def history_events(handle: WorkflowHandle[Any, Any]) -> list[Any]:
    history = await handle.fetch_history()
    return list(history.events)


def events_of(events: list[Any], event_type: int) -> list[Any]:
    return [e for e in events if e.event_type == event_type]


def local_activities(events: list[Any]) -> list[str]:
    """The activity types of the local activities a history recorded, in order."""
    return [
        json.loads(e.marker_recorded_event_attributes.details["data"].payloads[0].data)[
            "activity_type"
        ]
        for e in events_of(events, MARKER_RECORDED)
        if e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]


async def history_bytes(handle: WorkflowHandle[Any, Any]) -> int:
    history = await handle.fetch_history()
    return len(history.to_json().encode())


ACTIVITY_STARTED = EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
ACTIVITY_SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
CHILD_INITIATED = EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
MARKER_RECORDED = EventType.EVENT_TYPE_MARKER_RECORDED
WORKFLOW_TASK_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
WORKFLOW_TASK_FAILED = EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED


def is_branch_request(request: Any) -> bool:
    """Round requests always offer ``final_reply``; a branch's never does."""
    names = (
        [t["function"]["name"] for t in request.body.get("tools", [])]
        if request.api == "openai"
        else [t["name"] for t in request.body.get("tools", [])]
    )
    return "final_reply" not in names


def is_summary_call(request: Any) -> bool:
    """A compaction's summary call: no tools, errands' summary instructions."""
    system = request.body["messages"][0]["content"] if request.api == "openai" else None
    system = system if system is not None else request.body.get("system")
    if isinstance(system, list):
        system = "".join(block.get("text", "") for block in system)
    return not request.body.get("tools") and system == SUMMARY_INSTRUCTIONS


class Conversation:
    """One scripted model playing both parts of a task: the main rounds, in order, and every
    branch through ``branch`` (branches run concurrently, so their order is not scripted).
    Summary calls, when a test lets the session outgrow the window, get a short summary."""

    def __init__(self, main: list[Any], branch: Any, *, branches: int) -> None:
        self._main = list(main)
        self._branch = branch
        self.calls = len(main) + branches
        self.main_requests: list[Any] = []
        self.branch_requests: list[Any] = []
        self.summary_requests: list[Any] = []

    def __call__(self, request: Any) -> Any:
        if is_summary_call(request):
            self.summary_requests.append(request)
            return Reply(text=f"summary {len(self.summary_requests)} of the earlier messages")
        if is_branch_request(request):
            self.branch_requests.append(request)
            return self._branch(request)
        self.main_requests.append(request)
        return self._main.pop(0)

    def install(self, server: Any, model: str) -> Conversation:
        server.script(model, *[self] * self.calls)
        return self


HISTORIES = __import__("pathlib").Path(__file__).parent / "histories"


async def keep_history(client: Client, workflow_id: str, name: str) -> None:
    """With ERRANDS_RECORD_HISTORIES set, save this workflow's history for the replay test;
    a value other than 1 prefixes the file names (e.g. a release: ``r2``), so the histories of
    earlier releases stay beside the new ones."""
    import json
    import os

    release = os.environ.get("ERRANDS_RECORD_HISTORIES")
    if not release:
        return
    if release != "1":
        name = f"{release}-{name}"
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    HISTORIES.mkdir(exist_ok=True)
    events = _without_stack_traces(json.loads(history.to_json()))
    (HISTORIES / f"{name}.json").write_text(
        json.dumps({"workflow_id": workflow_id, "history": events}, indent=1)
    )


def _without_stack_traces(value: Any) -> Any:
    """Stack traces name this machine's paths and play no part in replay."""
    if isinstance(value, dict):
        return {k: _without_stack_traces(v) for k, v in value.items() if k != "stackTrace"}
    if isinstance(value, list):
        return [_without_stack_traces(v) for v in value]
    return value
