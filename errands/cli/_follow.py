"""Following a task on the terminal until it ends, from its event log: what it does (``errands
run``: its rounds, branches and tools), its questions (a picker on a terminal, the ``errands
answer`` command otherwise), the tool calls waiting for approval (with the commands that answer
them), and a task no worker serves."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from errands.cli._output import approval_text, note, question_text, step_line
from errands.cli._picker import pick_answer
from errands.cli._terminal import one_line
from errands.client import TaskHandle
from errands.contracts.events import TERMINAL, StoredEvent
from errands.errors import ConfigError, Refused, Unavailable


async def follow(handle: TaskHandle, *, timeout: float | None, steps: bool) -> dict[str, Any]:
    """The task's result as JSON once it ends (``TimeoutError`` after ``timeout`` seconds).
    ``steps``: print what it does meanwhile, and put its questions to this terminal when there
    is one. Questions and approvals waiting for the user are printed either way."""
    interactive = steps and sys.stdin.isatty() and sys.stdout.isatty()
    async with asyncio.timeout(timeout):
        try:
            await handle.status()  # one read: a task nobody serves is said once, then waited for
        except Unavailable as error:
            note(one_line(f"errands: {error.message}. Still waiting."))
        try:
            await _Follower(handle, steps, interactive).read()
        except ConfigError as error:  # no session store here: the result still comes
            note(one_line(f"errands: {error.message}. Waiting for the result without its events."))
        result = await handle.wait()
    return result.public()


class _Follower:
    """One task's log read to its end. The events written before the first read are taken
    first, and only the question and approvals still open after them are shown: a task
    followed late shows what waits now, not what waited once."""

    def __init__(self, handle: TaskHandle, steps: bool, interactive: bool) -> None:
        self.handle = handle
        self.steps = steps
        self.interactive = interactive
        self.types: dict[tuple[int, int], str] = {}
        """Each branch's subtask type by (round, ordinal)."""
        self.approvals: dict[str, dict[str, Any]] = {}
        """The approvals asked and not answered yet, by id."""
        self.question: str | None = None
        """The question set asked and not answered yet."""

    async def read(self) -> None:
        seq = 0
        while batch := await self.handle.events_after(seq):
            for event in batch:
                seq = event.seq
                self.take(event)
                if event.type in TERMINAL:
                    return
        for approval in self.approvals.values():
            _show_approval(self.handle.task_id, approval)
        if self.question:
            await self.ask(self.question, seq)
        async for event in self.handle.events(after=seq):
            self.take(event)
            if event.type == "approval_requested":
                _show_approval(self.handle.task_id, event.data)
            elif event.type == "question_asked":
                await self.ask(event.data["question_set_id"], event.seq)

    def take(self, event: StoredEvent) -> None:
        data = event.data
        if event.type == "approval_requested":
            self.approvals[data["approval_id"]] = dict(data)
        elif event.type == "approval_recorded" and data["approval_id"] in self.approvals:
            # Still waiting (policy two): shown again later, it says who approved so far.
            waiting = self.approvals[data["approval_id"]]
            waiting["approved_by"] = data["approved_by"]
            waiting["approvals_needed"] = len(data["approved_by"]) + data["waiting_for"]
        elif event.type == "approval_answered":
            self.approvals.pop(data["approval_id"], None)
        elif event.type == "question_asked":
            self.question = data["question_set_id"]
        elif event.type == "question_answered" and self.question == data["question_set_id"]:
            self.question = None
        line = step_line(event, self.types)
        if self.steps and line:
            note(line)

    async def ask(self, question_set_id: str, seq: int) -> None:
        """Show the question set the log says was asked (at ``seq``), as the task holds it (a
        picker on a terminal); nothing once it is no longer the one waiting."""
        while True:
            try:
                pending = await self.handle.pending_question()
            except Refused:
                return  # the task has ended meanwhile
            if pending:
                break
            # The task logs a question a moment before it opens it: wait for that, unless the
            # log has moved past it.
            if any(_closes(e, question_set_id) for e in await self.handle.events_after(seq)):
                return
            await asyncio.sleep(0.2)
        if pending["id"] != question_set_id:
            return
        if self.interactive:
            await _answer_interactively(self.handle, pending)
        else:
            note(question_text(self.handle.task_id, pending) + "\n(still waiting for the answer)")


def _closes(event: StoredEvent, question_set_id: str) -> bool:
    """Whether ``event`` means the question set waits no more."""
    answered = event.type == "question_answered"
    return event.type in TERMINAL or (answered and event.data["question_set_id"] == question_set_id)


def _show_approval(task_id: str, approval: dict[str, Any]) -> None:
    note(approval_text(task_id, approval) + "\n(still waiting for the approval)")


async def _answer_interactively(handle: TaskHandle, pending: dict[str, Any]) -> None:
    """Show the pending question as a picker on this terminal and send the answer."""
    payload = await asyncio.to_thread(pick_answer, pending)
    answers = payload["answers"]
    chosen = answers if any(answers.values()) else None
    try:
        await handle.answer(
            chosen,
            dismiss=payload["status"] == "answered" and chosen is None,
            cancel=payload["status"] == "cancelled",
            question_set_id=payload["question_set_id"],
        )
    except Refused as error:
        note(one_line(f"errands: {error}"))
