"""Waiting for the user (SPEC §2): the question set pending, the answer accepted for it, and the
durable wait between them, bounded by the question's deadline.

The answer's update and signal handlers live on the workflow class (Temporal needs them there);
they go through ``PendingQuestion``, which also checks who answers (the task's owner or an
admin, SPEC §10), under the client's own checks, and keeps who did for the event log. A run
that grows too long while it waits, or that wakes to find a newer worker version current, hands
over to a fresh one with the question still pending; this module decides when, the workflow
does it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from errands.agent.asking import clean_answer, pending_view, validate_answer
    from errands.contracts.asking import Answer, QuestionSet
    from errands.contracts.principals import Principal
    from errands.contracts.workflows import AnswerReceipt, RoundSettings
    from errands.errors import AnswerRejected
    from workflows._options import run_is_long, target_version_changed


def answered_by(payload: Any) -> Principal | None:
    """Who gave an answer that validated (``Answer.by``)."""
    if isinstance(payload, Answer):
        return payload.by
    if isinstance(payload, str | bytes):
        return Answer.model_validate_json(payload).by
    return Answer.model_validate(payload).by


class HandOver:
    """The run grew too long while waiting, or its worker version is no longer the current one:
    continue as new (onto the current version), the question still pending."""


class PendingQuestion:
    """The question set waiting for the user, if any, and the answer accepted for it."""

    def __init__(self, questions: QuestionSet | None) -> None:
        # A question pending when the previous run handed over is answerable at once.
        self.questions = questions
        self.answer: Answer | None = None

    @property
    def open(self) -> bool:
        """A question waits and no answer has been accepted for it yet."""
        return self.questions is not None and self.answer is None

    def view(self) -> dict[str, Any] | None:
        """The pending question as the ``pending_question`` query shows it."""
        if self.questions is None:
            return None
        view: dict[str, Any] = pending_view(self.questions)["pending_question"]
        return view

    def validate(self, payload: Any, owner: str | None = None, task_id: str = "") -> None:
        """Raise ``AnswerRejected`` unless ``payload`` answers the open question of a task of
        ``owner``, and whoever gave it may: the owner or an admin (anyone in a task nobody
        owns; an answer that names nobody is the owner's, as before principals)."""
        assert self.questions is not None, "only an open question is answered"
        validate_answer(self.questions, payload)
        by = answered_by(payload)
        if by is None or by.is_admin or owner is None or by.id == owner:
            return
        raise AnswerRejected(
            f"{by} may not answer the questions of task {task_id}: only its owner ({owner}) "
            "or an admin may; nothing was answered"
        )

    def accept(self, payload: Any) -> AnswerReceipt:
        """Take a validated answer (with who gave it); the wait ends with it."""
        assert self.questions is not None, "only an open question is answered"
        cleaned = clean_answer(self.questions, payload)
        self.answer = cleaned.model_copy(update={"by": answered_by(payload)})
        return AnswerReceipt(question_set_id=self.questions.id, status=self.answer.status)

    async def wait(
        self, questions: QuestionSet, deadline: datetime, settings: RoundSettings
    ) -> Answer | None | HandOver:
        """The answer, or None when ``deadline`` passed first, or ``HandOver`` when the run grew
        too long meanwhile (signals, updates) or woke to a newer current worker version (any
        signal wakes it, ``wake_for_upgrade`` among them): then the question stays pending for
        the next run."""
        if self.questions is None or self.questions.id != questions.id:
            # A new question. An answer already accepted for this one (say, in the first
            # moments of a run after a handover) is kept.
            self.questions, self.answer = questions, None
        try:
            ended = await self._until_answered(deadline, settings)
        except BaseException:
            self.questions = None
            raise
        if isinstance(ended, HandOver):
            return ended
        self.questions = None
        answer, self.answer = self.answer, None
        return answer

    async def _until_answered(self, deadline: datetime, settings: RoundSettings) -> HandOver | None:
        def too_long() -> bool:
            return run_is_long(
                continue_as_new=settings.continue_as_new,
                max_history_events=settings.max_history_events,
            )

        def hand_over() -> bool:
            return too_long() or target_version_changed()

        while self.answer is None:
            remaining = deadline - workflow.now()
            if remaining <= timedelta(0):
                return None
            try:
                await workflow.wait_condition(
                    lambda: self.answer is not None or hand_over(),
                    timeout=remaining,
                    timeout_summary="question timeout",
                )
            except TimeoutError:
                return None
            if self.answer is None:
                # Handlers in flight, an answer among them, finish before any handover.
                await workflow.wait_condition(workflow.all_handlers_finished)
            if self.answer is None:
                return HandOver()
        return None
