"""Who a request comes from (SPEC §10, DESIGN invariant 13): the one authenticator every
frontend uses (the HTTP gateway; the A2A and MCP servers) before it does anything, so each
request acts as a principal and the client layer checks what that principal may do.

What an ``Authorization`` header stands for, in this order::

    no auth configured at all             LOCAL: the single user of a loopback gateway, an admin
    Bearer <ERRANDS_API_TOKEN>            ADMIN_TOKEN (compared in constant time)
    Bearer ek_XXXXXXXX.SECRET             the API key's principal (read from the store each time)
    Bearer <a JWT>, OIDC configured       the verified token's subject and role
    anything else                         Unauthorized, saying what would be accepted

"Auth configured" means ERRANDS_API_TOKEN is set, OIDC is set, or the session store holds an API
key (revoked ones count: revoking every key never opens a gateway to anyone). Whether the store
holds one is read at most once every ``KEYS_CHECKED_EVERY`` seconds, so the first key added
while a gateway runs turns anonymous access off within that time; a key-shaped bearer is always
checked against the store, so a new key works, and a revoked one stops, at once. Once auth is
configured, a request without a bearer is refused: there is no anonymous access.

Nothing here logs or repeats a token; refusals name at most an API key's public id.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import Callable

from errands.adapters.identity.keys import looks_like_key, verify_key
from errands.adapters.identity.oidc import OidcVerifier, looks_like_jwt
from errands.adapters.store import SessionStore
from errands.contracts.principals import ADMIN_TOKEN, LOCAL, Principal
from errands.errors import ConfigError, Unauthorized
from errands.settings import Settings

KEYS_CHECKED_EVERY = 5.0
"""Seconds a reading of "the store holds an API key" is trusted before it is read again."""

INVALID_TOKEN = 'Bearer error="invalid_token"'
"""The ``WWW-Authenticate`` challenge for a bearer that was sent and refused."""

StoreSource = Callable[[], SessionStore | None]
"""Where the store comes from, on first use (None: there is none yet, so no API key either)."""


class Authenticator:
    """Turns a request's ``Authorization`` header into a ``Principal`` (see the module's table).

    ``store``: the session store the API keys are in, or a function that opens it on first use
    (a frontend built without touching the database); ``token``: ERRANDS_API_TOKEN;
    ``verifier``: OIDC, or None; ``issuer``: OIDC's issuer, named in refusals."""

    def __init__(
        self,
        store: SessionStore | StoreSource | None,
        *,
        token: str | None = None,
        verifier: OidcVerifier | None = None,
        issuer: str | None = None,
    ) -> None:
        self._source = store if callable(store) else None
        self._store = None if callable(store) else store
        self._token = token_digest(token) if token else None
        self._verifier = verifier
        self._issuer = issuer
        self._keys: bool | None = None
        self._keys_read_at = 0.0

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        store: SessionStore | StoreSource | None,
        *,
        token: str | None = None,
    ) -> Authenticator:
        """The authenticator ``settings`` configure: ``token`` (default: ERRANDS_API_TOKEN) and
        OIDC (ERRANDS_OIDC_*), with the API keys of ``store``."""
        if token is None and settings.api_token is not None:
            token = settings.api_token.get_secret_value()
        return cls(
            store,
            token=token,
            verifier=OidcVerifier.from_settings(settings),
            issuer=settings.oidc_issuer,
        )

    @property
    def has_token(self) -> bool:
        """Whether ERRANDS_API_TOKEN (or the token given) is accepted."""
        return self._token is not None

    @property
    def oidc(self) -> bool:
        """Whether OIDC bearer JWTs are accepted."""
        return self._verifier is not None

    async def configured(self) -> bool:
        """Whether requests must say who they are: a token, OIDC, or an API key in the store
        (read at most every ``KEYS_CHECKED_EVERY`` seconds)."""
        return self.has_token or self.oidc or await self.keys_exist()

    async def keys_exist(self) -> bool:
        """Whether the store holds an API key, revoked or not (cached briefly)."""
        now = time.monotonic()
        if self._keys is None or now - self._keys_read_at >= KEYS_CHECKED_EVERY:
            store = await asyncio.to_thread(self._open)
            found = bool(await asyncio.to_thread(store.list_principals)) if store else False
            self._keys, self._keys_read_at = found, time.monotonic()
        return self._keys

    async def authenticate(self, authorization: str | None, *, loopback_only: bool) -> Principal:
        """The principal behind ``authorization`` (the header's value, or None).
        ``loopback_only``: the frontend is reachable from this machine alone, so with no auth
        configured its one user is ``LOCAL``; reachable beyond it with none, every request is
        refused (``ConfigError``). ``Unauthorized`` (with the reason and the challenge to
        answer with) for a missing or refused bearer; ``Unavailable`` when the OIDC issuer's
        keys cannot be fetched."""
        bearer = _bearer(authorization)
        if bearer is not None:
            if self._token is not None and hmac.compare_digest(token_digest(bearer), self._token):
                return ADMIN_TOKEN
            if looks_like_key(bearer):
                return await self._key(bearer)
            if self._verifier is not None and looks_like_jwt(bearer):
                try:
                    return await self._verifier.verify(bearer)
                except Unauthorized as error:
                    raise Unauthorized(error.message, challenge=INVALID_TOKEN) from None
        if not await self.configured():
            if not loopback_only:
                raise ConfigError(
                    "this gateway is reachable beyond loopback but has no way to tell who "
                    "calls; add an API key (errands principals add), set ERRANDS_OIDC_ISSUER and "
                    "ERRANDS_OIDC_AUDIENCE, or set ERRANDS_API_TOKEN",
                    setting="ERRANDS_API_TOKEN",
                )
            return LOCAL
        if bearer is None:
            raise Unauthorized(
                "this gateway needs to know who you are: send the header "
                f"`Authorization: Bearer <token>` with {self._accepted()}"
            )
        raise Unauthorized(
            f"the bearer token is wrong or unknown; send {self._accepted()}",
            challenge=INVALID_TOKEN,
        )

    async def _key(self, bearer: str) -> Principal:
        store = await asyncio.to_thread(self._open)
        if store is None:
            raise Unauthorized(
                "unknown API key: this errands has no API keys yet; ask an admin for one "
                "(errands principals add)",
                challenge=INVALID_TOKEN,
            )
        try:
            return await asyncio.to_thread(verify_key, store, bearer)
        except Unauthorized as error:
            raise Unauthorized(error.message, challenge=INVALID_TOKEN) from None

    def _open(self) -> SessionStore | None:
        if self._store is None and self._source is not None:
            self._store = self._source()
        return self._store

    def _accepted(self) -> str:
        """What a bearer may be here, in words."""
        ways = ["an errands API key (errands principals add)"]
        if self._verifier is not None:
            ways.append(f"an OIDC token from {self._issuer}")
        if self._token is not None:
            ways.append("the value of ERRANDS_API_TOKEN")
        if len(ways) == 1:
            return ways[0]
        return ", ".join(ways[:-1]) + ", or " + ways[-1]


def _bearer(authorization: str | None) -> str | None:
    """The token of ``Bearer <token>``; None for no header, another scheme or a blank token."""
    scheme, _, given = (authorization or "").partition(" ")
    token = given.strip()
    return token if scheme.lower() == "bearer" and token else None


def token_digest(token: str) -> bytes:
    """Equal-length digests, compared in constant time: a response's timing says nothing about
    how much of the token, or of its length, a guess got right."""
    return hashlib.sha256(token.encode()).digest()
