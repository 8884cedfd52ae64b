"""Quotas (SPEC §10): what one principal may use, so one user cannot starve the others or run up
the bill. ``ERRANDS_QUOTAS`` is a JSON object whose keys are a principal id, ``role:ROLE`` or
``*``, each mapping to limits::

    {"*": {"running_tasks": 5, "starts_per_hour": 60, "cost_per_day_usd": 20},
     "role:admin": {"running_tasks": 50},
     "alice": {"cost_per_day_usd": 100}}

A principal's quota takes each limit from the most specific entry that sets it: their id, then
their role, then ``*``. A limit nobody sets is no limit. Pure rules, no I/O: the counting is the
client's (starts) and the round activity's (cost).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from errands.agent.pricing import cost_usd
from errands.contracts.events import StoredEvent
from errands.contracts.messages import ModelPrice, Usage, UsageLedger
from errands.contracts.principals import ROLES, principal_id

EXAMPLE = '{"*": {"running_tasks": 5, "starts_per_hour": 60, "cost_per_day_usd": 20}}'


class Quota(BaseModel):
    """Limits of one principal; None: no limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    running_tasks: int | None = Field(default=None, ge=0)
    """Tasks of theirs running at once."""
    starts_per_hour: int | None = Field(default=None, ge=0)
    """Tasks they may start in any 60 minutes."""
    cost_per_day_usd: float | None = Field(default=None, ge=0)
    """USD their tasks may spend per UTC day (from the usage each model call records)."""

    @property
    def limited(self) -> bool:
        return any(v is not None for v in self.model_dump().values())


def parse_quotas(raw: str | None) -> dict[str, Quota]:
    """``ERRANDS_QUOTAS`` by key, or ``ValueError`` saying what is wrong and what it takes."""
    if raw is None or not raw.strip():
        return {}
    try:
        data: Any = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ValueError(f"is not JSON ({error.msg}); expected e.g. {EXAMPLE}") from None
    if not isinstance(data, dict):
        raise ValueError(f"must be a JSON object of principal, role:ROLE or * to limits: {EXAMPLE}")
    quotas: dict[str, Quota] = {}
    for key, limits in data.items():
        if key.startswith("role:"):
            if key[5:] not in ROLES:
                raise ValueError(f"{key!r}: the roles are {', '.join(ROLES)}")
        elif key != "*":
            principal_id(key)
        try:
            quotas[key] = Quota.model_validate(limits)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ValueError(
                f"{key!r}{'.' + where if where else ''}: {first['msg']}; each entry takes "
                "running_tasks, starts_per_hour (whole numbers) and cost_per_day_usd (USD)"
            ) from None
    return quotas


def quota_of(quotas: dict[str, Quota], principal: str, role: str | None) -> Quota:
    """The limits that apply to ``principal`` (with ``role``, when known): each from the most
    specific entry that sets it."""
    merged: dict[str, Any] = {}
    for key in (principal, f"role:{role}" if role else None, "*"):
        if key is None or key not in quotas:
            continue
        for name, value in quotas[key].model_dump().items():
            if value is not None and merged.get(name) is None:
                merged[name] = value
    return Quota(**merged)


# -- counting: the arithmetic the client and the round activity share ---------------------------

HOUR = timedelta(hours=1)
RUNNING_RETRY_SECONDS = 30
"""What a start refused for ``running_tasks`` suggests waiting: tasks end at no known time, so
a short wait, after which the caller asks again."""


def day_start(now: datetime) -> datetime:
    """00:00 UTC of ``now``'s day: where a day's cost starts counting."""
    return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def seconds_to_next_day(now: datetime) -> int:
    """Whole seconds (at least 1) until the next 00:00 UTC, when a day's cost starts again."""
    return max(1, math.ceil((day_start(now) + timedelta(days=1) - now).total_seconds()))


def seconds_until_hour_frees(oldest: datetime, now: datetime) -> int:
    """Whole seconds (at least 1) until a start at ``oldest`` leaves the last hour."""
    return max(1, math.ceil((oldest + HOUR - now).total_seconds()))


def spent_usd(calls: Iterable[StoredEvent], prices: dict[str, ModelPrice]) -> float:
    """What the ``model_call_finished`` events ``calls`` cost at ``prices`` (USD); an event with
    no model or no usage costs nothing."""
    ledger = UsageLedger()
    for call in calls:
        model, usage = call.data.get("model"), call.data.get("usage")
        if isinstance(model, str) and isinstance(usage, dict):
            ledger.charge("rounds", model, Usage.model_validate(usage))
    return cost_usd(ledger, prices)


def usd(amount: float) -> str:
    """``amount`` as the messages show it: cents, with up to four decimals under a dollar."""
    if amount >= 1:
        return f"${amount:.2f}"
    whole, _, cents = f"{amount:.4f}".rstrip("0").partition(".")
    return f"${whole}.{cents.ljust(2, '0')}"


def over_cost(owner: str, spent: float, limit: float) -> str:
    """Why a task of ``owner`` stops at its round boundary, for the model and the user."""
    return (
        f"{owner}'s tasks have spent {usd(spent)} today (UTC), over the {usd(limit)} a day "
        "ERRANDS_QUOTAS allows them (cost_per_day_usd)"
    )


def role_decides(quotas: dict[str, Quota], principal: str, limit: str) -> bool:
    """Whether ``principal``'s ``limit`` can depend on their role: their own entry does not set
    it and some ``role:`` entry does. (A worker knows an owner's id, not always their role.)"""
    own = quotas.get(principal)
    if own is not None and getattr(own, limit) is not None:
        return False
    return any(k.startswith("role:") and getattr(q, limit) is not None for k, q in quotas.items())
