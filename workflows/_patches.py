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

RUN_START = "asked-at-run-start-1"
"""The behaviours below, one marker for all: a question put to the user and its answer are
logged (question_asked, question_answered); a failure or cancellation of the task is logged
(``task-end-in-the-event-log`` was asked at the end); a round's branches run beside a wait for
an interrupting message (``branches-interruptible-by-a-message`` was asked as they started).
A change asked at the start later gets ``asked-at-run-start-2``."""

RUN_START_2 = "asked-at-run-start-2"
"""Release 0.2.0: a call that waits for the user's approval, and what became of it, are logged
(approval_requested, approval_answered), by the task and by its branches. A change asked at the
start later gets ``asked-at-run-start-3``."""


@dataclass(frozen=True)
class RunPatches:
    questions_logged: bool
    task_end_logged: bool
    interruptible_rounds: bool
    approvals_logged: bool = False

    @staticmethod
    def at_start() -> RunPatches:
        """Ask once; call it first thing in the run, before any activity."""
        new = workflow.patched(RUN_START)
        return RunPatches(
            questions_logged=new,
            task_end_logged=new,
            interruptible_rounds=new,
            approvals_logged=workflow.patched(RUN_START_2),
        )

    @staticmethod
    def of_branch() -> RunPatches:
        """A branch's: only what a branch does (it logs its calls' approvals)."""
        return RunPatches.none(approvals_logged=workflow.patched(RUN_START_2))

    @staticmethod
    def none(*, approvals_logged: bool = False) -> RunPatches:
        """Before a run has asked (a decider made outside a run, in tests)."""
        return RunPatches(
            questions_logged=False,
            task_end_logged=False,
            interruptible_rounds=False,
            approvals_logged=approvals_logged,
        )
