"""Stateful MCP sessions (``"session": "task"`` or ``"branch"``): which worker holds one.

A session lives in one worker's pool (``errands.adapters.mcp.pool``), so every call of its scope
must run on that worker. Each worker polls a queue of its own (``holder_queue``) beside the shared
one, and the store records, per scope and server, which worker's queue holds the session: one row
per *generation* (``ids.mcp_holder_id``), written with ``append_once``, so when two workers open
the same session at once exactly one holds it.

A call reaches its holder in one of three ways (``SessionRouting``):

- on the shared queue with no holder known: the first call of the scope opens the session where it
  runs; a later one that lands elsewhere is told where the holder is (``SessionElsewhere``), and
  the workflow sends it there;
- on the holder's queue: the workflow remembered it from an earlier call's output;
- on the shared queue, ``replacing`` a holder whose worker did not pick the call up in time (it
  died): the worker running it claims the next generation, opens a new session and tells the model
  the earlier state is lost.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from temporalio.exceptions import ApplicationError

from errands.adapters.store import SessionStore
from errands.contracts import ids
from errands.contracts.activities import McpHolder, SessionRouting
from errands.contracts.messages import NewMessage

ELSEWHERE = "mcp_session_elsewhere"
"""The error type that sends a call to the queue holding its session (its one detail)."""


def session_elsewhere(queue: str) -> ApplicationError:
    """The error that tells the workflow to send the call to ``queue``, its session's holder."""
    return ApplicationError(
        f"this call's MCP session is held by the worker polling {queue}",
        queue,
        type=ELSEWHERE,
        non_retryable=True,
    )


@dataclass(frozen=True)
class Held:
    """One generation of a scope's session with a server, and the queue holding it."""

    generation: int
    queue: str


class Holders:
    """The store's record of which worker holds each stateful session. Blocking: call it in a
    thread."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store

    def current(self, scope: str, server: str) -> Held | None:
        """The latest generation of the session, or None when none was ever opened."""
        found: Held | None = None
        generation = 1
        while (row := self._store.get(ids.mcp_holder_id(scope, server, generation))) is not None:
            found = Held(generation, row.text)
            generation += 1
        return found

    def claim(self, scope: str, server: str, generation: int, queue: str) -> Held:
        """Hold ``generation`` on ``queue`` unless another worker already does: the holder."""
        row_id = ids.mcp_holder_id(scope, server, generation)
        row = self._store.append_once(
            NewMessage(
                id=row_id,
                session_id=f"mcp:{scope}",
                role="system",
                kind="mcp_holder",
                text=queue,
            )
        )
        return Held(generation, row.text)


async def hold(
    holders: Holders, scope: str, server: str, mine: str, routing: SessionRouting
) -> tuple[McpHolder, bool]:
    """Make sure this worker (polling ``mine``) holds ``scope``'s session with ``server``: the
    holder, and whether it moved here from a worker that is gone (its state lost). Raises
    ``session_elsewhere`` when another, live, worker holds it."""
    held = await asyncio.to_thread(holders.current, scope, server)
    moved = False
    if held is None:
        held = await asyncio.to_thread(holders.claim, scope, server, 1, mine)
    elif held.queue != mine and routing.replacing == held.queue:
        previous = held
        held = await asyncio.to_thread(holders.claim, scope, server, held.generation + 1, mine)
        moved = held.queue == mine and previous.queue != mine
    if held.queue != mine:
        raise session_elsewhere(held.queue)
    return McpHolder(server=server, scope=scope, queue=mine), moved
