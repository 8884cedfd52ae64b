"""The settings of notifications (SPEC §11), a part of ``Settings``: where they go, which hosts
they may reach, how long a delivery keeps trying, and the address links in them point to."""

from __future__ import annotations

from pydantic import Field, HttpUrl, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from errands.adapters.webhooks._guard import WebhookPolicy
from errands.agent.webhooks import Webhook, parse_webhooks
from errands.settings._parse import Seconds


def check_webhooks(value: str | None) -> str | None:
    parse_webhooks(value)
    return value


def check_webhook_allow(value: str | None) -> str | None:
    WebhookPolicy.parse(value or "")
    return value


class WebhookSettings(BaseSettings):
    """The notification settings (mixed into ``Settings``, whose configuration wins)."""

    model_config = SettingsConfigDict(use_attribute_docstrings=True)

    webhooks: str | None = Field(default=None, alias="ERRANDS_WEBHOOKS")
    """Where every task's changes of state are notified, signed (Standard Webhooks): JSON.

    A list of ``{"name", "url", "secret", "events", "for"}``: ``secret`` a ``whsec_…`` secret;
    ``events`` among waiting_for_user, replied, failed, canceled (default all); ``for``
    principal ids, ``role:ROLE`` or ``*`` (default). docs/notifications.md has an example."""
    webhook_allow: str | None = Field(default=None, alias="ERRANDS_WEBHOOK_ALLOW")
    """Hosts, addresses or networks notifications may reach though private, or over http.

    Comma-separated, e.g. ``hooks.internal, 10.2.0.0/16``. Unset: https to public addresses
    only; a name that resolves to a loopback, private or link-local address is refused."""
    webhook_retry_seconds: Seconds = Field(default=24 * 3600.0, alias="ERRANDS_WEBHOOK_RETRY")
    """How long a notification keeps being retried (timeouts, 408, 429, 5xx) before it fails."""
    public_url: HttpUrl | None = Field(default=None, alias="ERRANDS_PUBLIC_URL")
    """The gateway's address as people reach it, for the links in notifications.

    E.g. ``https://errands.example.com``. Unset: notifications carry ids and commands only."""

    _webhooks = field_validator("webhooks")(check_webhooks)
    _webhook_allow = field_validator("webhook_allow")(check_webhook_allow)

    def webhook_table(self) -> dict[str, Webhook]:
        """``ERRANDS_WEBHOOKS`` by name."""
        return parse_webhooks(self.webhooks)

    def webhook_policy(self) -> WebhookPolicy:
        """What a notification may reach (``ERRANDS_WEBHOOK_ALLOW``)."""
        return WebhookPolicy.parse(self.webhook_allow or "")
