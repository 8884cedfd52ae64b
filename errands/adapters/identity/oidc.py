"""OIDC bearer JWTs (SPEC §10): who a token signed by the configured issuer says acts.

``OidcVerifier.verify`` checks, in this order, and refuses with ``Unauthorized`` and a reason of
its own at the first that fails:

1. the token has a JWT's shape and a header whose ``alg`` is asymmetric (RS*, PS*, ES*,
   EdDSA). ``alg: none`` and HS* are refused before any key is looked at: an HS256 token
   "signed" with the issuer's public key as the secret must never reach a verifier;
2. the key: the one whose ``kid`` the header names, from the issuer's key set (its discovery
   document's ``jwks_uri``, or ``ERRANDS_OIDC_JWKS_URL``). Its ``kty`` (and curve, and ``alg``
   when it has one) must fit the token's ``alg``; symmetric (``oct``) keys are never used;
3. the signature, then ``aud`` (contains the audience), ``exp`` (required, not passed), ``nbf``
   and ``iat`` (not in the future), with 60 s leeway, and ``iss``: the configured issuer, one
   trailing ``/`` aside. ``https://login.example.com/`` and ``https://login.example.com`` are
   the same issuer, in the token's ``iss``, in ``ERRANDS_OIDC_ISSUER`` and in the discovery
   document's ``issuer`` alike (issuers differ on the slash; nothing else is forgiven);
4. the principal claim (``sub``, or ``ERRANDS_OIDC_PRINCIPAL_CLAIM``): present, a usable
   principal id, and none of the ids errands reserves (``admin``, ``local``, ``operator``: the
   admin token's, the loopback user's and the CLI's), which a token must not pass for; the role
   claim: ``user``, ``approver`` or ``admin``, or a list of them (the highest counts), absent
   means ``user``. A role errands does not know is refused rather than read as ``user``: a typo
   in the issuer's mapping should be seen at once, not grant a lesser role quietly, and a
   future role must not pass for an old one.

Keys come over ``https://`` only: the issuer, ``ERRANDS_OIDC_JWKS_URL`` and the discovery
document's ``jwks_uri`` may be ``http://`` only on loopback (127.0.0.0/8, ``::1``,
``localhost``), where nobody between errands and the issuer could swap the keys. A discovery
document naming a plain-http ``jwks_uri`` elsewhere is a ``ConfigError``, and it is not fetched;
a redirect to such a URL is refused (``Unavailable``) before it is followed. A discovery
document or key set over 1 MiB is refused (``Unavailable``); at most the first 100 signing keys
of a set are used, so a token that names no ``kid`` costs at most 100 signature checks.

The key set is fetched once and cached. A token naming a ``kid`` the cache lacks (the issuer
rotated its keys) fetches it again, at most once per ``refresh_interval`` (30 s), so a flood of
made-up key ids cannot make errands hammer the issuer; concurrent callers share one fetch. The
cache is also fetched again when older than ``max_age``; if that fetch fails, the keys held are
kept. An issuer that cannot be reached while no key is held is ``Unavailable`` (503), naming the
URL, never a token; that failure is the answer for ``refresh_interval`` (every JWT meanwhile gets
it without a fetch), so a flood of tokens cannot make errands hammer an issuer that is down.

No message or log line here carries the token or any part of it (not a claim value, not a key
id): the reason names the check, the configured issuer and the claim names.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

import aiohttp
import jwt

from errands.adapters.identity.keys import reserved_for
from errands.contracts.principals import ROLES, Principal, Role, principal_id
from errands.errors import ConfigError, Unauthorized, Unavailable

if TYPE_CHECKING:
    from errands.settings import Settings

logger = logging.getLogger("errands.identity")

KEY_TYPES: dict[str, tuple[str, str | None]] = {
    **{f"RS{bits}": ("RSA", None) for bits in (256, 384, 512)},
    **{f"PS{bits}": ("RSA", None) for bits in (256, 384, 512)},
    "ES256": ("EC", "P-256"),
    "ES384": ("EC", "P-384"),
    "ES512": ("EC", "P-521"),
    "EdDSA": ("OKP", None),
}
"""The algorithms a token may be signed with, each with the key type (and EC curve) it needs."""

EDDSA_CURVES = ("Ed25519", "Ed448")
LEEWAY_SECONDS = 60
FETCH_TIMEOUT_SECONDS = 5.0
MAX_TOKEN_CHARS = 16_384
"""Longer is no token an issuer hands out; refused before anything is decoded."""
MAX_DOCUMENT_BYTES = 1 << 20
"""The most of a discovery document or key set read (1 MiB); a larger one is refused."""
MAX_KEYS = 100
"""The most signing keys of a key set used (the first ones); issuers publish a handful."""
MAX_REDIRECTS = 3
REDIRECTS = frozenset({301, 302, 303, 307, 308})
LOOPBACK_NAMES = frozenset({"localhost"})


def secure_url(url: str) -> bool:
    """Whether keys may be fetched from ``url``: ``https://`` with a host, or ``http://`` to a
    loopback host (127.0.0.0/8, ``::1``, ``localhost``), which no other machine can answer."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return False
    if not host or any(c.isspace() for c in url):
        return False
    if parts.scheme == "https":
        return True
    if parts.scheme != "http":
        return False
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def same_issuer(named: str, issuer: str) -> bool:
    """Whether ``named`` is ``issuer``, one trailing ``/`` on either aside."""
    return named.removesuffix("/") == issuer.removesuffix("/")


def looks_like_jwt(token: str) -> bool:
    """Whether ``token`` has a JWT's shape: three base64url parts (the last may be empty, as an
    unsigned token's is, so that one is refused as a JWT with a reason) and a header that
    decodes to a JSON object naming an ``alg``. Says nothing about whether it is valid."""
    return _header(token) is not None


def _header(token: str) -> dict[str, Any] | None:
    parts = token.split(".")
    if len(token) > MAX_TOKEN_CHARS or len(parts) != 3 or not parts[0] or not parts[1]:
        return None
    alphabet = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    if not all(set(part) <= alphabet for part in parts):
        return None
    try:
        header = json.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
    except (binascii.Error, ValueError):
        return None
    if not isinstance(header, dict) or not isinstance(header.get("alg"), str):
        return None
    return header


SIGNED_BUT_REFUSED = (
    jwt.ExpiredSignatureError,
    jwt.ImmatureSignatureError,
    jwt.InvalidAudienceError,
    jwt.InvalidIssuedAtError,
    jwt.MissingRequiredClaimError,
)
"""PyJWT's refusals of a token whose signature verified."""


def _refused(reason: str, *, signed: bool = False) -> Unauthorized:
    """The refusal of a JWT for ``reason``, which the ``WWW-Authenticate`` challenge repeats.
    ``signed``: the issuer's signature verified (expired, another audience, …): its holder is
    no guesser."""
    description = reason.replace("\\", "/").replace('"', "'")
    return Unauthorized(
        f"bearer JWT refused: {reason}",
        challenge=f'Bearer error="invalid_token", error_description="{description}"',
        guess=not signed,
    )


@dataclass(frozen=True)
class _KeySet:
    keys: tuple[dict[str, Any], ...]
    fetched_at: float


class OidcVerifier:
    """Verifies bearer JWTs of one OIDC issuer and says which principal each stands for.

    One per process (the gateway's): it holds the issuer's key set, cached between requests."""

    def __init__(
        self,
        *,
        issuer: str,
        audience: str,
        jwks_url: str | None = None,
        principal_claim: str = "sub",
        role_claim: str = "errands_role",
        refresh_interval: float = 30.0,
        max_age: float = 3600.0,
    ) -> None:
        for url, setting in ((issuer, "ERRANDS_OIDC_ISSUER"), (jwks_url, "ERRANDS_OIDC_JWKS_URL")):
            if url is not None and not secure_url(url):
                raise ConfigError(
                    f"{setting} must be an https:// URL (http:// only on loopback), so nobody "
                    "between errands and the issuer can swap its keys",
                    setting=setting,
                )
        self.issuer = issuer
        self.audience = audience
        self.jwks_url = jwks_url
        self.principal_claim = principal_claim
        self.role_claim = role_claim
        self.refresh_interval = refresh_interval
        self.max_age = max_age
        self._keys: _KeySet | None = None
        self._discovered: str | None = None
        self._attempts = 0
        self._last_error: Unavailable | ConfigError | None = None
        self._failed_at: float | None = None
        self._last_refresh: float | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> OidcVerifier | None:
        """The verifier ``ERRANDS_OIDC_*`` configure, or ``None`` when OIDC is off."""
        if settings.oidc_issuer is None or settings.oidc_audience is None:
            return None
        return cls(
            issuer=settings.oidc_issuer,
            audience=settings.oidc_audience,
            jwks_url=settings.oidc_jwks_url,
            principal_claim=settings.oidc_principal_claim,
            role_claim=settings.oidc_role_claim,
        )

    async def verify(self, token: str) -> Principal:
        """The principal ``token`` stands for (``via="oidc"``). ``Unauthorized`` with the reason
        when it is refused; ``Unavailable`` when the issuer's keys cannot be fetched."""
        header = _header(token)
        if header is None:
            raise _refused("not a JWT (three base64url parts and a header naming an alg)")
        alg = header["alg"]
        if alg.lower() == "none":
            raise _refused("alg none: unsigned tokens are never accepted")
        if alg.upper().startswith("HS"):
            raise _refused("symmetric alg (HS*): only the issuer's asymmetric keys are accepted")
        if alg not in KEY_TYPES:
            raise _refused(f"alg not accepted: use one of {', '.join(KEY_TYPES)}")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise _refused("the header's kid is not a string")
        claims = self._decode(token, alg, await self._candidates(kid, alg))
        return Principal(id=self._principal_id(claims), role=self._role(claims), via="oidc")

    # -- keys ------------------------------------------------------------------------------

    async def _candidates(self, kid: str | None, alg: str) -> list[dict[str, Any]]:
        """The issuer's keys the token may be signed with: the one of its ``kid``, or, for a
        token naming none, every key that fits its ``alg``."""
        keys = await self._key_set(kid)
        if kid is None:
            found = [key for key in keys if _fits(key, alg)]
            if not found:
                raise _refused(f"no key of the issuer fits alg {alg} and the token names no kid")
            return found
        named = [key for key in keys if key.get("kid") == kid]
        if not named:
            raise _refused("unknown kid: no key of the issuer has the key id the token names")
        found = [key for key in named if _fits(key, alg)]
        if not found:
            raise _refused(f"the key the token names does not fit its alg {alg}")
        return found

    async def _key_set(self, kid: str | None) -> tuple[dict[str, Any], ...]:
        held = self._keys
        now = time.monotonic()
        if held is not None:
            if now - held.fetched_at > self.max_age:
                await self._fetch_shared(stale_ok=True)
            elif kid is not None and all(key.get("kid") != kid for key in held.keys):
                if self._last_refresh is None or now - self._last_refresh >= self.refresh_interval:
                    self._last_refresh = now
                    await self._fetch_shared(stale_ok=True)
            assert self._keys is not None
            return self._keys.keys
        failed, error = self._failed_at, self._last_error
        if failed is not None and error is not None and now - failed < self.refresh_interval:
            raise _again(error)  # the last failure answers until the interval ends
        await self._fetch_shared(stale_ok=False)
        assert self._keys is not None
        return self._keys.keys

    async def _fetch_shared(self, *, stale_ok: bool) -> None:
        """Fetch the key set, one fetch at a time: a caller that waited while another fetched
        takes that fetch's outcome rather than fetching again."""
        finished = self._attempts
        async with self._lock:
            if self._attempts == finished:
                try:
                    self._keys = _KeySet(await self._fetch(), time.monotonic())
                    self._last_error = None
                except (Unavailable, ConfigError) as error:
                    self._last_error = error
                    self._failed_at = time.monotonic()
                    if self._keys is not None:  # kept, and tried again in refresh_interval
                        retry_at = time.monotonic() - self.max_age + self.refresh_interval
                        self._keys = _KeySet(self._keys.keys, retry_at)
                finally:
                    self._attempts += 1  # counted when done: who waited meanwhile sees it
            if self._last_error is not None:
                if stale_ok and self._keys is not None:
                    logger.warning("%s; keeping the keys fetched before", self._last_error)
                    return
                raise _again(self._last_error)

    async def _fetch(self) -> tuple[dict[str, Any], ...]:
        timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_SECONDS)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            url = self.jwks_url or self._discovered
            if url is None:
                discovery = f"{self.issuer.removesuffix('/')}/.well-known/openid-configuration"
                document = await self._get_json(http, discovery, "discovery document")
                named = str(document.get("issuer", ""))[:200]
                if not same_issuer(named, self.issuer):
                    raise ConfigError(
                        f"the discovery document at {discovery} names the issuer {named!r}, not "
                        f"{self.issuer}: set ERRANDS_OIDC_ISSUER to the issuer as it names itself",
                        setting="ERRANDS_OIDC_ISSUER",
                    )
                url = document.get("jwks_uri")
                if not isinstance(url, str) or not url.startswith(("https://", "http://")):
                    raise Unavailable(
                        f"the discovery document at {discovery} has no jwks_uri: set "
                        "ERRANDS_OIDC_JWKS_URL to where the issuer's keys are"
                    )
                if not secure_url(url):
                    raise ConfigError(
                        f"OIDC issuer {self.issuer}: its discovery document names a jwks_uri that "
                        "is not https://, so its keys are not fetched; serve them over https, or "
                        "set ERRANDS_OIDC_JWKS_URL to an https:// URL of them",
                        setting="ERRANDS_OIDC_ISSUER",
                    )
                self._discovered = url
            keys = (await self._get_json(http, url, "key set")).get("keys")
        if not isinstance(keys, list):
            raise Unavailable(f"the key set at {url} has no keys list: check ERRANDS_OIDC_JWKS_URL")
        signing = [
            key
            for key in keys
            if isinstance(key, dict) and key.get("use", "sig") == "sig" and key.get("kty") != "oct"
        ]
        if len(signing) > MAX_KEYS:
            logger.warning(
                "the key set of OIDC issuer %s at %s has %d signing keys; using the first %d",
                self.issuer,
                url,
                len(signing),
                MAX_KEYS,
            )
        usable = tuple(signing[:MAX_KEYS])
        logger.info(
            "fetched %d signing keys of OIDC issuer %s from %s", len(usable), self.issuer, url
        )
        return usable

    async def _get_json(self, http: aiohttp.ClientSession, url: str, what: str) -> dict[str, Any]:
        try:
            read = await self._read(http, url, what)
            body = json.loads(read)
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            raise Unavailable(
                f"OIDC issuer {self.issuer}: its {what} at {url} could not be read "
                f"({type(error).__name__}); check that it is reachable and retry later"
            ) from None
        if not isinstance(body, dict):
            raise Unavailable(
                f"OIDC issuer {self.issuer}: its {what} at {url} is not a JSON object"
            )
        return body

    async def _read(self, http: aiohttp.ClientSession, url: str, what: str) -> bytes:
        """The body at ``url``, at most ``MAX_DOCUMENT_BYTES`` of it. Redirects are followed
        here, not by aiohttp, so one to a plain-http URL (not loopback) is refused before it
        is fetched: an https key set must not come from somewhere else over http."""
        target = url
        for _ in range(MAX_REDIRECTS + 1):
            async with http.get(
                target, headers={"Accept": "application/json"}, allow_redirects=False
            ) as response:
                if response.status in REDIRECTS:
                    target = urljoin(target, response.headers.get("Location", ""))
                    if not secure_url(target):
                        raise Unavailable(
                            f"OIDC issuer {self.issuer}: its {what} at {url} redirects to a URL "
                            "that is not https://, which is not fetched; serve it over https"
                        )
                    continue
                if response.status != 200:
                    raise Unavailable(
                        f"OIDC issuer {self.issuer}: its {what} at {url} answered HTTP "
                        f"{response.status}; check the issuer and retry later"
                    )
                if (response.content_length or 0) > MAX_DOCUMENT_BYTES:
                    raise _too_large(self.issuer, what, url)
                read = bytearray()
                async for chunk in response.content.iter_chunked(64 * 1024):
                    read += chunk
                    if len(read) > MAX_DOCUMENT_BYTES:
                        raise _too_large(self.issuer, what, url)
                return bytes(read)
        raise Unavailable(
            f"OIDC issuer {self.issuer}: its {what} at {url} redirects more than "
            f"{MAX_REDIRECTS} times; check the URL"
        )

    # -- claims ----------------------------------------------------------------------------

    def _decode(self, token: str, alg: str, keys: list[dict[str, Any]]) -> dict[str, Any]:
        failure = "bad signature: no key of the issuer verifies it"
        for jwk in keys:
            try:
                key = jwt.PyJWK(jwk, algorithm=alg).key
            except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
                failure = "the issuer's key for it cannot be read"
                continue
            try:
                claims: dict[str, Any] = jwt.decode(
                    token,
                    key=key,
                    algorithms=[alg],
                    audience=self.audience,
                    leeway=LEEWAY_SECONDS,
                    options={"require": ["exp", "iss", "aud"]},
                )  # iss is checked below: PyJWT would compare it to the byte, slash and all
            except jwt.InvalidSignatureError:
                continue
            except jwt.PyJWTError as error:
                # PyJWT checks the claims only once the signature has verified.
                signed = isinstance(error, SIGNED_BUT_REFUSED)
                raise _refused(_reason(error, self.issuer), signed=signed) from None
            named = claims["iss"]
            if not isinstance(named, str) or not same_issuer(named, self.issuer):
                raise _refused(_reason(jwt.InvalidIssuerError(), self.issuer), signed=True)
            return claims
        raise _refused(failure)

    def _principal_id(self, claims: dict[str, Any]) -> str:
        value = claims.get(self.principal_claim)
        if value is None:
            raise _refused(f"no {self.principal_claim} claim to name the principal", signed=True)
        try:
            if not isinstance(value, str):
                raise ValueError
            found = principal_id(value)
        except ValueError:
            raise _refused(
                f"the {self.principal_claim} claim cannot name a principal (1 to 200 printable "
                "characters, no blank, quote or backslash)",
                signed=True,
            ) from None
        if reserved_for(found) is not None:
            raise _refused(
                f"the {self.principal_claim} claim names a principal id errands reserves (admin, "
                "local and operator are the admin token's, the loopback user's and the CLI's)",
                signed=True,
            )
        return found

    def _role(self, claims: dict[str, Any]) -> Role:
        value = claims.get(self.role_claim)
        if value is None:
            return "user"
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(v in ROLES for v in values):
            raise _refused(
                f"the {self.role_claim} claim holds a role errands does not know: give "
                f"{', '.join(ROLES)} or a list of them",
                signed=True,
            )
        return max(values, key=ROLES.index, default="user")


def _again(error: Unavailable | ConfigError) -> Unavailable | ConfigError:
    """A fresh copy of a fetch's failure, to raise for one more caller: the one instance,
    raised in many coroutines, would gather their tracebacks and contexts."""
    if isinstance(error, ConfigError):
        return ConfigError(error.message, setting=error.setting)
    return Unavailable(error.message)


def _too_large(issuer: str, what: str, url: str) -> Unavailable:
    return Unavailable(
        f"OIDC issuer {issuer}: its {what} at {url} is larger than "
        f"{MAX_DOCUMENT_BYTES // (1 << 20)} MiB; check the URL"
    )


def _fits(jwk: dict[str, Any], alg: str) -> bool:
    """Whether ``jwk`` may verify a token signed with ``alg``: its type and curve are the
    algorithm's, and its own ``alg``, if it names one, is the same."""
    kty, curve = KEY_TYPES[alg]
    if jwk.get("kty") != kty or jwk.get("alg", alg) != alg:
        return False
    if alg == "EdDSA":
        return jwk.get("crv") in EDDSA_CURVES
    return curve is None or jwk.get("crv") == curve


def _reason(error: jwt.PyJWTError, issuer: str) -> str:
    """The reason a decoded token is refused, from PyJWT's error class (never its message, which
    may quote the token)."""
    if isinstance(error, jwt.ExpiredSignatureError):
        return "expired (exp has passed)"
    if isinstance(error, jwt.ImmatureSignatureError):
        which = "iat" if "(iat)" in str(error) else "nbf"
        return f"not valid yet ({which} is in the future)"
    if isinstance(error, jwt.MissingRequiredClaimError):
        return f"no {error.claim} claim, which is required"
    if isinstance(error, jwt.InvalidAudienceError):
        return "wrong audience (aud does not hold the audience errands expects)"
    if isinstance(error, jwt.InvalidIssuerError):
        return f"wrong issuer (iss is not {issuer})"
    if isinstance(error, jwt.InvalidIssuedAtError):
        return "the iat claim is not a number"
    return "malformed (its header, claims or signature cannot be decoded)"
