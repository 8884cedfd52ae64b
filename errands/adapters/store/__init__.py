"""The session store: an append-only, per-session ordered list of messages, on SQLite or
PostgreSQL, chosen by URL (``ERRANDS_DATABASE_URL``)."""

from __future__ import annotations

from errands.adapters.store._base import SessionStore
from errands.adapters.store._open import open_store, sqlite_path

__all__ = ["SessionStore", "open_store", "sqlite_path"]
