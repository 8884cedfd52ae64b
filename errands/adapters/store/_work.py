"""Running store work (the store's calls are blocking) from the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from errands.adapters.store._base import SessionStore
from errands.errors import TransactionLost

P = ParamSpec("P")
T = TypeVar("T")


async def store_work(
    store: SessionStore, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """``work(*args, **kwargs)``, a function that calls ``store``.

    On a SQLite store whose write lock is free, at once, on the event loop, in one transaction
    (``SqliteStore.begin_at_once``): its calls wait for no lock, and a step's usual store work
    takes well under a millisecond, about what a trip to a thread and back costs (0.2 ms; a model
    step makes two). The loop waits while it runs, SQLite's own time included: 7 ms to read a
    session of 1,000 rows of 4 KB (measured), and a commit that checkpoints the WAL syncs the
    file. Otherwise, while another writer holds the lock and on PostgreSQL (each call a network
    round trip), on a thread; there too when the transaction was lost (SQLite rolled it back
    after an I/O error): ``work`` runs again there, its writes idempotent as every store write
    of an activity is (an attempt may be retried), and meets the error afresh if it lasts.

    ``work`` must not await, and nothing it calls may wait for the event loop.
    """
    begin = getattr(store, "begin_at_once", None)
    held = begin() if begin is not None else None
    if held is not None:
        try:
            with held:
                return work(*args, **kwargs)
        except TransactionLost:
            pass
    return await asyncio.to_thread(work, *args, **kwargs)
