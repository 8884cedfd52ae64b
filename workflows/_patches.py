"""Patches decided once, as a run starts.

``workflow.patched()`` called for the first time right after a local activity (every store
call is one) can be decided one way when the run executes and another when it replays: when the
activity's result went into an earlier workflow task than the code after it ran in (a busy
worker), the replay meets the patch's marker a workflow task later than the code asks. A patch
asked before anything else in the run has no such past, so new patches are asked here, once,
and kept. The patches asked elsewhere are older, and deprecated (docs/operations.md lists them
all).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from temporalio import workflow

RUN_START = "asked-at-run-start-1"
"""Release 0.1.0, deprecated in 0.2.0 (every task the support window holds took its path): a
question put to the user and its answer are logged; a failure or cancellation of the task is
logged; a round's branches run beside a wait for an interrupting message."""

RUN_START_2 = "asked-at-run-start-2"
"""Release 0.2.0: a call that waits for the user's approval, and what became of it, are logged
(approval_requested, approval_answered), by the task and by its branches; the workflow reads a
control or advisor call's arguments under the size and depth guards of
``errands.agent.arguments`` (a 0.1.0 run read whatever it was given, and replays so). A change
asked at the start later gets ``asked-at-run-start-3``."""


RUN_START_3 = "asked-at-run-start-3"
"""Release 0.3.0: a task notifies its targets (``workflows._notices``): each change of state
they want starts a ``NotificationWorkflow``. A run from before it, given targets by a newer
client or by a signal its worker did not know, replays without them. A change asked at the
start later gets ``asked-at-run-start-4``."""


RUN_START_4 = "asked-at-run-start-4"
"""Release 0.3.0: a round's store work rides on its model steps (``activities._rounds``): a new
task's first step opens it, a round's first step prepares the round, and the step that decides
writes the acknowledgement or the reply; the search attributes the task started with count as
published (``workflows._search.Publisher.known_from_start``). A run from before it makes each
a store call of its own, upserts them again, and replays so. A change asked at the start later
gets ``asked-at-run-start-5``, asked before this one (``RunPatches.at_start``)."""


@dataclass(frozen=True)
class RunPatches:
    approvals_logged: bool
    arguments_guarded: bool
    notices: bool = False
    records_on_steps: bool = False

    @staticmethod
    def at_start() -> RunPatches:
        """Ask once; call it first thing in a task's run, before any activity.

        The newest patch is asked first: a run that takes it takes every older one too, and is
        not asked them. Each patch a run is asked writes a marker and an upsert of the
        ``TemporalChangeVersion`` search attribute to its history (measured on the benchmarks'
        hand-written floor: about 2 ms of a task's time each)."""
        workflow.deprecate_patch(RUN_START)
        if workflow.patched(RUN_START_4):
            return RunPatches(
                approvals_logged=True, arguments_guarded=True, notices=True, records_on_steps=True
            )
        release_2 = RunPatches.of_release_2(workflow.patched(RUN_START_2))
        return replace(release_2, notices=workflow.patched(RUN_START_3))

    @staticmethod
    def of_branch() -> RunPatches:
        """A branch's: only what a branch does (it logs its calls' approvals)."""
        return RunPatches.of_release_2(workflow.patched(RUN_START_2))

    @staticmethod
    def of_release_2(taken: bool) -> RunPatches:
        return RunPatches(approvals_logged=taken, arguments_guarded=taken)

    @staticmethod
    def none() -> RunPatches:
        """Before a run has asked."""
        return RunPatches(approvals_logged=False, arguments_guarded=False)
