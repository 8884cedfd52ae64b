"""Bearer-token auth, and the rule that a gateway reachable beyond loopback must have a token."""

from __future__ import annotations

import ipaddress
import secrets

from fastapi import Request

from errands.errors import Unauthorized

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    """True only for addresses that cannot be reached from another machine."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        # A host name resolves to whatever DNS says: treat it as reachable from outside.
        return False


class BearerGuard:
    """A dependency that refuses a request without ``Authorization: Bearer <token>``.

    With no token configured every request passes (the gateway then binds only to loopback)."""

    def __init__(self, token: str | None) -> None:
        self._token = token or None

    @property
    def enabled(self) -> bool:
        return self._token is not None

    async def __call__(self, request: Request) -> None:
        if self._token is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise Unauthorized(
                "this gateway needs a token: send the header `Authorization: Bearer <token>` "
                "with the value of ERRANDS_API_TOKEN"
            )
        # Constant-time, so the token cannot be guessed byte by byte from response times.
        if not secrets.compare_digest(given.strip().encode(), self._token.encode()):
            raise Unauthorized(
                "the bearer token is wrong; send `Authorization: Bearer <token>` with the value "
                "of ERRANDS_API_TOKEN the gateway was started with",
                challenge='Bearer error="invalid_token"',
            )
