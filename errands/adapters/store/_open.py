"""Choosing a backend from a URL."""

from __future__ import annotations

import sqlite3

import psycopg

from errands.adapters.store._base import SessionStore
from errands.adapters.store._postgres import PostgresStore
from errands.adapters.store._sqlite import SqliteStore
from errands.contracts.urls import masked_url
from errands.errors import StoreUnavailable


def open_store(url: str) -> SessionStore:
    """Open (creating and migrating as needed) the session store that ``url`` names.

    - ``postgresql://…`` or ``postgres://…``: PostgreSQL, tables in the connection's current
      schema; put ``?options=-csearch_path%3Dname`` in the URL to use schema ``name``, which must
      exist.
    - ``sqlite:///abs/path.db``, ``sqlite://relative/path.db`` or a plain filesystem path: a
      SQLite file, its parent directories created.
    """
    path = sqlite_path(url)
    try:
        return PostgresStore(url) if path is None else SqliteStore(path)
    except (OSError, sqlite3.Error, psycopg.Error) as error:
        # One line, naming the setting to check. Not the URL: a PostgreSQL one may carry a
        # password (the PostgreSQL store's own messages name it without).
        reason = " ".join(str(error).split())
        if "ERRANDS_DATABASE_URL" not in reason:
            reason += "; check ERRANDS_DATABASE_URL"
        raise StoreUnavailable(f"cannot open the session store: {reason}") from error


def sqlite_path(url: str) -> str | None:
    """The SQLite file ``url`` names, or None for PostgreSQL; ValueError for anything else."""
    if url.startswith(("postgresql://", "postgres://")):
        return None
    path = url
    if url.startswith("sqlite://"):
        path = url.removeprefix("sqlite://")
        if path.startswith("/"):
            # SQLAlchemy spells an absolute path with four slashes; accept three or four.
            path = "/" + path.lstrip("/")
    elif "://" in url:
        raise ValueError(
            f"unsupported session store URL {url.split('://')[0]}://…; use postgresql://…, "
            "sqlite:///abs/path.db or a plain file path"
        )
    if path in ("", ":memory:") or path.startswith("file:"):
        raise ValueError(
            f"the session store needs a SQLite file, got {masked_url(url)!r}: connections of an "
            "in-memory database do not share it; give a file path"
        )
    return path
