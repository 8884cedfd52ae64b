"""Scheduled tasks (SPEC §11): what a schedule's fire carries, and every id a fire derives.

A schedule ``NAME`` is the Temporal Schedule ``errands-{NAME}``. Each fire starts one
``ScheduleFireWorkflow`` (workflow id ``fire-{NAME}-{fire time, RFC 3339}``, Temporal's own
naming) with a ``ScheduledTask``; that workflow starts the fire's task as its child under
``task-{NAME}-{YYYYMMDDTHHMMSSZ}``, so one fire never starts two tasks. Nothing here carries a
secret: notification targets travel as references (``errands.contracts.notifications``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field
from temporalio.common import SearchAttributeKey

from errands.contracts.notifications import NotifyTarget
from errands.contracts.workflows import TaskInput

NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
"""What a schedule's name may be: it is part of the schedule's, the fires' and the tasks' ids."""
SCHEDULE_PREFIX = "errands-"
MEMO = "errands_schedule"
"""The memo entry of a schedule and of its fires that says what they run."""
DEFAULT_CATCHUP_SECONDS = 3600.0
"""How late a fire may still start its task (Temporal's catch-up window, and the fire's own)."""
MIN_CATCHUP_SECONDS = 10.0
"""Temporal's smallest catch-up window."""
SCHEDULED_BY = SearchAttributeKey.for_keyword("TemporalScheduledById")
"""Set by Temporal on a fire's workflow: the schedule's id."""
SCHEDULED_AT = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")
"""Set by Temporal on a fire's workflow: the time the fire was due."""

Overlap = Literal["skip", "buffer-one", "allow-all", "cancel-previous"]
"""What a fire does while the previous fire's task still runs: skip it (the default), hold one
until it ends, start anyway, or cancel the running task first."""
FireStatus = Literal["replied", "failed", "canceled", "missed", "duplicate"]
"""How a fire ended: its task's outcome; ``missed``: it first ran past its catch-up window (the
workers were down) and started nothing; ``duplicate``: its task existed already."""


class ScheduledTask(BaseModel):
    """What every fire of a schedule starts: the ``ScheduleFireWorkflow``'s input."""

    name: str
    text: str
    session: str | None = None
    """The named session every fire's task works in; None: a new session per fire."""
    headless: bool = False
    model: str | None = None
    """``provider:model``; None: the worker's ``ERRANDS_MODEL`` when the fire runs."""
    owner: str | None = None
    owner_role: str | None = None
    notify: list[NotifyTarget] = Field(default_factory=list)
    """References only: configured targets resolved when the schedule was made, and its own
    URLs (``stored:schedule:NAME:K``)."""
    catchup_seconds: float = DEFAULT_CATCHUP_SECONDS


class PrepareFire(BaseModel):
    """The ``prepare_scheduled_task`` activity's input."""

    task: ScheduledTask
    fired_at: datetime
    nonce: str = ""
    """Random (the fire workflow's own, replayed as drawn) in a new session's id, so nobody
    can claim a fire's session before it is due."""


class PreparedFire(BaseModel):
    """What the fire workflow needs to start the task: its input, the value of its
    ``ErrandsSession`` (the id, or its digest with encryption on) and its start memo."""

    task: TaskInput
    session_tag: str
    memo: dict[str, str] | None = None


class FireResult(BaseModel):
    """What a ``ScheduleFireWorkflow`` returns."""

    task_id: str
    status: FireStatus
    fired_at: datetime
    late_seconds: float = 0.0
    """How long after it was due the fire first ran."""


def schedule_id(name: str) -> str:
    return f"{SCHEDULE_PREFIX}{name}"


def name_of(schedule: str) -> str | None:
    """The name of errands' schedule id ``schedule``; None for a schedule not errands'."""
    if not schedule.startswith(SCHEDULE_PREFIX):
        return None
    name = schedule.removeprefix(SCHEDULE_PREFIX)
    return name if re.fullmatch(NAME_PATTERN, name) else None


def fire_action_id(name: str) -> str:
    """The workflow id Temporal prefixes to each fire's (``-{fire time}`` is appended)."""
    return f"fire-{name}"


def _stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def fire_task_id(name: str, at: datetime) -> str:
    """The id of the task the fire due at ``at`` starts (whole seconds, UTC)."""
    return f"task-{name}-{_stamp(at)}"


def fire_session_id(name: str, at: datetime, nonce: str = "") -> str:
    """The new session of the fire due at ``at`` (a schedule without a named session): within
    the session id rules (at most 80 characters, starting with a letter), with ``nonce`` so
    that it cannot be guessed ahead of the fire."""
    return f"s{nonce}{at.astimezone(UTC).strftime('%Y%m%d%H%M%S')}-{name}"[:80]
