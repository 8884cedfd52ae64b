"""Nothing unchecked reaches either database: every string a write or a lookup carries, in its
text, ids and JSON (keys included), passes ``errands.contracts.text`` on the way in.

The frontends refuse such text from people; what a model or a tool sent is replaced here (with
U+FFFD) instead of failing the write: PostgreSQL would refuse the row and the activity would
retry it, and run its tool again, until the task failed. SQLite would keep a NUL, but gets the
same text, so a session reads the same on either store. A lookup cleans its keys the same way,
so an id finds the row it was stored as.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from errands.contracts.events import NewEvent
from errands.contracts.messages import NewMessage
from errands.contracts.text import clean, clean_json


def message(row: NewMessage) -> NewMessage:
    """``row`` as it may be stored (the same object when it needs nothing)."""
    update: dict[str, Any] = {}
    for name in ("id", "session_id", "text", "task_id"):
        value = getattr(row, name)
        if value is not None and clean(value) is not value:
            update[name] = clean(value)
    meta = clean_json(row.meta)
    if meta is not row.meta:
        update["meta"] = meta
    return row.model_copy(update=update) if update else row


def event(new: NewEvent) -> NewEvent:
    """``new`` as it may be stored (the same object when it needs nothing)."""
    update: dict[str, Any] = {}
    for name in ("task_id", "key", "cause"):
        value = getattr(new, name)
        if value is not None and clean(value) is not value:
            update[name] = clean(value)
    data = clean_json(new.data)
    if data is not new.data:
        update["data"] = data
    return new.model_copy(update=update) if update else new


def events(news: Sequence[NewEvent]) -> list[NewEvent]:
    return [event(e) for e in news]


def record(value: dict[str, Any]) -> dict[str, Any]:
    """A decision's record as it may be stored."""
    cleaned: dict[str, Any] = clean_json(value)
    return cleaned


def params(values: Sequence[Any]) -> list[Any]:
    """A query's parameters, each string cleaned as the stored keys were."""
    return [clean(v) if isinstance(v, str) else v for v in values]
