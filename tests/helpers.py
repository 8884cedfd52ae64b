"""Small helpers the end-to-end tests share: starting tasks and reading their histories."""

from __future__ import annotations

import uuid
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from errands.workflow_io import RoundSettings, TaskInput, TaskResult


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
) -> WorkflowHandle[Any, TaskResult]:
    session_id, task_id = new_ids()
    if session:
        session_id, task_id = session, f"task-{session}-{uuid.uuid4().hex[:6]}"
    return await client.start_workflow(
        "TaskWorkflow",
        TaskInput(
            task_id=task_id,
            session_id=session_id,
            text=text,
            model=model,
            fallback_model=fallback_model,
            headless=headless,
            settings=settings or RoundSettings(),
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


async def history_bytes(handle: WorkflowHandle[Any, Any]) -> int:
    history = await handle.fetch_history()
    return len(history.to_json().encode())


ACTIVITY_STARTED = EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
ACTIVITY_SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
CHILD_INITIATED = EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
WORKFLOW_TASK_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
WORKFLOW_TASK_FAILED = EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
