"""Patches decided once, as a run starts.

``workflow.patched()`` called for the first time right after a local activity (every store
call is one) can be decided one way when the run executes and another when it replays: when the
activity's result went into an earlier workflow task than the code after it ran in (a busy
worker), the replay meets the patch's marker a workflow task later than the code asks. A patch
asked before anything else in the run has no such past, so new patches are asked here, once,
and kept. The ones asked later in runs from before this module keep being asked there for them
(``or workflow.patched(...)`` at the old place).
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

QUESTIONS_LOGGED = "questions-in-the-event-log"
"""A question put to the user and its answer are logged (question_asked, question_answered)."""
TASK_END_AT_START = "task-end-in-the-event-log-asked-at-start"
"""The task's failure or cancellation is logged; asked at the start (``task-end-in-the-event-log``
was asked at the end)."""
INTERRUPTIBLE_AT_START = "branches-interruptible-asked-at-start"
"""A round's branches run beside a wait for an interrupting message; asked at the start
(``branches-interruptible-by-a-message`` was asked as the branches started)."""


@dataclass(frozen=True)
class RunPatches:
    questions_logged: bool
    task_end_logged: bool
    interruptible_rounds: bool

    @staticmethod
    def at_start() -> RunPatches:
        """Ask each patch; call it first thing in the run, before any activity."""
        return RunPatches(
            questions_logged=workflow.patched(QUESTIONS_LOGGED),
            task_end_logged=workflow.patched(TASK_END_AT_START),
            interruptible_rounds=workflow.patched(INTERRUPTIBLE_AT_START),
        )

    @staticmethod
    def none() -> RunPatches:
        """Before a run has asked (a decider made outside a run, in tests)."""
        return RunPatches(questions_logged=False, task_end_logged=False, interruptible_rounds=False)
