"""The event log's schema (errands/contracts/events.py) is pinned: its types, and the document made
from it."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

from errands.contracts.events import EVENT_FIELDS, TERMINAL, EventType, render_schema

ROOT = Path(__file__).resolve().parent.parent

TYPES = [
    "task_started",
    "round_started",
    "model_call_started",
    "model_call_finished",
    "reply_delta",
    "delegated",
    "branch_started",
    "branch_finished",
    "tool_requested",
    "tool_approved",
    "tool_denied",
    "tool_finished",
    "approval_requested",
    "approval_answered",
    "approval_recorded",
    "question_asked",
    "question_answered",
    "side_question_asked",
    "side_question_answered",
    "message_received",
    "message_delivered",
    "compaction",
    "replied",
    "failed",
    "canceled",
    "notification_sent",
    "notification_failed",
]


def test_the_event_types_are_pinned_and_each_is_documented() -> None:
    assert list(get_args(EventType)) == TYPES
    assert list(EVENT_FIELDS) == TYPES
    assert TERMINAL == {"replied", "failed", "canceled"}


def test_docs_events_md_is_the_schema_as_generated() -> None:
    assert (ROOT / "docs" / "events.md").read_text() == render_schema(), (
        "regenerate docs/events.md from errands.contracts.events.render_schema()"
    )
