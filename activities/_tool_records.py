"""What settling one tool call writes (``activities._tool_calls``): its events
(``tool_requested``, ``tool_finished``, ``tool_denied``) and its result row, under the call's
deterministic id, and what an earlier attempt already settled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from activities._events import event, preview
from errands.contracts.activities import RunToolOutput
from errands.contracts.events import EventType, NewEvent, named
from errands.contracts.messages import NewMessage, StoredMessage, ToolCall
from errands.contracts.principals import Principal
from errands.contracts.rows import ToolResultMeta
from errands.contracts.text import clean, replaced_note, unstorable


def settled_before(existing: StoredMessage) -> RunToolOutput:
    """A call an earlier attempt settled: its stored result, and nothing run again."""
    return RunToolOutput(ok=not ToolResultMeta.of(existing).is_error, chars=len(existing.text))


class ToolEvents:
    """The ``tool_requested`` and ``tool_finished`` (or ``tool_denied``) events of one tool call,
    to write with the store work around it."""

    def __init__(
        self,
        task_id: str,
        where: str,
        call_id: str,
        call: ToolCall,
        by: list[Principal] | None = None,
    ) -> None:
        self._task_id, self._where = task_id, where
        self._call_id, self._call = call_id, call
        self._by = [named(p) for p in by or ()]
        """Who approved or denied the call, as the events name them (empty: nobody was asked,
        or an answer from before principals)."""

    def denied(self, text: str) -> list[NewEvent]:
        """Not run: denied, not answered in time, no one to ask, cancelled or failed."""
        return self._events(
            "denied", "tool_denied", tool=self._call.name, reason=preview(text), by=self._by
        )

    def requested(self, *, approved: bool) -> list[NewEvent]:
        approval = (
            self._events("approved", "tool_approved", tool=self._call.name, by=self._by)
            if approved
            else []
        )
        arguments = preview(self._call.arguments)
        return [
            *approval,
            *self._events("requested", "tool_requested", tool=self._call.name, arguments=arguments),
        ]

    def finished(self, text: str, is_error: bool) -> list[NewEvent]:
        return self._events(
            "finished",
            "tool_finished",
            tool=self._call.name,
            is_error=is_error,
            chars=len(text),
        )

    def _events(self, what: str, type_: EventType, **data: Any) -> list[NewEvent]:
        if not self._task_id:  # from an older caller: nothing
            return []
        key = f"{self._call_id}:{what}"
        return [event(self._task_id, key, type_, self._call_id, where=self._where, **data)]


@dataclass(frozen=True)
class Settling:
    """One tool call to settle: its events, where its result is stored, and whether it runs
    (``verdict`` None) or is refused with that text."""

    events: ToolEvents
    result: ToolResult
    verdict: str | None
    approved: bool


@dataclass(frozen=True)
class ToolResult:
    """Where one tool call's result is stored: the row ``message`` builds."""

    id: str
    session_id: str
    call: ToolCall
    task_id: str | None = None

    def message(self, text: str, is_error: bool) -> NewMessage:
        call = self.call
        if replaced := unstorable(text):
            # The store would replace them silently; the model is told what it reads.
            text = clean(text) + replaced_note(replaced)
        return NewMessage(
            id=self.id,
            session_id=self.session_id,
            role="tool",
            kind="tool_result",
            text=text,
            task_id=self.task_id,
            meta=ToolResultMeta(
                tool_call_id=call.id, tool_name=call.name, is_error=is_error
            ).stored(),
        )
