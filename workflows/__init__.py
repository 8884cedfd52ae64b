"""Deterministic orchestration only: no I/O, no clocks, no randomness."""

from workflows._side import SideQuestionWorkflow
from workflows._subtask import SubtaskWorkflow
from workflows._task import TaskWorkflow

__all__ = ["SideQuestionWorkflow", "SubtaskWorkflow", "TaskWorkflow"]
