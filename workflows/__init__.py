"""Deterministic orchestration only: no I/O, no clocks, no randomness.

The workflow classes load on first use. The sandbox imports a workflow's own module afresh for
every run it starts; importing this package must not drag the other workflows' modules along.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workflows._notify import NotificationWorkflow
    from workflows._schedule import ScheduleFireWorkflow
    from workflows._side import SideQuestionWorkflow
    from workflows._subtask import SubtaskWorkflow
    from workflows._task import TaskWorkflow

_HOMES = {
    "NotificationWorkflow": "workflows._notify",
    "ScheduleFireWorkflow": "workflows._schedule",
    "SideQuestionWorkflow": "workflows._side",
    "SubtaskWorkflow": "workflows._subtask",
    "TaskWorkflow": "workflows._task",
}

__all__ = [
    "NotificationWorkflow",
    "ScheduleFireWorkflow",
    "SideQuestionWorkflow",
    "SubtaskWorkflow",
    "TaskWorkflow",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'workflows' has no attribute {name!r}")
    return getattr(import_module(home), name)
