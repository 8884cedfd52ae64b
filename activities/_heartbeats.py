"""Heartbeats around a model or tool call, and the time the call may still take.

Temporal delivers an activity's cancellation only through its heartbeats, and sees a dead
worker's attempt as failed only when they stop. So every model and tool activity runs its work
beside a heartbeat every ``BEAT_SECONDS``; a cancellation then cancels the activity's asyncio
task, which closes the SDK's HTTP request mid-flight. The worker sends at most one heartbeat per
its throttle interval (``max_heartbeat_throttle_interval``, at most 0.8 × the heartbeat
timeout), which bounds how soon a cancellation arrives.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities._repeats import settle_server_error

BEAT_SECONDS = 1.0
"""Between two heartbeats. Cheap: the worker throttles what it sends to the server."""

DEFAULT_TIMEOUT = 300.0
"""The call timeout of an activity scheduled without a start-to-close timeout."""

T = TypeVar("T")

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "errands_activity_deadline", default=None
)


async def heartbeating(work: Awaitable[T]) -> T:
    """``work``'s result, with heartbeats sent while it runs; a cancellation of the activity
    cancels ``work`` (and with it any request in flight)."""
    info = activity.info()
    if info.start_to_close_timeout:
        _deadline.set(time.monotonic() + info.start_to_close_timeout.total_seconds())
    beats = asyncio.create_task(_beat())
    try:
        return await work
    except ApplicationError as error:
        settled = settle_server_error(error)
        if settled is error:
            raise
        raise settled from None
    finally:
        beats.cancel()


async def _beat() -> None:
    # The first beat after one interval, not at once: most calls end sooner, and a beat the
    # worker sends is a round trip to the server on the activity's own path. A call that
    # ends within a second needed no heartbeat to be cancelled or declared dead.
    while True:
        await asyncio.sleep(BEAT_SECONDS)
        activity.heartbeat()


def model_timeout() -> float:
    """The SDK timeout of the next call: what is left of the attempt's start-to-close, less a
    second so ours fires first. Several calls in one attempt share it, none overruns it."""
    deadline = _deadline.get()
    if deadline is None:
        info = activity.info()
        if not info.start_to_close_timeout:
            return DEFAULT_TIMEOUT
        return max(1.0, info.start_to_close_timeout.total_seconds() - 1)
    return max(1.0, deadline - time.monotonic() - 1)
