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

The issuer's keys come from ``errands.adapters.identity.jwks`` (https only, bounded, cached,
refreshed on an unknown ``kid`` at most every 30 s).

No message or log line here carries the token or any part of it (not a claim value, not a key
id): the reason names the check, the configured issuer and the claim names.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from typing import TYPE_CHECKING, Any

import jwt

from errands.adapters.identity.jwks import IssuerKeys, same_issuer
from errands.adapters.identity.keys import reserved_for
from errands.contracts.principals import ROLES, Principal, Role, principal_id
from errands.errors import Unauthorized

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
MAX_TOKEN_CHARS = 16_384
"""Longer is no token an issuer hands out; refused before anything is decoded."""


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
        self.issuer = issuer
        self.audience = audience
        self.principal_claim = principal_claim
        self.role_claim = role_claim
        self._keys = IssuerKeys(
            issuer, jwks_url, refresh_interval=refresh_interval, max_age=max_age
        )

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
        keys = await self._keys.keys(kid)
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
