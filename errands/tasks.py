"""Starting a task the same way from every frontend (CLI, HTTP gateway)."""

from __future__ import annotations

import secrets

from errands.pricing import price_table
from errands.settings import Settings
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
