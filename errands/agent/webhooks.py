"""``ERRANDS_WEBHOOKS``: the notification targets every task gets (SPEC §11), and which of them
a task of a given owner wants.

The setting is a JSON list of ``{"name", "url", "secret", "events", "for"}``: ``name`` (default
``webhook-N``, its 1-based place) is how a task refers to it (``config:NAME``); ``secret`` is a
Standard Webhooks ``whsec_…`` secret; ``events`` (default all four) picks among
``waiting_for_user``, ``replied``, ``failed`` and ``canceled``; ``for`` (default ``["*"]``)
names the owners whose tasks it hears of: principal ids, ``role:ROLE`` or ``*`` (every task,
those nobody owns included).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from errands.contracts.notifications import NOTIFY_EVENTS, NotifyEvent, NotifyTarget
from errands.contracts.principals import ROLES

EXAMPLE = (
    '[{"name": "ops", "url": "https://hooks.example.com/errands", "secret": "whsec_…", '
    '"events": ["waiting_for_user", "failed"], "for": ["role:admin"]}]'
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class Webhook(BaseModel):
    """One entry of ``ERRANDS_WEBHOOKS``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str
    url: str
    secret: SecretStr
    events: list[NotifyEvent] = Field(default_factory=lambda: list(NOTIFY_EVENTS))
    for_: list[str] = Field(default_factory=lambda: ["*"], alias="for")

    @property
    def ref(self) -> str:
        return f"config:{self.name}"

    def hears(self, owner: str | None, role: str | None) -> bool:
        """Whether a task owned by ``owner`` (with ``role``, when known) is notified here."""
        return any(
            key == "*"
            or (owner is not None and key == owner)
            or (role is not None and key == f"role:{role}")
            for key in self.for_
        )

    def target(self) -> NotifyTarget:
        return NotifyTarget(ref=self.ref, events=list(self.events))


def parse_webhooks(raw: str | None) -> dict[str, Webhook]:
    """``ERRANDS_WEBHOOKS`` by name, or ``ValueError`` saying what is wrong and what it takes."""
    if raw is None or not raw.strip():
        return {}
    try:
        data: Any = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ValueError(f"is not JSON ({error.msg}); expected e.g. {EXAMPLE}") from None
    if not isinstance(data, list):
        raise ValueError(f"must be a JSON list of webhooks, e.g. {EXAMPLE}")
    hooks: dict[str, Webhook] = {}
    for place, entry in enumerate(data, start=1):
        if not isinstance(entry, dict):
            raise ValueError(f"entry {place} must be an object with url and secret: {EXAMPLE}")
        hook = _webhook({"name": f"webhook-{place}", **entry}, place)
        if hook.name in hooks:
            raise ValueError(f"two webhooks are named {hook.name!r}: give each its own name")
        hooks[hook.name] = hook
    return hooks


def _webhook(entry: dict[str, Any], place: int) -> Webhook:
    try:
        hook = Webhook.model_validate(entry)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(
            f"entry {place}{'.' + where if where else ''}: {first['msg']}; each webhook takes "
            "url, secret, and optionally name, events and for"
        ) from None
    label = f"webhook {hook.name!r}"
    if not _NAME.match(hook.name):
        raise ValueError(f"{label}: a name is 1 to 64 letters, digits, '.', '-' or '_'")
    parts = urlsplit(hook.url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"{label}: url must be an https:// URL (http:// only to allowed hosts)")
    check_secret(hook.secret.get_secret_value(), label)
    for key in hook.for_:
        if key.startswith("role:") and key[5:] not in ROLES:
            raise ValueError(f"{label}: for {key!r}: the roles are {', '.join(ROLES)}")
    return hook


def check_secret(secret: str, label: str) -> None:
    """A Standard Webhooks secret: ``whsec_`` and base64 of 24 to 64 bytes. The message never
    quotes the secret."""
    body = secret.removeprefix("whsec_")
    try:
        key = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if not secret.startswith("whsec_") or not 24 <= len(key) <= 64:
        raise ValueError(
            f"{label}: secret must be whsec_ followed by base64 of 24 to 64 random bytes "
            "(python -c \"import base64,os; print('whsec_' + base64.b64encode(os.urandom(32))"
            '.decode())")'
        )


def targets_for(
    hooks: dict[str, Webhook], owner: str | None, role: str | None
) -> list[NotifyTarget]:
    """The configured targets a task of ``owner`` gets, in the setting's order."""
    return [hook.target() for hook in hooks.values() if hook.hears(owner, role)]
