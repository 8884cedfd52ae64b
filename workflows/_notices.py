"""A task's notifications (SPEC §11): each change of state its targets want starts one
``NotificationWorkflow`` (workflows/_notify.py), abandoned, so the task never waits on a
delivery and never fails because of one.

A task without targets starts nothing and adds nothing to its history. A change reached again
by a later run (a question still pending after continue-as-new) starts the same workflow id,
which Temporal refuses: each change is notified once.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from errands.contracts.approvals import ApprovalRequest
    from errands.contracts.asking import QuestionSet
    from errands.contracts.notifications import (
        SUMMARY_CHARS,
        Notice,
        NotifyEvent,
        notice_workflow_id,
    )
    from errands.contracts.workflows import TaskInput

NOTIFICATION_WORKFLOW = "NotificationWorkflow"


class Notifier:
    """Starts the task's notifications and knows when every start is done."""

    def __init__(self, data: TaskInput) -> None:
        self._data = data
        self._starting: list[asyncio.Task[None]] = []
        self._keys: set[str] = set()
        """What this run has notified: a key is notified once (across runs, Temporal refuses a
        second start of its workflow id)."""
        self.enabled = False
        """Set as the run starts (``RunPatches.notices``): a run from before notifications
        replays without them."""

    def notice(self, event: NotifyEvent, key: str, summary: str | None = None) -> None:
        """Notify ``event`` (``key``: what changed, stable across runs) to the targets that
        want it; started beside the task, which awaits only the start (``started``)."""
        data = self._data
        targets = [target for target in data.notify if event in target.events]
        if not targets or not self.enabled or key in self._keys:
            return
        self._keys.add(key)
        notice = Notice(
            task_id=data.task_id,
            session_id=data.session_id,
            owner=data.owner,
            event=event,
            key=key,
            at=workflow.now(),
            summary=None if summary is None else summary[:SUMMARY_CHARS],
            targets=targets,
            schedule=data.schedule,
            retry_seconds=data.settings.notify_retry_seconds,
        )
        self._starting.append(asyncio.create_task(self._start(notice)))

    async def _start(self, notice: Notice) -> None:
        try:
            await workflow.start_child_workflow(
                NOTIFICATION_WORKFLOW,
                notice,
                id=notice_workflow_id(notice.task_id, notice.key),
                parent_close_policy=ParentClosePolicy.ABANDON,
                # Closed already (delivered before a continue-as-new): still never twice.
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                static_summary=f"notify: {notice.event}",
            )
        except WorkflowAlreadyStartedError:
            pass  # an earlier run of the task notified this change

    async def started(self) -> None:
        """Every notification asked for so far has started: call before the run ends or
        continues as new (a child not yet started when its parent closes never starts)."""
        starting, self._starting = self._starting, []
        await asyncio.gather(*starting)


def question_summary(questions: QuestionSet) -> str:
    """What a notification says of a question set: its headers."""
    return "; ".join(question.header for question in questions.questions)


def approval_summary(request: ApprovalRequest) -> str:
    """What a notification says of a call awaiting approval: the tool, never its arguments."""
    return f"approve a call of {request.tool}"
