"""The session store: an append-only, per-session ordered list of messages, on SQLite or
PostgreSQL, chosen by URL (``ERRANDS_DATABASE_URL``)."""

from __future__ import annotations

from errands.store._base import SessionStore
from errands.store._open import open_store, sqlite_path

__all__ = ["SessionStore", "open_store", "sqlite_path"]
