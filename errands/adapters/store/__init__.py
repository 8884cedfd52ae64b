"""The session store: an append-only, per-session ordered list of messages, on SQLite or
PostgreSQL, chosen by URL (``ERRANDS_DATABASE_URL``)."""

from __future__ import annotations

from errands.adapters.store._base import PrincipalRecord, SessionStore, TaskStart
from errands.adapters.store._open import open_store, sqlite_path
from errands.adapters.store._work import store_work

__all__ = [
    "PrincipalRecord",
    "SessionStore",
    "TaskStart",
    "open_store",
    "sqlite_path",
    "store_work",
]
