"""Patches decided once, as a run starts.

``workflow.patched()`` called for the first time right after a local activity (every store
call is one) can be decided one way when the run executes and another when it replays: when the
activity's result went into an earlier workflow task than the code after it ran in (a busy
worker), the replay meets the patch's marker a workflow task later than the code asks. A patch
asked before anything else in the run has no such past, so new patches are asked here, once,
and kept; a branch follows the task that started it (``RunPatches.of_branch``). Every patch,
asked or retired, is listed in docs/operations.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from temporalio import workflow

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
        if workflow.patched(RUN_START_4):
            return RunPatches(
                approvals_logged=True, arguments_guarded=True, notices=True, records_on_steps=True
            )
        release_2 = RunPatches.of_release_2(workflow.patched(RUN_START_2))
        return replace(release_2, notices=workflow.patched(RUN_START_3))

    @staticmethod
    def of_branch(decided: bool | None) -> RunPatches:
        """A branch's: only what a branch does (it logs its calls' approvals). Since 0.3.0 the
        task decides it for the branches it starts (``SubtaskInput.approvals_logged``): a branch
        is started by its task's code, so it runs that code's path and asks no patch, which would
        cost each branch a marker and a search-attribute upsert. A branch a task started before
        0.3.0 has no decision in its input, and asks ``asked-at-run-start-2`` as it did."""
        taken = workflow.patched(RUN_START_2) if decided is None else decided
        return RunPatches.of_release_2(taken)

    @staticmethod
    def of_release_2(taken: bool) -> RunPatches:
        return RunPatches(approvals_logged=taken, arguments_guarded=taken)

    @staticmethod
    def none() -> RunPatches:
        """Before a run has asked."""
        return RunPatches(approvals_logged=False, arguments_guarded=False)
