"""Quotas at the start of a task (SPEC §10, ``errands.agent.quotas``): running tasks, starts per
hour and cost per day of the acting principal, counted from the session store and Temporal.

A principal nothing limits costs nothing: no store read, no Temporal call. Otherwise:

- ``starts_per_hour``: their starts recorded in the last hour (``SessionStore.starts_since``);
- ``running_tasks``: Temporal's running tasks owned by them, united with their starts of the last
  minute whose event log has no last event yet, since visibility lags a start by up to a second:
  tasks started in quick succession are each counted;
- ``cost_per_day_usd``: what their tasks' model calls cost since 00:00 UTC, at this client's
  prices (``ERRANDS_PRICES`` over the catalog's).

Two starts of one principal in one process must not both pass on the same count, so
``quota_checked`` holds a lock per principal from the check until the start is recorded. Several
processes (gateways behind a balancer) may each let one start through at the limit: a quota is
a bound on use, not a ledger.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from temporalio.service import RPCError

from errands.adapters.store import TaskStart
from errands.agent.pricing import price_table
from errands.agent.quotas import (
    HOUR,
    RUNNING_RETRY_SECONDS,
    Quota,
    day_start,
    quota_of,
    seconds_to_next_day,
    seconds_until_hour_frees,
    spent_usd,
    usd,
)
from errands.client._task_calls import TASK_WORKFLOW
from errands.contracts import ids, search
from errands.contracts.principals import Principal
from errands.errors import QuotaExceeded, TemporalUnreachable

if TYPE_CHECKING:
    from errands.client._client import Client

VISIBILITY_LAG = timedelta(seconds=60)
"""Starts this recent count as running unless their log has ended, whatever visibility says."""

_LOCKS: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
"""One lock per principal with a start in progress in this process (gone with the last user)."""


@asynccontextmanager
async def quota_checked(
    client: Client, principal: Principal | None, *, queued: bool = False
) -> AsyncIterator[None]:
    """Around one start by ``principal``: ``QuotaExceeded`` on entry when a quota refuses it,
    and the principal's other starts in this process held until this block ends, so start the
    task and record it (``SessionStore.record_start``) inside it. None: the operator, unlimited.
    ``queued``: a message queued on a running task, a start to come (as ``check_start``)."""
    quota = _quota(client, principal)
    if principal is None or quota is None:
        yield
        return
    lock = _LOCKS.get(principal.id)
    if lock is None:
        lock = _LOCKS[principal.id] = asyncio.Lock()
    async with lock:
        await _check(client, principal, quota, queued=queued)
        yield


async def check_start(client: Client, principal: Principal, *, queued: bool = False) -> None:
    """``QuotaExceeded`` (with ``retry_after``) when ``principal`` may not start a task now.
    Without ``quota_checked``'s lock, two concurrent starts may both pass at the limit.
    ``queued``: the task starts once a running one ends (a queued message), so it adds no
    running task: only starts per hour and cost per day are checked."""
    quota = _quota(client, principal)
    if quota is not None:
        await _check(client, principal, quota, queued=queued)


def _quota(client: Client, principal: Principal | None) -> Quota | None:
    """The principal's limits, None when nothing limits them."""
    if principal is None:
        return None
    quota = quota_of(client.settings.quota_table(), principal.id, principal.role)
    return quota if quota.limited else None


async def _check(
    client: Client, principal: Principal, quota: Quota, *, queued: bool = False
) -> None:
    now = datetime.now(UTC)
    who = principal.id
    starts: list[TaskStart] = []
    if quota.starts_per_hour is not None or quota.running_tasks is not None:
        starts = await client._store_call("starts_since", who, now - HOUR)
    if (limit := quota.starts_per_hour) is not None and len(starts) >= limit:
        # Below the limit again once the oldest starts over it have left the hour.
        wait = (
            seconds_until_hour_frees(starts[len(starts) - limit].started_at, now)
            if limit > 0
            else int(HOUR.total_seconds())
        )
        raise QuotaExceeded(
            f"{who} started {_tasks(len(starts))} in the last hour, the most ERRANDS_QUOTAS "
            f"allows (starts_per_hour: {limit}); try again in {wait} s",
            quota="starts_per_hour",
            retry_after=wait,
        )
    if (limit := quota.running_tasks) is not None and not queued:
        running = await _running(client, who, starts, now)
        if len(running) >= limit:
            raise QuotaExceeded(
                f"{who} runs {_tasks(len(running))}, the most ERRANDS_QUOTAS allows at once "
                f"(running_tasks: {limit}); wait for one to end or cancel one; try again in "
                f"{RUNNING_RETRY_SECONDS} s",
                quota="running_tasks",
                retry_after=RUNNING_RETRY_SECONDS,
            )
    if (cap := quota.cost_per_day_usd) is not None:
        calls = await client._store_call("usage_since", who, day_start(now))
        spent = spent_usd(calls, price_table(client.settings.prices))
        if spent >= cap:
            wait = seconds_to_next_day(now)
            raise QuotaExceeded(
                f"{who}'s tasks have spent {usd(spent)} today (UTC), the {usd(cap)} a day "
                f"ERRANDS_QUOTAS allows (cost_per_day_usd); try again after 00:00 UTC, in "
                f"{wait} s",
                quota="cost_per_day_usd",
                retry_after=wait,
            )


async def _running(client: Client, who: str, starts: list[TaskStart], now: datetime) -> set[str]:
    """The ids of ``who``'s running tasks: Temporal's and the recent starts it may not show
    yet, less those whose log has ended (visibility lags both ways)."""
    query = (
        f"WorkflowType = '{TASK_WORKFLOW}' AND ExecutionStatus = 'Running' "
        f"AND {search.owner_filter(who)}"
    )
    running: set[str] = set()
    try:
        async for execution in client.temporal.list_workflows(query):
            running.add(execution.id)
    except RPCError as error:
        raise TemporalUnreachable(
            f"Temporal could not list the running tasks of {who} in namespace "
            f"{client.namespace} to check their quota: {error.message}"
        ) from None
    running.update(
        s.task_id
        for s in starts
        if s.started_at >= now - VISIBILITY_LAG and not ids.is_queued_start(s.task_id)
    )
    if not running:
        return running
    # Visibility also lags an end: a task whose log holds its last event has ended.
    ended: set[str] = await client._store_call("ended", sorted(running))
    return running - ended


def _tasks(n: int) -> str:
    return f"{n} task" if n == 1 else f"{n} tasks"
