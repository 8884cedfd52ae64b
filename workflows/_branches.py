"""A delegating round's branches (SPEC §1): every subtask a child workflow, all started at once;
a child that fails is recorded as a failed branch the model can read, never failing its siblings.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from activities import SessionActivities
    from errands.contracts import ids
    from errands.contracts.activities import RecordBranchInput
    from errands.contracts.rounds import BranchOutcome
    from errands.contracts.subtasks import DelegateDecision, SubtaskDraft
    from errands.contracts.workflows import SubtaskInput, TaskInput, TaskState
    from workflows._failures import describe
    from workflows._options import store_call
    from workflows._subtask import SubtaskWorkflow


def thread_id(round_: int, ordinal: int) -> str:
    """A branch's child workflow id, which is also its thread's id in the store."""
    return ids.child_workflow_id(workflow.info().workflow_id, round_, ordinal)


def to_start(
    decision: DelegateDecision, done: dict[int, BranchOutcome]
) -> list[tuple[int, SubtaskDraft]]:
    """The round's subtasks (by ordinal, from 1) whose branch has not finished yet."""
    return [(k, d) for k, d in enumerate(decision.subtasks, 1) if k not in done]


async def run_branches(
    data: TaskInput,
    state: TaskState,
    round_: int,
    upto_seq: int,
    todo: list[tuple[int, SubtaskDraft]],
    done: dict[int, BranchOutcome],
    ended: Callable[[str], None] = lambda thread: None,
) -> list[BranchOutcome]:
    """Run ``todo`` beside the branches already ``done``; every outcome, in ordinal order. The
    children's usage is charged to ``state.ledger``; ``ended`` hears of each branch (by its
    workflow id) as it ends, however it ends."""
    # Started together: one workflow task emits every child's start command.
    started = await asyncio.gather(
        *(_branch(data, state, round_, upto_seq, k, d, ended) for k, d in todo)
    )
    return sorted([*done.values(), *started], key=lambda b: b.ordinal)


async def _branch(
    data: TaskInput,
    state: TaskState,
    round_: int,
    upto_seq: int,
    ordinal: int,
    draft: SubtaskDraft,
    ended: Callable[[str], None],
) -> BranchOutcome:
    try:
        return await _run_branch(data, state, round_, upto_seq, ordinal, draft)
    finally:
        ended(thread_id(round_, ordinal))


async def _run_branch(
    data: TaskInput, state: TaskState, round_: int, upto_seq: int, ordinal: int, draft: SubtaskDraft
) -> BranchOutcome:
    type_info = next(t for t in state.types if t.key == draft.type)
    try:
        result = await workflow.execute_child_workflow(
            SubtaskWorkflow.run,
            SubtaskInput(
                task_id=data.task_id,
                session_id=data.session_id,
                round=round_,
                ordinal=ordinal,
                subtask_type=draft.type,
                prompt=draft.prompt,
                references=draft.references,
                catalog_upto_seq=upto_seq,
                catalog_view=state.last_round.view if state.last_round else None,
                params=draft.params,
                model=type_info.model or data.model,
                settings=data.settings,
                headless=data.headless,
                asks_no_patch=True,
            ),
            id=thread_id(round_, ordinal),
            static_summary=f"round {round_} · subtask {ordinal} · {draft.type}",
        )
    except ChildWorkflowError as error:
        return await _record_failed(data, round_, ordinal, draft, error)
    state.ledger.merge("branches", result.usage)
    state.ledger.merge("compaction", result.compaction)
    return BranchOutcome(ordinal=ordinal, type=draft.type, status=result.status, error=result.error)


async def _record_failed(
    data: TaskInput, round_: int, ordinal: int, draft: SubtaskDraft, error: ChildWorkflowError
) -> BranchOutcome:
    """A child whose workflow failed (it could not even record itself): its row says why."""
    failure = describe(error)
    reason = f"the subtask's workflow failed ({failure.kind}): {failure.message}"
    await record_failed_branch(data, round_, ordinal, draft, reason)
    return BranchOutcome(ordinal=ordinal, type=draft.type, status="failed", error=reason)


async def record_failed_branch(
    data: TaskInput, round_: int, ordinal: int, draft: SubtaskDraft, reason: str
) -> None:
    """Write a branch's row as failed, for ``reason``, unless the branch wrote its own."""
    await store_call(
        SessionActivities.record_branch,
        RecordBranchInput(
            task_id=data.task_id,
            session_id=data.session_id,
            round=round_,
            ordinal=ordinal,
            thread_id=thread_id(round_, ordinal),
            draft=draft,
            status="failed",
            error=reason,
        ),
    )


def failure_signature(outcomes: list[BranchOutcome]) -> str:
    """Non-empty when every branch failed, and equal between rounds that failed the same way."""
    if not outcomes or any(o.status == "completed" for o in outcomes):
        return ""
    return "|".join(sorted({o.error or "" for o in outcomes}))
