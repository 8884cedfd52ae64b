"""Standard Webhooks signatures (https://www.standardwebhooks.com): a secret is ``whsec_``
followed by base64 of random bytes; the signature is ``v1,`` and base64 of HMAC-SHA256, keyed
with the decoded bytes, over ``{id}.{timestamp}.`` and the body exactly as sent."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
MIN_KEY_BYTES = 24
"""The specification's floor for a key (192 bits); shorter ones are refused."""


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` and 32 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def _key(secret: str) -> bytes:
    # Messages here never quote the secret: they reach logs and delivery records.
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(
            "the webhook secret is not 'whsec_' followed by base64; make one with "
            "errands.adapters.webhooks.new_secret()"
        ) from None
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(
            f"the webhook secret holds {len(key)} bytes, fewer than the {MIN_KEY_BYTES} Standard "
            "Webhooks asks for; make one with errands.adapters.webhooks.new_secret()"
        )
    return key


def _check_id(msg_id: str) -> None:
    if not msg_id or not all("!" <= c <= "~" for c in msg_id):
        raise ValueError(
            "a webhook id must be non-empty printable ASCII without spaces (it is sent as the "
            "webhook-id header)"
        )


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value for one delivery: ``v1,<base64 HMAC-SHA256>``."""
    _check_id(msg_id)
    signed = f"{msg_id}.{int(timestamp)}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def headers(secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The headers of one signed delivery. ``msg_id`` stays the same on every retry of one
    notification: it is the receiver's idempotency key."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(timestamp)),
        "webhook-signature": sign(secret, msg_id, timestamp, body),
        "content-type": "application/json",
    }
