"""Starting a task, and asking a finished one a side question, the same way from every
frontend (CLI, HTTP gateway)."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowFailureError, WorkflowQueryFailedError
from temporalio.exceptions import CancelledError, TerminatedError
from temporalio.exceptions import TimeoutError as WorkflowTimeoutError
from temporalio.service import RPCError

from errands.activity_io import RoundStepInput, SideAnswer, SideQuestionInput
from errands.pricing import price_table
from errands.settings import Settings
from errands.side_questions import SIDE_TIMEOUT_SECONDS
from errands.workflow_io import TaskInput, TaskResult, TaskStatus

CLOSED_QUERY_TIMEOUT = timedelta(seconds=5)
"""How long to wait for a worker to replay a closed task that ended without a result."""


def new_task_id(session_id: str) -> str:
    """Readable and unique: the task id is also the workflow id operators search for."""
    return f"task-{session_id}-{secrets.token_hex(3)}"


def task_input(
    settings: Settings,
    *,
    session_id: str,
    text: str,
    model: str | None = None,
    fallback_model: str | None = None,
    headless: bool = False,
) -> TaskInput:
    """A task's input with the frontend's settings resolved: models, prices. Never a secret."""
    return TaskInput(
        task_id=new_task_id(session_id),
        session_id=session_id,
        text=text,
        model=model or settings.default_model()[0],
        fallback_model=fallback_model or settings.fallback_model,
        advisor_model=settings.advisor_model,
        headless=headless,
        prices=price_table(settings.prices),
    )


async def ask_finished_task(
    client: Client, settings: Settings, closed: dict[str, Any], question: str
) -> SideAnswer:
    """A side question about a finished task, which takes no updates: a short-lived workflow
    answers it from the task's latest round, with the task's side-question model and timeout.

    ``closed`` is the finished task's result as JSON (a failed or canceled task's stand-in
    has no round: the question is answered over its transcript)."""
    task_id = closed["task_id"]
    last_round = closed.get("last_round")
    data = SideQuestionInput(
        task_id=task_id,
        session_id=closed.get("session_id") or "",
        question=question,
        model=closed.get("side_question_model") or settings.default_model()[0],
        round=RoundStepInput.model_validate(last_round) if last_round else None,
        timeout_seconds=closed.get("side_question_timeout_seconds") or SIDE_TIMEOUT_SECONDS,
    )
    return await client.execute_workflow(
        "SideQuestionWorkflow",
        data,
        id=f"{task_id}/btw-{secrets.token_hex(3)}",
        task_queue=settings.task_queue,
        result_type=SideAnswer,
    )


async def closed_task_state(
    client: Client, task_id: str, *, session_id: str | None = None
) -> dict[str, Any]:
    """A closed task's result, as JSON. A task that ended without one (canceled, terminated,
    timed out) is described by its last ``status``, which a worker replays from its history, so
    its session, usage and last round (what a side question needs) are still at hand; without a
    worker only the way it ended is known, and ``session_id`` if the caller has it."""
    handle = client.get_workflow_handle(task_id, result_type=TaskResult)
    try:
        result = await handle.result(follow_runs=True)
        return result.model_dump(mode="json")
    except WorkflowFailureError as error:
        status, kind, message = _ending(error)
    state: dict[str, Any] = {"task_id": task_id, "session_id": session_id, "usage": None}
    try:
        last = await handle.query(
            "status", result_type=TaskStatus, rpc_timeout=CLOSED_QUERY_TIMEOUT
        )
        # Only what a result holds: the live part (phase, question) ended with the task.
        state = TaskResult.model_validate(last.model_dump()).model_dump(mode="json")
    except (RPCError, WorkflowQueryFailedError):
        pass  # no worker to replay it: what it ended as is all there is
    return {
        **state,
        "status": status,
        "reply": None,
        "error": {"kind": kind, "message": message},
    }


def _ending(error: WorkflowFailureError) -> tuple[str, str, str]:
    """Status, error kind and message of a task that ended without a result."""
    cause = error.cause
    if isinstance(cause, CancelledError):
        return "canceled", "canceled", str(cause) or "canceled"
    if isinstance(cause, TerminatedError):
        return "failed", "terminated", f"terminated by an operator: {cause}"
    if isinstance(cause, WorkflowTimeoutError):
        return "failed", "timed_out", f"the task's workflow timed out: {cause}"
    return "failed", "internal", str(cause)
