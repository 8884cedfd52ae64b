"""Quotas at the start of a task (SPEC §10, ``errands.agent.quotas``): running tasks, starts per
hour and cost per day of the acting principal, counted from the session store and Temporal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from errands.contracts.principals import Principal

if TYPE_CHECKING:
    from errands.client._client import Client


async def check_start(client: Client, principal: Principal) -> None:
    """``QuotaExceeded`` (with ``retry_after``) when ``principal`` may not start a task now."""
    # Counting lands with the quota work; until then no quota is enforced at start.
    del client, principal
