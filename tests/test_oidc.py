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
from urllib.parse import quote

import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from errands.adapters.identity.jwks import MAX_DOCUMENT_BYTES, MAX_KEYS
from errands.adapters.identity.oidc import OidcVerifier, looks_like_jwt
from errands.contracts.principals import ADMIN_TOKEN_ID, LOCAL_ID, OPERATOR_ID, Principal
from errands.errors import ConfigError, Unauthorized, Unavailable
from errands.settings import Settings, load_settings

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
    jwks_uri: str | None = None
    """What the discovery document gives as jwks_uri (default: this issuer's key set)."""
    padding: dict[str, int] = field(default_factory=dict)
    """Bytes of filler added to the discovery document or the key set, by route."""
    chunked: bool = False
    """Stream the answers without a Content-Length."""
    decoys: list[dict[str, Any]] = field(default_factory=list)
    """Public keys of nobody's, served before the issuer's own."""

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

    async def discovery(self, request: web.Request) -> web.StreamResponse:
        self.hits["discovery"] += 1
        issuer = self.names_itself or self.url
        document = {"issuer": issuer, "jwks_uri": self.jwks_uri or self.jwks_url}
        return await self.answer(request, "discovery", document)

    async def jwks(self, request: web.Request) -> web.StreamResponse:
        self.hits["jwks"] += 1
        if self.down:
            return web.json_response({"error": "maintenance"}, status=503)
        keys = self.decoys + [key.jwk() for key in self.keys]
        return await self.answer(request, "jwks", {"keys": keys})

    async def moved(self, request: web.Request) -> web.Response:
        """A redirect to ``?to=``, as a key set that moved elsewhere answers."""
        self.hits["moved"] = self.hits.get("moved", 0) + 1
        raise web.HTTPFound(request.query["to"])

    async def answer(
        self, request: web.Request, route: str, document: dict[str, Any]
    ) -> web.StreamResponse:
        if route in self.padding:
            document = {**document, "filler": "x" * self.padding[route]}
        body = json.dumps(document).encode()
        if not self.chunked:
            return web.Response(body=body, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(body), 65_536):
            await response.write(body[start : start + 65_536])
        await response.write_eof()
        return response


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    issuer = Issuer(keys=[rsa_key(), ec_key()])
    app = web.Application()
    app.router.add_get("/.well-known/openid-configuration", issuer.discovery)
    app.router.add_get("/keys", issuer.jwks)
    app.router.add_get("/moved", issuer.moved)
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
    "reserved principal id": (lambda i: i.token(sub="operator"), "id errands reserves"),
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


# -- hardening: https only, reserved ids, an issuer down, the issuer's slash, bounds ------------

NOWHERE = "http://login.example.com"
"""Plain http to a host that is not loopback: keys from there could be anyone's."""


def refused_setting(monkeypatch: pytest.MonkeyPatch, **env: str) -> ConfigError:
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    return caught.value


@pytest.mark.parametrize(
    "url", [NOWHERE, "http://10.0.0.7:8080", "http://localhost.example.com", "ftp://127.0.0.1"]
)
@pytest.mark.parametrize("variable", ["ERRANDS_OIDC_ISSUER", "ERRANDS_OIDC_JWKS_URL"])
def test_an_oidc_url_is_https_unless_on_loopback(
    monkeypatch: pytest.MonkeyPatch, variable: str, url: str
) -> None:
    env = {"ERRANDS_OIDC_ISSUER": "https://login.example.com", "ERRANDS_OIDC_AUDIENCE": AUDIENCE}
    error = refused_setting(monkeypatch, **{**env, variable: url})

    assert error.setting == variable
    assert str(error).startswith(f"{variable}={url} ")
    assert "give an https:// URL" in str(error)
    assert "\n" not in str(error)
    urls = {"issuer": "https://login.example.com", "jwks_url": None}
    urls["issuer" if variable == "ERRANDS_OIDC_ISSUER" else "jwks_url"] = url
    with pytest.raises(ConfigError) as caught:  # an application's own verifier too
        OidcVerifier(issuer=str(urls["issuer"]), audience=AUDIENCE, jwks_url=urls["jwks_url"])
    assert caught.value.setting == variable


@pytest.mark.parametrize(
    "url",
    [
        "https://login.example.com",
        "https://login.example.com/realms/team/",
        "http://127.0.0.1:8080",
        "http://127.8.9.10",
        "http://[::1]:8080/keys",
        "http://localhost:8080",
    ],
)
def test_https_or_loopback_is_accepted(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("ERRANDS_OIDC_ISSUER", url)
    monkeypatch.setenv("ERRANDS_OIDC_JWKS_URL", url)
    monkeypatch.setenv("ERRANDS_OIDC_AUDIENCE", AUDIENCE)

    settings = load_settings()

    assert (settings.oidc_issuer, settings.oidc_jwks_url) == (url, url)


async def test_a_discovery_document_naming_plain_http_keys_is_a_config_error_never_fetched(
    issuer: Issuer,
) -> None:
    issuer.jwks_uri = f"{NOWHERE}/keys"
    verifier = issuer.verifier()

    for _ in range(3):
        with pytest.raises(ConfigError) as caught:
            await verifier.verify(issuer.token())
        assert caught.value.setting == "ERRANDS_OIDC_ISSUER"
        assert f"OIDC issuer {issuer.url}:" in str(caught.value)
        assert "jwks_uri that is not https://" in str(caught.value)

    assert issuer.hits == {"discovery": 1, "jwks": 0}  # and asked once in the interval


@pytest.mark.parametrize("reserved", [ADMIN_TOKEN_ID, LOCAL_ID, OPERATOR_ID])
@pytest.mark.parametrize("claim", ["sub", "email"])
async def test_a_token_naming_a_reserved_principal_is_refused(
    issuer: Issuer, reserved: str, claim: str
) -> None:
    verifier = issuer.verifier(principal_claim=claim)

    named: dict[str, Any] = {claim: reserved, "errands_role": "admin"}
    error = await refused(verifier, issuer.token(**named))

    assert f"the {claim} claim names a principal id errands reserves" in str(error)
    named = {claim: f"{reserved}-of-team-a"}
    near = await verifier.verify(issuer.token(**named))
    assert near.id == f"{reserved}-of-team-a"


async def test_an_issuer_down_at_the_first_fetch_is_asked_once_per_interval(
    issuer: Issuer,
) -> None:
    issuer.down = True
    verifier = issuer.verifier(discovery=False)

    failures = await asyncio.gather(
        *(verifier.verify(issuer.token(sub=f"user-{n}")) for n in range(10)),
        return_exceptions=True,
    )
    for _ in range(10):
        with pytest.raises(Unavailable) as caught:
            await verifier.verify(issuer.token())
        failures.append(caught.value)

    assert all(isinstance(f, Unavailable) for f in failures), failures
    assert all(issuer.jwks_url in str(f) for f in failures)
    assert issuer.hits["jwks"] == 1  # one fetch; the failure answered the other 19
    issuer.down = False
    with pytest.raises(Unavailable):  # still inside the interval: not asked again
        await verifier.verify(issuer.token())
    assert issuer.hits["jwks"] == 1


async def test_an_issuer_down_at_the_first_fetch_is_asked_again_after_the_interval(
    issuer: Issuer,
) -> None:
    issuer.down = True
    verifier = issuer.verifier(discovery=False, refresh_interval=0)
    with pytest.raises(Unavailable):
        await verifier.verify(issuer.token())

    issuer.down = False

    assert (await verifier.verify(issuer.token())).id == "alice"
    assert issuer.hits["jwks"] == 2


@pytest.mark.parametrize("configured_slash", ["", "/"], ids=["configured-bare", "configured-slash"])
@pytest.mark.parametrize("token_slash", ["", "/"], ids=["iss-bare", "iss-slash"])
@pytest.mark.parametrize("discovery_slash", ["", "/"], ids=["named-bare", "named-slash"])
async def test_one_trailing_slash_of_the_issuer_is_the_same_issuer_everywhere(
    issuer: Issuer, configured_slash: str, token_slash: str, discovery_slash: str
) -> None:
    issuer.names_itself = issuer.url + discovery_slash
    verifier = OidcVerifier(issuer=issuer.url + configured_slash, audience=AUDIENCE)

    principal = await verifier.verify(issuer.token(iss=issuer.url + token_slash))

    assert principal.id == "alice"
    error = await refused(verifier, issuer.token(iss=issuer.url + "//"))  # one slash, no more
    assert "wrong issuer" in str(error)
    error = await refused(verifier, issuer.token(iss=issuer.url + "/other"))
    assert "wrong issuer" in str(error)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("route", ["discovery", "jwks"])
async def test_a_document_over_the_size_bound_is_refused_naming_its_url(
    issuer: Issuer, route: str, chunked: bool
) -> None:
    issuer.chunked = chunked
    issuer.padding[route] = MAX_DOCUMENT_BYTES
    verifier = issuer.verifier()

    with pytest.raises(Unavailable) as caught:
        await verifier.verify(issuer.token())

    url = issuer.jwks_url if route == "jwks" else f"{issuer.url}/.well-known/openid-configuration"
    assert f"at {url} is larger than 1 MiB" in str(caught.value)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_documents_under_the_size_bound_are_read(issuer: Issuer, chunked: bool) -> None:
    issuer.chunked = chunked
    issuer.padding.update(discovery=MAX_DOCUMENT_BYTES - 1024, jwks=MAX_DOCUMENT_BYTES - 64_000)

    assert (await issuer.verifier().verify(issuer.token())).id == "alice"


def decoys(count: int) -> list[dict[str, Any]]:
    """``count`` public keys in a key set that nobody signs with (one EC key under many ids)."""
    public = ec_key().jwk()
    return [{**public, "kid": f"decoy-{n}"} for n in range(count)]


async def test_at_most_the_first_hundred_keys_of_a_set_are_used(issuer: Issuer) -> None:
    issuer.decoys = decoys(MAX_KEYS)
    verifier = issuer.verifier()

    error = await refused(verifier, issuer.token())  # the issuer's key is the 101st

    assert "unknown kid" in str(error)
    issuer.decoys = decoys(MAX_KEYS - len(issuer.keys))
    fresh = issuer.verifier()
    assert (await fresh.verify(issuer.token(issuer.keys[-1]))).id == "alice"  # the 100th


@pytest.mark.parametrize("to", [f"{NOWHERE}/keys", "ftp://127.0.0.1/keys"])
async def test_a_redirect_to_plain_http_is_refused_before_it_is_followed(
    issuer: Issuer, to: str
) -> None:
    moved = f"{issuer.url}/moved?to={quote(to)}"
    verifier = OidcVerifier(issuer=issuer.url, audience=AUDIENCE, jwks_url=moved)

    with pytest.raises(Unavailable) as caught:
        await verifier.verify(issuer.token())

    assert f"at {moved} redirects to a URL that is not https://" in str(caught.value)
    assert to not in str(caught.value)


async def test_a_redirect_on_loopback_is_followed_a_few_times(issuer: Issuer) -> None:
    once = f"{issuer.url}/moved?to={quote(issuer.jwks_url)}"
    verifier = OidcVerifier(issuer=issuer.url, audience=AUDIENCE, jwks_url=once)
    assert (await verifier.verify(issuer.token())).id == "alice"

    endless = f"{issuer.url}/moved?to="
    endless += quote(f"/moved?to={quote(f'/moved?to={quote(once)}')}")
    with pytest.raises(Unavailable) as caught:
        await OidcVerifier(issuer=issuer.url, audience=AUDIENCE, jwks_url=endless).verify(
            issuer.token()
        )
    assert "redirects more than 3 times" in str(caught.value)
