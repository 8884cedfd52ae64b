"""The daily cost quota at a round boundary (SPEC §10): whether a task's owner has spent their
``cost_per_day_usd`` today, by the worker's ``ERRANDS_QUOTAS`` and prices.

Asked by ``prepare_round`` each round; with no cost quota configured it answers at once, with
no query. The owner's role is the one the task started with (``TaskInput.owner_role``); for a
task that does not carry it, the role of their errands API key, when a ``role:`` entry could
decide their limit.
"""

from __future__ import annotations

from datetime import UTC, datetime

from errands.adapters.store import SessionStore
from errands.agent.pricing import price_table
from errands.agent.quotas import Quota, day_start, over_cost, quota_of, role_decides, spent_usd
from errands.contracts.messages import ModelPrice
from errands.settings import Settings


class CostQuotas:
    """The cost-per-day limits of a worker, and the prices it counts spending at."""

    def __init__(self, quotas: dict[str, Quota], prices: dict[str, ModelPrice]) -> None:
        self._quotas = quotas
        self._prices = prices
        self._any = any(q.cost_per_day_usd is not None for q in quotas.values())

    @classmethod
    def of(cls, settings: Settings | None) -> CostQuotas:
        """The limits ``settings`` configure (None: none)."""
        if settings is None:
            return cls({}, {})
        return cls(settings.quota_table(), price_table(settings.prices))

    def over(
        self,
        store: SessionStore,
        owner: str | None,
        role: str | None = None,
        now: datetime | None = None,
    ) -> str | None:
        """Why ``owner`` (with ``role`` when the task knows it) may not go on spending today, or
        None (also for no owner)."""
        if owner is None or not self._any:
            return None
        if role is None and role_decides(self._quotas, owner, "cost_per_day_usd"):
            role = self._role(store, owner)
        limit = quota_of(self._quotas, owner, role).cost_per_day_usd
        if limit is None:
            return None
        now = now or datetime.now(UTC)
        spent = spent_usd(store.usage_since(owner, day_start(now)), self._prices)
        return over_cost(owner, spent, limit) if spent >= limit else None

    @staticmethod
    def _role(store: SessionStore, owner: str) -> str | None:
        """The role of ``owner``'s newest live API key, None when they have none."""
        keys = [p for p in store.list_principals() if p.name == owner and p.revoked_at is None]
        return keys[-1].role if keys else None
