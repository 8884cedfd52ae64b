"""Who calls the gateway: ``PrincipalGuard`` resolves every API request's principal (through
``errands.client.Authenticator``) and slows token guessing (``Throttle``); ``BearerGuard`` is
the codec server's single-token check."""

from __future__ import annotations

import hmac
import ipaddress
import math
import time

from fastapi import HTTPException, Request

from errands.client import Authenticator
from errands.client._identify import token_digest
from errands.contracts.principals import Principal
from errands.errors import ConfigError, Unauthorized, Unavailable

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


class Throttle:
    """Slows token guessing: after ``FREE_FAILURES`` wrong tokens from one client within
    ``WINDOW`` seconds, that client is refused (429, ``Retry-After``) for ``FIRST_WAIT``
    seconds, and for twice as long after each further wrong token (at most ``LONGEST_WAIT``),
    whatever it sends meanwhile, the right token included: were a right token let through, a
    refusal would say "wrong" and guessing would go on at full speed. Only a quiet ``WINDOW``
    after the last wrong token or wait clears its record: a right token does not (a holder of
    one valid key could otherwise mix it among guesses).

    A client is the address it connects from, or, from a proxy ERRANDS_FORWARDED_ALLOW_IPS
    names, the address its ``X-Forwarded-For`` gives (uvicorn sets ``request.client`` so): else
    every client behind a proxy shares the proxy's address, and its wait."""

    FREE_FAILURES = 5
    WINDOW = 60.0
    FIRST_WAIT = 5.0
    LONGEST_WAIT = 900.0
    KEPT = 4096
    """Most clients remembered; the stalest are forgotten first."""

    def __init__(self) -> None:
        # client → (failures, last failure, refused until), on the monotonic clock
        self._clients: dict[str, tuple[int, float, float]] = {}

    def wait(self, client: str) -> float:
        """Seconds ``client`` must still wait before a token of theirs is looked at (0: none)."""
        _, _, until = self._clients.get(client, (0, 0.0, 0.0))
        return max(0.0, until - time.monotonic())

    def failed(self, client: str) -> None:
        now = time.monotonic()
        failures, last, until = self._clients.pop(client, (0, 0.0, 0.0))
        if now - max(last, until) > self.WINDOW:
            failures = 0  # a quiet minute (after any wait) forgives
        failures += 1
        if failures >= self.FREE_FAILURES:
            wait = self.FIRST_WAIT * 2 ** (failures - self.FREE_FAILURES)
            until = now + min(wait, self.LONGEST_WAIT)
        self._clients[client] = (failures, now, until)  # last in order: the freshest
        while len(self._clients) > self.KEPT:
            del self._clients[next(iter(self._clients))]


def _client_of(request: Request) -> str:
    return request.client.host if request.client else "?"


def _too_many(client: str, wait: float, what: str) -> HTTPException:
    seconds = math.ceil(wait)
    return HTTPException(
        429,
        f"too many wrong tokens from {client}; wait {seconds} s (Retry-After) and send {what}",
        headers={"Retry-After": str(seconds)},
    )


class PrincipalGuard:
    """A dependency that resolves the principal of every API request (``Authenticator``) and
    slows a client that keeps sending refused bearers (``Throttle``; a request with no bearer
    counts for nothing). ``loopback_only``: the gateway is reachable from this machine alone,
    so with no auth configured its one user is ``LOCAL``."""

    def __init__(self, authenticator: Authenticator, *, loopback_only: bool = True) -> None:
        self.authenticator = authenticator
        self._loopback_only = loopback_only
        self._throttle = Throttle()

    async def __call__(self, request: Request) -> Principal:
        client = _client_of(request)
        wait = self._throttle.wait(client)
        if wait > 0:
            raise _too_many(client, wait, "a valid token")
        header = request.headers.get("authorization")
        try:
            principal = await self.authenticator.authenticate(
                header, loopback_only=self._loopback_only
            )
        except Unauthorized as refused:
            if header and refused.guess:  # a revoked key or an expired token is no guess
                self._throttle.failed(client)
            raise
        return principal

    async def still(self, request: Request, principal: Principal) -> str | None:
        """Why ``request`` no longer acts as ``principal`` (its key revoked, its JWT expired),
        or None while it does: what a long-lived request (an event stream) asks again as it
        goes."""
        header = request.headers.get("authorization")
        try:
            again = await self.authenticator.authenticate(header, loopback_only=self._loopback_only)
        except Unauthorized as refused:
            return refused.message
        except Unavailable:
            return None  # the store or the issuer did not answer now: asked again next time
        except ConfigError as error:
            return error.message
        if again != principal:
            return "the credential now stands for someone else; sign in again"
        return None


class BearerGuard:
    """A dependency that refuses a request without ``Authorization: Bearer <token>``, and
    slows a client that keeps sending wrong ones (``Throttle``).

    With no token configured every request passes (what it guards then binds only to
    loopback). ``guarding`` names what it guards in its refusals: the gateway, the codec server.
    """

    def __init__(self, token: str | None, *, guarding: str = "gateway") -> None:
        self._token = token or None
        self._guarding = guarding
        self._throttle = Throttle()

    @property
    def enabled(self) -> bool:
        return self._token is not None

    async def __call__(self, request: Request) -> None:
        if self._token is None:
            return
        client = _client_of(request)
        wait = self._throttle.wait(client)
        if wait > 0:
            what = f"the value of ERRANDS_API_TOKEN the {self._guarding} was started with"
            raise _too_many(client, wait, what)
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise Unauthorized(
                f"this {self._guarding} needs a token: send the header "
                "`Authorization: Bearer <token>` with the value of ERRANDS_API_TOKEN"
            )
        # Digests of equal length, compared in constant time: a response's timing says nothing
        # about how much of the token, or of its length, a guess got right.
        if not hmac.compare_digest(token_digest(given.strip()), token_digest(self._token)):
            self._throttle.failed(client)
            raise Unauthorized(
                "the bearer token is wrong; send `Authorization: Bearer <token>` with the value "
                f"of ERRANDS_API_TOKEN the {self._guarding} was started with",
                challenge='Bearer error="invalid_token"',
            )
