"""The live side of the bad-input checks: the scripted model they talk to, tasks parked on a
question, tasks whose first step is a generated control call, and the history checks."""

from __future__ import annotations

import asyncio
import itertools
import re
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError

from chaos._checks import task_failures
from chaos._stack import Stack
from chaos._strategies import QUESTION_SET
from errands.adapters.scripted import Call, Fail, RecordedRequest, Reply, Step
from errands.agent.side_questions import FALLBACK_SYSTEM
from errands.contracts.workflows import RoundSettings, TaskInput, TaskResult

_TAG = re.compile(r"chaos (parked|control) (\d+)")


class Violation(AssertionError):
    """A broken invariant, filed under one of the report's loss names."""

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(detail)
        self.what = what


class InputModel:
    """Parked tasks ask ``QUESTION_SET`` and reply once answered; control tasks play their
    script (the generated calls) and then reply ``RECOVERED``; side questions get the
    behaviour ``side_mode`` names; branches answer at once."""

    NAME = "chaos-input"
    RECOVERED = "recovered"
    ANSWERED = "answered"

    def __init__(self) -> None:
        self.side_mode = "answers"
        self.scripts: dict[str, list[Step]] = {}
        self._ids = itertools.count(1)
        self.tasks = 0

    def new_tag(self) -> str:
        self.tasks += 1
        return str(next(self._ids))

    def __call__(self, request: RecordedRequest) -> Step | None:
        body = request.body
        messages = body.get("messages", [])
        if body.get("tool_choice") == "none" or _system(messages) == FALLBACK_SYSTEM:
            return self._side(fallback=body.get("tool_choice") != "none")
        tools = [t["function"]["name"] for t in body.get("tools", [])]
        if "final_reply" not in tools:
            return Reply(text="branch output")
        user = next((m.get("content") or "" for m in messages if m["role"] == "user"), "")
        found = _TAG.search(user)
        if found is None:
            return None
        kind, tag = found.groups()
        called = [c["function"]["name"] for m in messages for c in m.get("tool_calls") or []]
        if kind == "parked":
            if "ask_user" not in called:
                return Reply(calls=[Call("ask_user", QUESTION_SET)])
            return Reply(calls=[Call("final_reply", {"text": self.ANSWERED})])
        script = self.scripts.get(tag)
        if script:
            return script.pop(0)
        return Reply(calls=[Call("final_reply", {"text": self.RECOVERED})])

    def _side(self, *, fallback: bool) -> Step:
        mode = self.side_mode
        if mode == "calls a tool":
            if fallback:
                return Reply(text="an answer from the transcript")
            return Reply(calls=[Call("final_reply", {"text": "not now"})])
        if mode == "answers empty":
            return Reply(text="")
        if mode == "fails 500":
            return Fail(500, "side failure")
        if mode == "fails 400":
            return Fail(400, "side request refused")
        return Reply(text="a side answer")


def _system(messages: list[dict[str, Any]]) -> str:
    return next((m.get("content") or "" for m in messages if m["role"] == "system"), "")


def task_input(queue: str, kind: str, tag: str) -> TaskInput:
    session = f"{queue}-{kind}-{tag}"
    return TaskInput(
        task_id=f"task-{session}",
        session_id=session,
        text=f"chaos {kind} {tag}",
        model=f"openai:{InputModel.NAME}",
        settings=RoundSettings(model_max_attempts=3),
    )


async def parked_task(
    stack: Stack, queue: str, model: InputModel
) -> tuple[WorkflowHandle[Any, TaskResult], str]:
    """A new task waiting on ``QUESTION_SET``, and the id of its pending question set."""
    data = task_input(queue, "parked", model.new_tag())
    handle = await stack.client.start_workflow(
        "TaskWorkflow", data, id=data.task_id, task_queue=queue, result_type=TaskResult
    )
    for _ in range(300):
        status = await handle.query("status", result_type=TaskResult)
        if status.status == "waiting_for_user" and status.pending_question:
            return handle, status.pending_question["id"]
        await asyncio.sleep(0.05)
    raise Violation("stuck tasks", f"{handle.id} never asked its question")


async def run_control(
    stack: Stack, queue: str, model: InputModel, calls: list[tuple[str, str]], *, extra: int = 0
) -> tuple[TaskResult, WorkflowHandle[Any, TaskResult]]:
    """A task whose first step (and ``extra`` more) makes ``calls``; a question it asks is
    answered ``cancelled``, which is always valid, so every path can end."""
    tag = model.new_tag()
    step = Reply(calls=[Call(name, arguments) for name, arguments in calls])
    model.scripts[tag] = [step] * (1 + extra)
    data = task_input(queue, "control", tag)
    handle = await stack.client.start_workflow(
        "TaskWorkflow", data, id=data.task_id, task_queue=queue, result_type=TaskResult
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while loop.time() < deadline:
        description = await handle.describe()
        if description.status != WorkflowExecutionStatus.RUNNING:
            return await handle.result(), handle
        pending = await handle.query("pending_question")
        if pending:
            cancel = {"question_set_id": pending["id"], "status": "cancelled"}
            await handle.execute_update("answer_question", cancel)
        await asyncio.sleep(0.1)
    await failures_of(handle)
    raise Violation("stuck tasks", f"{handle.id} (calls {calls!r}) did not end within 60 s")


async def processed(handle: WorkflowHandle[Any, Any], timeout: float = 20) -> None:
    """Wait until a workflow task completed after the latest signal: the signal was handled."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        events = [e async for e in handle.fetch_history_events()]
        signals = [e.event_id for e in events if e.event_type == _SIGNALED]
        done = [e.event_id for e in events if e.event_type in _TASK_ENDED]
        if signals and done and done[-1] > signals[-1]:
            return
        await asyncio.sleep(0.05)
    raise Violation("stuck tasks", f"{handle.id} never handled a signal within {timeout:.0f} s")


async def failures_of(handle: WorkflowHandle[Any, Any]) -> None:
    """Raise when the task's history holds a workflow task failure of our code."""
    try:
        history = await handle.fetch_history()
    except RPCError:
        return
    ours, _, causes = task_failures(history)
    if ours:
        raise Violation("workflow task failures", f"{handle.id}: {causes[0]}")


_SIGNALED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
_TASK_ENDED = (
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
)
