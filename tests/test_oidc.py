"""OIDC bearer JWTs (SPEC §10): a real key set served on loopback by the test, real RSA and EC
keys, tokens signed by PyJWT. Every refusal is ``Unauthorized`` with a reason of its own and no
piece of the token in its message or challenge."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from errands.adapters.identity.oidc import OidcVerifier, looks_like_jwt
from errands.contracts.principals import Principal
from errands.errors import ConfigError, Unauthorized, Unavailable
from errands.settings import Settings

pytestmark = pytest.mark.fast

AUDIENCE = "errands-gateway"


@dataclass
class SigningKey:
    kid: str
    private: Any
    alg: str

    def jwk(self) -> dict[str, Any]:
        algorithm = RSAAlgorithm if self.alg.startswith(("RS", "PS")) else ECAlgorithm
        public = json.loads(algorithm.to_jwk(self.private.public_key()))
        return {**public, "kid": self.kid, "use": "sig", "alg": self.alg}

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


def rsa_key(alg: str = "RS256") -> SigningKey:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return SigningKey(f"rsa-{uuid.uuid4().hex[:8]}", private, alg)


def ec_key() -> SigningKey:
    return SigningKey(
        f"ec-{uuid.uuid4().hex[:8]}", ec.generate_private_key(ec.SECP256R1()), "ES256"
    )


@dataclass
class Issuer:
    """An OIDC issuer on loopback: a discovery document and a key set, counting the fetches."""

    url: str = ""
    keys: list[SigningKey] = field(default_factory=list)
    hits: dict[str, int] = field(default_factory=lambda: {"discovery": 0, "jwks": 0})
    down: bool = False
    names_itself: str | None = None

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/keys"

    def verifier(self, *, discovery: bool = True, **options: Any) -> OidcVerifier:
        jwks_url = None if discovery else self.jwks_url
        return OidcVerifier(issuer=self.url, audience=AUDIENCE, jwks_url=jwks_url, **options)

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {"iss": self.url, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 600}
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not None}

    def token(self, key: SigningKey | None = None, *, kid: str | None = None, **claims: Any) -> str:
        key = key or self.keys[0]
        headers = {"kid": kid or key.kid}
        return jwt.encode(self.claims(**claims), key.private, algorithm=key.alg, headers=headers)

    async def discovery(self, _: web.Request) -> web.Response:
        self.hits["discovery"] += 1
        issuer = self.names_itself or self.url
        return web.json_response({"issuer": issuer, "jwks_uri": self.jwks_url})

    async def jwks(self, _: web.Request) -> web.Response:
        self.hits["jwks"] += 1
        if self.down:
            return web.json_response({"error": "maintenance"}, status=503)
        return web.json_response({"keys": [key.jwk() for key in self.keys]})


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    issuer = Issuer(keys=[rsa_key(), ec_key()])
    app = web.Application()
    app.router.add_get("/.well-known/openid-configuration", issuer.discovery)
    app.router.add_get("/keys", issuer.jwks)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    issuer.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    yield issuer
    await runner.cleanup()


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(claims: dict[str, Any], kid: str) -> str:
    header = b64(json.dumps({"alg": "none", "typ": "JWT", "kid": kid}).encode())
    return f"{header}.{b64(json.dumps(claims).encode())}."


def hs256(claims: dict[str, Any], secret: bytes, kid: str) -> str:
    """The old trick: HS256 with the issuer's public key (which anyone can fetch) as secret."""
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    body = f"{header}.{b64(json.dumps(claims).encode())}"
    signature = hmac.new(secret, body.encode(), hashlib.sha256).digest()
    return f"{body}.{b64(signature)}"


async def refused(verifier: OidcVerifier, token: str) -> Unauthorized:
    """The refusal of ``token``; fails if it is accepted or if the message or the challenge
    quotes any part of it."""
    with pytest.raises(Unauthorized) as caught:
        await verifier.verify(token)
    error = caught.value
    for text in (str(error), error.challenge):
        assert all(part not in text for part in token.split(".") if part), text
    assert error.challenge.startswith('Bearer error="invalid_token", error_description="')
    return error


# -- accepted --------------------------------------------------------------------------------


async def test_a_token_signed_by_the_issuer_is_accepted_through_its_discovery_document(
    issuer: Issuer,
) -> None:
    principal = await issuer.verifier().verify(issuer.token())

    assert principal == Principal(id="alice", role="user", via="oidc")
    assert issuer.hits == {"discovery": 1, "jwks": 1}


async def test_a_token_is_accepted_with_keys_from_an_explicit_jwks_url(issuer: Issuer) -> None:
    verifier = issuer.verifier(discovery=False)

    assert (await verifier.verify(issuer.token(issuer.keys[1]))).id == "alice"  # ES256
    assert (await verifier.verify(issuer.token(issuer.keys[0], sub="bob"))).id == "bob"  # RS256
    assert issuer.hits == {"discovery": 0, "jwks": 1}


async def test_the_principal_comes_from_a_configured_claim(issuer: Issuer) -> None:
    verifier = issuer.verifier(principal_claim="email")

    principal = await verifier.verify(issuer.token(email="alice@example.com"))

    assert principal.id == "alice@example.com"


@pytest.mark.parametrize(
    ("role", "expected"),
    [(None, "user"), ("approver", "approver"), (["user", "admin"], "admin"), ([], "user")],
)
async def test_the_role_comes_from_the_role_claim_and_the_highest_of_a_list_counts(
    issuer: Issuer, role: Any, expected: str
) -> None:
    principal = await issuer.verifier().verify(issuer.token(errands_role=role))

    assert principal.role == expected


async def test_a_role_errands_does_not_know_is_refused_not_downgraded(issuer: Issuer) -> None:
    error = await refused(issuer.verifier(), issuer.token(errands_role=["user", "superuser"]))

    assert "errands_role claim holds a role errands does not know" in str(error)


async def test_settings_build_the_verifier_and_none_without_an_issuer(issuer: Issuer) -> None:
    settings = Settings(
        ERRANDS_OIDC_ISSUER=issuer.url,
        ERRANDS_OIDC_AUDIENCE=AUDIENCE,
        ERRANDS_OIDC_PRINCIPAL_CLAIM="email",
        ERRANDS_OIDC_ROLE_CLAIM="groups",
    )
    verifier = OidcVerifier.from_settings(settings)

    assert verifier is not None
    principal = await verifier.verify(issuer.token(email="carol@example.com", groups="admin"))
    assert principal == Principal(id="carol@example.com", role="admin", via="oidc")
    assert OidcVerifier.from_settings(Settings()) is None


# -- refused ---------------------------------------------------------------------------------

Case = Callable[[Issuer], str]
CASES: dict[str, tuple[Case, str]] = {
    "expired": (lambda i: i.token(exp=int(time.time()) - 600), "expired (exp has passed)"),
    "wrong audience": (lambda i: i.token(aud="another-api"), "wrong audience"),
    "wrong issuer": (lambda i: i.token(iss="https://login.example.com"), "wrong issuer"),
    "unknown kid": (lambda i: i.token(kid="no-such-key"), "unknown kid"),
    "alg none": (lambda i: unsigned(i.claims(), i.keys[0].kid), "alg none"),
    "HS256 with the public key": (
        lambda i: hs256(i.claims(), i.keys[0].public_pem(), i.keys[0].kid),
        "symmetric alg (HS*)",
    ),
    "bad signature": (
        lambda i: i.token(SigningKey(i.keys[0].kid, rsa_key().private, "RS256")),
        "bad signature",
    ),
    "missing exp": (lambda i: i.token(exp=None), "no exp claim"),
    "future nbf": (lambda i: i.token(nbf=int(time.time()) + 600), "nbf is in the future"),
    "future iat": (lambda i: i.token(iat=int(time.time()) + 600), "iat is in the future"),
    "missing principal claim": (lambda i: i.token(sub=None), "no sub claim"),
    "unusable principal id": (lambda i: i.token(sub="alice smith"), "sub claim cannot name"),
    "key of another type": (
        lambda i: i.token(SigningKey(i.keys[1].kid, i.keys[0].private, "RS256")),
        "does not fit its alg RS256",
    ),
    "not a JWT": (lambda i: "ek_0123abcd.not-a-jwt-at-all", "not a JWT"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_bad_token_is_refused_with_its_reason(issuer: Issuer, case: str) -> None:
    build, reason = CASES[case]

    error = await refused(issuer.verifier(), build(issuer))

    assert reason in str(error)
    assert reason.split(" (")[0] in error.challenge


async def test_every_refusal_gives_a_reason_of_its_own(issuer: Issuer) -> None:
    verifier = issuer.verifier()
    messages = [str(await refused(verifier, build(issuer))) for build, _ in CASES.values()]

    assert len(set(messages)) == len(CASES)


async def test_a_token_within_the_leeway_is_accepted(issuer: Issuer) -> None:
    now = int(time.time())

    principal = await issuer.verifier().verify(issuer.token(exp=now - 20, nbf=now + 20))

    assert principal.id == "alice"


# -- keys: rotation, rate limit, shared fetches, an issuer that is down ----------------------


async def test_a_rotated_key_is_fetched_without_a_new_verifier(issuer: Issuer) -> None:
    verifier = issuer.verifier()
    old = issuer.keys[0]
    assert (await verifier.verify(issuer.token(old))).id == "alice"

    new = rsa_key()
    issuer.keys = [new]
    principal = await verifier.verify(issuer.token(new, sub="bob"))

    assert principal.id == "bob"
    assert issuer.hits["jwks"] == 2
    error = await refused(verifier, issuer.token(old))  # the old key left the set
    assert "unknown kid" in str(error)


async def test_unknown_kids_refresh_the_keys_at_most_once_per_interval(issuer: Issuer) -> None:
    verifier = issuer.verifier()
    await verifier.verify(issuer.token())
    assert issuer.hits["jwks"] == 1

    for _ in range(20):
        kid = uuid.uuid4().hex
        error = await refused(verifier, issuer.token(kid=kid))
        assert "unknown kid" in str(error)
        assert kid not in str(error)

    assert issuer.hits["jwks"] == 2  # one refresh found nothing; the other 19 fetched nothing


async def test_concurrent_first_requests_share_one_fetch(issuer: Issuer) -> None:
    verifier = issuer.verifier()

    principals = await asyncio.gather(
        *(verifier.verify(issuer.token(sub=f"user-{n}")) for n in range(20))
    )

    assert {p.id for p in principals} == {f"user-{n}" for n in range(20)}
    assert issuer.hits == {"discovery": 1, "jwks": 1}


async def test_an_issuer_that_is_down_is_unavailable_and_named(issuer: Issuer) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{probe.getsockname()[1]}"
    verifier = OidcVerifier(issuer=down, audience=AUDIENCE)
    token = issuer.token(iss=down)

    with pytest.raises(Unavailable) as caught:
        await verifier.verify(token)

    message = str(caught.value)
    assert f"{down}/.well-known/openid-configuration" in message
    assert all(part not in message for part in token.split("."))


async def test_keys_past_their_age_are_kept_while_the_issuer_is_down(issuer: Issuer) -> None:
    verifier = issuer.verifier(max_age=0)
    await verifier.verify(issuer.token())
    issuer.down = True

    for _ in range(5):
        assert (await verifier.verify(issuer.token())).id == "alice"

    assert issuer.hits["jwks"] == 2  # one failed refetch, then none until refresh_interval


async def test_a_discovery_document_naming_another_issuer_is_a_config_error(
    issuer: Issuer,
) -> None:
    issuer.names_itself = "https://login.example.com"

    with pytest.raises(ConfigError) as caught:
        await issuer.verifier().verify(issuer.token())

    assert caught.value.setting == "ERRANDS_OIDC_ISSUER"
    assert "names the issuer 'https://login.example.com'" in str(caught.value)


# -- the shape -------------------------------------------------------------------------------


async def test_looks_like_jwt_tells_a_jwt_from_an_api_key(issuer: Issuer) -> None:
    assert looks_like_jwt(issuer.token())
    assert looks_like_jwt(unsigned(issuer.claims(), "k"))
    assert not looks_like_jwt("ek_0123abcd.c2VjcmV0LXNlY3JldC1zZWNyZXQ")
    assert not looks_like_jwt("a.b.c")  # no header that decodes
    assert not looks_like_jwt(f"{b64(b'{}')}.{b64(b'{}')}.")  # a header with no alg
