"""Running store work (the store's calls are blocking) from the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from errands.adapters.store._base import SessionStore

P = ParamSpec("P")
T = TypeVar("T")


async def store_work(
    store: SessionStore, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """``work(*args, **kwargs)``, a function that calls ``store``.

    On a SQLite store whose write lock is free, at once, on the event loop, in one transaction
    (``SqliteStore.begin_at_once``): its calls wait for no lock, and a step's usual store work
    takes well under a millisecond, about what a trip to a thread and back costs (0.2 ms; a model
    step makes two). Work that reads a large session blocks the loop while it reads: 7 ms for
    1,000 rows of 4 KB (measured), about the time its thread would have held the GIL anyway.
    Otherwise, while another writer holds the lock and on PostgreSQL (each call a network round
    trip), on a thread.
    """
    begin = getattr(store, "begin_at_once", None)
    held = begin() if begin is not None else None
    if held is None:
        return await asyncio.to_thread(work, *args, **kwargs)
    with held:
        return work(*args, **kwargs)
