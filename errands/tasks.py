"""Starting a task, and asking a finished one a side question, the same way from every
frontend (CLI, HTTP gateway)."""

from __future__ import annotations

import secrets
from typing import Any

from temporalio.client import Client

from errands.activity_io import RoundStepInput, SideAnswer, SideQuestionInput
from errands.pricing import price_table
from errands.settings import Settings
from errands.side_questions import SIDE_TIMEOUT_SECONDS
from errands.workflow_io import TaskInput


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
