"""Patches decided once, as a run starts.

``workflow.patched()`` called for the first time right after a local activity (every store
call is one) can be decided one way when the run executes and another when it replays: when the
activity's result went into an earlier workflow task than the code after it ran in (a busy
worker), the replay meets the patch's marker a workflow task later than the code asks. A patch
asked before anything else in the run has no such past, so new patches are asked here, once,
and kept; a branch a 0.3.0 task starts asks none (``RunPatches.of_branch``). Every patch,
asked or retired, is listed in docs/operations.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from errands.contracts.workflows import SubtaskInput

RUN_START_2 = "asked-at-run-start-2"
"""Release 0.2.0, deprecated in 0.3.0 (every task the support window holds took its path): a
call that waits for the user's approval, and what became of it, are logged, by the task and by
its branches; the workflow reads a control or advisor call's arguments under the size and depth
guards of ``errands.agent.arguments``."""


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
    asked: bool = False
    """Whether the run has asked them yet (``at_start``): an approval answered before, in a
    continued run's first moments, is not logged, as 0.2.0 ran (its histories replay so)."""
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
            return RunPatches(asked=True, notices=True, records_on_steps=True)
        workflow.deprecate_patch(RUN_START_2)
        return RunPatches(asked=True, notices=workflow.patched(RUN_START_3))

    @staticmethod
    def of_branch(data: SubtaskInput) -> None:
        """A branch asks no patch since 0.3.0: the task that starts it runs the same code, so
        the branch runs that code's path (``SubtaskInput.asks_no_patch``), and saves the marker
        and search-attribute upsert a patch writes. A branch a task started before 0.3.0 asks
        the patch it asked then, which its history carries."""
        if not data.asks_no_patch:
            workflow.deprecate_patch(RUN_START_2)
