"""A schedule as frontends show it (``errands schedule show``, ``GET /v1/schedules/NAME``): what
it runs and when, and each recent fire with its task and the task's outcome.

A fire's outcome is its ``ScheduleFireWorkflow``'s result once that has ended (the task's
``replied``/``failed``/``canceled``, or ``missed``/``duplicate``); while it runs, the task's own
state (``running``, ``waiting_for_user``), or ``starting`` before the task exists.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from temporalio.client import (
    ScheduleActionExecutionStartWorkflow,
    ScheduleDescription,
    ScheduleOverlapPolicy,
    WorkflowExecutionStatus,
)
from temporalio.service import RPCError

from errands.contracts import search
from errands.contracts.schedules import MEMO, FireResult, fire_task_id

if TYPE_CHECKING:
    from errands.client._client import Client

OVERLAP_NAMES = {
    ScheduleOverlapPolicy.SKIP: "skip",
    ScheduleOverlapPolicy.BUFFER_ONE: "buffer-one",
    ScheduleOverlapPolicy.ALLOW_ALL: "allow-all",
    ScheduleOverlapPolicy.CANCEL_OTHER: "cancel-previous",
}


@dataclass(frozen=True)
class Fire:
    """One fire of a schedule and the task it started."""

    fired_at: str
    """When it was due (ISO 8601, UTC)."""
    started_at: str | None
    workflow_id: str
    """The fire's ``ScheduleFireWorkflow``."""
    task_id: str
    outcome: str
    """replied, failed, canceled, missed, duplicate; while it runs: running, waiting_for_user,
    starting; unknown when Temporal no longer keeps it."""


@dataclass(frozen=True)
class ScheduleView:
    name: str
    schedule_id: str
    text: str
    """The start of what each fire's task is asked."""
    owner: str | None
    cron: str | None
    every_seconds: float | None
    timezone: str
    session: str | None
    """None: a new session per fire."""
    headless: bool
    overlap: str
    catchup_seconds: float
    paused: bool
    note: str | None
    fires_total: int
    skipped_overlap: int
    """Fires skipped because the previous fire's task still ran."""
    missed_catchup: int
    """Fires Temporal itself dropped (the server was down past the catch-up window)."""
    buffered: int
    next_fires: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    """The workflow ids of the fires running now."""
    recent: list[Fire] = field(default_factory=list)

    def public(self) -> dict[str, Any]:
        return asdict(self)


async def view_of(
    client: Client, name: str, described: ScheduleDescription, *, fires: bool
) -> ScheduleView:
    memo: dict[str, Any] = {}
    try:
        value = await described.memo_value(MEMO, {})
        memo = value if isinstance(value, dict) else {}
    except (ValueError, TypeError):  # a key this client does not hold
        memo = {}
    schedule, info = described.schedule, described.info
    spec = schedule.spec
    recent: list[Fire] = []
    if fires:
        for action in reversed(info.recent_actions):
            execution = action.action
            if not isinstance(execution, ScheduleActionExecutionStartWorkflow):
                continue
            recent.append(
                await _fire(client, name, action.scheduled_at, action.started_at, execution)
            )
    every = spec.intervals[0].every.total_seconds() if spec.intervals else None
    return ScheduleView(
        name=name,
        schedule_id=described.id,
        text=str(memo.get("text", "")),
        owner=described.typed_search_attributes.get(search.OWNER),
        cron=memo.get("cron"),
        every_seconds=memo.get("every_seconds", every),
        timezone=spec.time_zone_name or "UTC",
        session=memo.get("session"),
        headless=bool(memo.get("headless", False)),
        overlap=OVERLAP_NAMES.get(schedule.policy.overlap, "skip"),
        catchup_seconds=schedule.policy.catchup_window.total_seconds()
        if schedule.policy.catchup_window
        else float(memo.get("catchup_seconds", 0.0)),
        paused=schedule.state.paused,
        note=schedule.state.note or None,
        fires_total=info.num_actions,
        skipped_overlap=info.num_actions_skipped_overlap,
        missed_catchup=info.num_actions_missed_catchup_window,
        buffered=described.raw_description.info.buffer_size,
        next_fires=[t.isoformat() for t in info.next_action_times],
        running=[
            a.workflow_id
            for a in info.running_actions
            if isinstance(a, ScheduleActionExecutionStartWorkflow)
        ],
        recent=recent,
    )


async def _fire(
    client: Client,
    name: str,
    fired_at: datetime,
    started_at: datetime | None,
    execution: ScheduleActionExecutionStartWorkflow,
) -> Fire:
    task_id, outcome = fire_task_id(name, fired_at), "unknown"
    temporal = client.temporal
    handle = temporal.get_workflow_handle(
        execution.workflow_id, run_id=execution.first_execution_run_id, result_type=FireResult
    )
    try:
        described = await handle.describe()
        status = described.status
        if status == WorkflowExecutionStatus.COMPLETED:
            result = await handle.result()
            task_id, outcome = result.task_id, result.status
        elif status == WorkflowExecutionStatus.RUNNING:
            outcome = await _task_state(client, task_id)
        elif status is not None:
            outcome = "canceled" if status == WorkflowExecutionStatus.CANCELED else "failed"
    except RPCError:
        pass  # no longer kept (retention): its outcome is unknown
    return Fire(
        fired_at=fired_at.isoformat(),
        started_at=started_at.isoformat() if started_at else None,
        workflow_id=execution.workflow_id,
        task_id=task_id,
        outcome=outcome,
    )


async def _task_state(client: Client, task_id: str) -> str:
    try:
        described = await client.temporal.get_workflow_handle(task_id).describe()
    except RPCError:
        return "starting"
    if described.typed_search_attributes.get(search.WAITING):
        return "waiting_for_user"
    state = described.typed_search_attributes.get(search.STATE)
    return state or "running"
