"""Following a task on the terminal until it ends: its phases, its questions (a picker on a
terminal, the ``errands answer`` command otherwise), the tool calls waiting for approval (with
the commands that answer them), and a worker that does not answer."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from errands.cli._output import approval_text, note, question_text
from errands.cli._picker import pick_answer
from errands.client import TaskHandle
from errands.errors import Refused


async def follow(handle: TaskHandle, *, timeout: float | None, progress: bool) -> dict[str, Any]:
    """The task's result as JSON once it ends. ``progress``: show what it does meanwhile (and
    put its questions to this terminal when there is one). A task nobody serves is said once,
    then waited for."""
    interactive = progress and sys.stdin.isatty() and sys.stdout.isatty()
    shown_question, warned = None, False
    async with asyncio.timeout(timeout):
        async for event in handle.progress(interval=0.3):
            if event.ends:
                return event.data
            if event.type == "unavailable":
                if not warned:
                    note(f"errands: {event.data['detail']}. Still waiting.")
                    warned = True
            elif event.type == "phase" and progress:
                note(f"  … {event.data['phase']}")
            elif event.type == "waiting_for_user":
                pending = event.data["question"]
                if interactive:
                    await _answer_interactively(handle, pending)
                elif pending["id"] != shown_question:
                    shown_question = pending["id"]
                    shown = question_text(handle.task_id, pending)
                    note(shown + "\n(still waiting for the answer)")
            elif event.type == "approval_requested":
                shown = approval_text(handle.task_id, event.data["approval"])
                note(shown + "\n(still waiting for the approval)")
    raise AssertionError("a task's progress ends with its result")  # pragma: no cover


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
        note(f"errands: {error}")
