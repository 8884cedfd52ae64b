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
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

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


NO_QUOTA = Quota()


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
