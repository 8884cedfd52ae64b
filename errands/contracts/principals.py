"""Who acts (SPEC §10): a principal, as every frontend resolves one before it does anything.

A principal is an errands API key (``errands principals add``), the subject of an OIDC bearer
JWT, the single admin token ``ERRANDS_API_TOKEN``, the one user of a gateway on loopback with no
token, or the operator at the CLI. Its ``id`` is what tasks and sessions are owned by (the
``ErrandsOwner`` search attribute, ``TaskInput.owner``) and what events name; it is never a
token, and nothing secret is in a principal: it may travel in workflow payloads and history.

The rules of who may do what are in ``errands.client._access``; this module holds only the
model, so workflows can read the principal an answer carries.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["user", "approver", "admin"]
"""``user``: their own sessions and tasks. ``approver``: as a user, and may also read any task
and answer its tool approvals where the tool's policy lets approvers answer. ``admin``:
everything, everyone's."""
ROLES: tuple[Role, ...] = ("user", "approver", "admin")

Via = Literal["key", "oidc", "token", "local", "operator", "app"]
"""How the principal was established: an errands API key, an OIDC JWT, ``ERRANDS_API_TOKEN``,
a gateway on loopback with no auth configured, the CLI (Temporal's namespace is the operator's
boundary), or an application that embeds ``errands.Client`` and says who acts."""

PRINCIPAL_ID_CHARS = 200
PRINCIPAL_ID_PATTERN = r"^[^\x00-\x20\x7f'\"\\]{1,200}$"
"""A principal id: printable, no blank, no quote or backslash (it is put in visibility queries
between single quotes), at most 200 characters."""

ADMIN_TOKEN_ID = "admin"
"""The principal ``ERRANDS_API_TOKEN`` stands for."""
LOCAL_ID = "local"
"""The one user of a gateway on loopback that has no auth configured."""
OPERATOR_ID = "operator"
"""Who acts at the CLI, which talks to Temporal directly."""


class Principal(BaseModel):
    """Someone acting: an id, a role, and how they were established. Holds nothing secret."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(pattern=PRINCIPAL_ID_PATTERN)
    role: Role = "user"
    via: Via = "app"

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def is_approver(self) -> bool:
        """May answer approvals that the tool's policy leaves to approvers."""
        return self.role in ("approver", "admin")

    def __str__(self) -> str:
        return f"{self.id} ({self.role})"


def principal_id(value: str) -> str:
    """``value`` if it can be a principal id, else ``ValueError`` saying what one may be."""
    if not re.fullmatch(PRINCIPAL_ID_PATTERN, value):
        raise ValueError(
            f"{value[:40]!r} cannot name a principal: use 1 to {PRINCIPAL_ID_CHARS} printable "
            "characters with no blank, quote or backslash (e.g. alice or alice@example.com)"
        )
    return value


ADMIN_TOKEN = Principal(id=ADMIN_TOKEN_ID, role="admin", via="token")
LOCAL = Principal(id=LOCAL_ID, role="admin", via="local")
OPERATOR = Principal(id=OPERATOR_ID, role="admin", via="operator")
