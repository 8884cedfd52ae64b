"""Stateful MCP sessions seen from a workflow: sending each call to the worker that holds its
session, moving the session when that worker is gone, closing sessions when their owner ends.

A server configured with ``"session": "task"`` or ``"branch"`` keeps one session per task or
branch, on the worker that opened it (activities/_mcp_sessions.py). The workflow learns the
holder's queue from a call's output (or from the error that redirects a call landing elsewhere)
and sends the scope's next calls there, with a short pickup timeout: a holder that does not
take the call is gone, and the call goes back to the shared queue ``replacing`` it, where a live
worker opens a new session and tells the model its earlier state is lost. Nothing here runs for a
task without stateful servers: its commands are those of any other task.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from activities import ToolActivities
    from activities._mcp_sessions import ELSEWHERE
    from errands.contracts.activities import (
        CloseSessionsInput,
        McpHolder,
        RunToolOutput,
        SessionRouting,
    )
    from workflows._options import HOLDER_PICKUP, STORE_TIMEOUT

MCP_HOLDER_SIGNAL = "mcp_holder"
"""A branch tells its task of a task-wide session it reached (the task closes it at its end)."""
MOVES = 4
"""Most hops of one call between queues (redirected, then its holder gone, then redirected)."""


class SessionHolders:
    """The holders of the stateful MCP sessions one workflow run reached: by server, to route
    calls; all of them, to close them."""

    def __init__(self, known: list[McpHolder]) -> None:
        self._holders = known
        """The run's own list (its state's, carried across continue-as-new), kept in place."""

    def all(self) -> list[McpHolder]:
        """Every holder known, oldest first (carried across continue-as-new, and up to the task
        from a branch)."""
        return list(self._holders)

    def learn(self, holder: McpHolder) -> None:
        self._remember(holder)

    def _remember(self, holder: McpHolder) -> bool:
        """Whether ``holder`` is news: a session not known, or known on another queue."""
        if holder in self._holders:
            return False
        self._holders[:] = [
            h for h in self._holders if (h.scope, h.server) != (holder.scope, holder.server)
        ]
        self._holders.append(holder)
        return True

    def _queue(self, server: str | None) -> str | None:
        """The queue that held ``server``'s session most recently, if any call reached one."""
        found = [h for h in self._holders if h.server == server]
        return found[-1].queue if found else None

    async def run(
        self,
        server: str | None,
        call: Callable[[SessionRouting], Awaitable[RunToolOutput]],
        learned: Callable[[McpHolder], Awaitable[None]] | None = None,
    ) -> RunToolOutput:
        """Run one tool call (``call`` schedules it as ``routing`` says: on the holder's queue, or
        the shared one) where its session is. ``server``: the call's MCP server, when the
        workflow knows it. ``learned`` is told of a holder this run did not know."""
        routing = SessionRouting(holder=self._queue(server))
        for hop in range(MOVES):
            try:
                out = await call(routing)
            except ActivityError as error:
                if hop == MOVES - 1:
                    raise
                elsewhere = _redirect(error)
                if elsewhere is not None:
                    routing = SessionRouting(holder=elsewhere)
                elif routing.holder is not None and isinstance(error.cause, TimeoutError):
                    routing = SessionRouting(replacing=routing.holder)  # its worker is gone
                else:
                    raise
                continue
            if out.holder is not None and self._remember(out.holder) and learned is not None:
                await learned(out.holder)
            return out
        raise AssertionError("unreachable: the last hop returns or raises")

    async def close(self, scopes: Callable[[McpHolder], bool]) -> None:
        """Close the sessions whose holder ``scopes`` picks, on each holder's own queue. A holder
        that is gone is not waited for: its sessions went with it."""
        by_queue: dict[str, list[str]] = {}
        for holder in self._holders:
            if scopes(holder) and holder.scope not in by_queue.setdefault(holder.queue, []):
                by_queue[holder.queue].append(holder.scope)
        for queue, owned in by_queue.items():
            try:
                await workflow.execute_activity_method(
                    ToolActivities.close_mcp_sessions,
                    CloseSessionsInput(scopes=owned),
                    task_queue=queue,
                    schedule_to_start_timeout=HOLDER_PICKUP,
                    start_to_close_timeout=STORE_TIMEOUT,
                    retry_policy=RetryPolicy(maximum_attempts=1),
                    summary=f"close MCP sessions · {', '.join(owned)}",
                )
            except ActivityError:
                workflow.logger.info("MCP sessions on %s not closed: its worker is gone", queue)


def _redirect(error: ActivityError) -> str | None:
    """The holder queue an ``ELSEWHERE`` error names, or None for any other failure."""
    cause = error.cause
    if isinstance(cause, ApplicationError) and cause.type == ELSEWHERE and cause.details:
        return str(cause.details[0])
    return None
