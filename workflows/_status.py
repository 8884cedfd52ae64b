"""What a task shows while it runs: its state and phase (the ``status`` query and the search
attributes), and how it ended. The handlers, the round loop and the approvals all change it
through ``TaskStatus``; each change of state is one search-attribute upsert, in the order made."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from errands.agent.pricing import cost_usd
    from errands.contracts.approvals import ApprovalRequest
    from errands.contracts.notifications import NOTIFY_EVENTS
    from errands.contracts.workflows import TaskError, TaskInput, TaskState
    from workflows._notices import Notifier, approval_summary
    from workflows._search import Publisher


class TaskStatus:
    """The task's state (running, waiting_for_user, replied, failed, canceled), its phase in
    words, its reply or error, and the error a round is waiting out."""

    def __init__(self, data: TaskInput, state: TaskState) -> None:
        self._data, self._state = data, state
        self._search = Publisher(enabled=data.search_attributes, session_id=data.session_id)
        self.status = "running"
        self.phase = "starting"
        self.reply: str | None = None
        self.join_reason: str | None = None
        self.error: TaskError | None = None
        self.last_error: TaskError | None = None
        self._phase_before_approval: str | None = None
        self.notifier = Notifier(data)

    def known_from_start(self) -> None:
        """The search attributes the task started with are published already."""
        self._search.known_from_start()

    @property
    def ended(self) -> bool:
        return self.status in ("replied", "failed", "canceled")

    def set(self, status: str, phase: str, *, key: str | None = None, summary: str = "") -> None:
        """Change the state and phase; a new state the task's targets want is notified, as
        ``key`` (default: the state's name; a wait names what it waits on) with ``summary``. A
        new wait while the task already waits (a question while a call awaits approval) is
        notified too: each needs someone."""
        changed = status != self.status
        self.status, self.phase = status, phase
        self._search.publish(
            state=status,
            round_=self._state.round,
            cost=cost_usd(self._state.ledger, self._data.prices),
        )
        if status in NOTIFY_EVENTS and (changed or key is not None):
            self.notifier.notice(status, key or status, summary or None)  # type: ignore[arg-type]

    def replied(self, text: str, *, join_reason: str | None = None) -> None:
        self.reply, self.join_reason = text, join_reason
        self.set("replied", "replied")

    def fail(self, kind: str, message: str) -> None:
        self.error = TaskError(kind=kind, message=message)  # type: ignore[arg-type]
        self.set("failed", "failed")

    def show_approvals(self, waiting: list[ApprovalRequest], question_open: bool) -> None:
        """While a call waits for approval the task waits for the user; then it runs again.
        Each call put to a person is notified once, however many wait at a time."""
        if waiting and self.status == "running":
            self._phase_before_approval = self.phase
            self.set(
                "waiting_for_user",
                f"waiting for approval of {waiting[0].tool}",
                key=f"approval:{waiting[0].approval_id}",
                summary=approval_summary(waiting[0]),
            )
        elif not waiting and self._phase_before_approval is not None:
            phase, self._phase_before_approval = self._phase_before_approval, None
            if self.status == "waiting_for_user" and not question_open:
                self.set("running", phase)
        if self.status == "waiting_for_user":
            for request in waiting:
                key, summary = f"approval:{request.approval_id}", approval_summary(request)
                self.notifier.notice("waiting_for_user", key, summary)
