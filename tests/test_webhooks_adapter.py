"""The notification webhook adapter (SPEC §11): Standard Webhooks signatures checked by an
implementation of the algorithm written here, deliveries to real receivers on loopback (plain
HTTP, and HTTPS with a certificate authority made by the test), the outcome of every kind of
answer, and the policy that refuses private, loopback and link-local targets after resolution.
No receiver is mocked: refusals are shown by a receiver that is never hit."""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
import hmac
import json
import socket
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from errands.adapters.webhooks import (
    Outcome,
    WebhookPolicy,
    check_url,
    headers,
    new_secret,
    retry_after,
    send,
    sign,
)
from errands.errors import InvalidRequest, WebhookRefused

pytestmark = pytest.mark.fast

LOCALHOST = tuple(sorted({info[4][0] for info in socket.getaddrinfo("localhost", None)}))
"""What ``localhost`` resolves to here (127.0.0.1, and ::1 on some hosts): allowing all of
them allows the name's every address, as the policy requires."""
BODY = {"type": "replied", "task_id": "t-1", "link": "https://errands.example/t/t-1"}


def verifies(secret: str, sent: dict[str, str], body: bytes) -> bool:
    """The Standard Webhooks check a receiver makes, written from the specification."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{sent['webhook-id']}.{sent['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    offered = sent["webhook-signature"].split(" ")
    return any(
        version == "v1" and hmac.compare_digest(value, expected)
        for version, _, value in (item.partition(",") for item in offered)
    )


@dataclass
class Hit:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A webhook receiver on 127.0.0.1 whose paths answer as their names say."""

    port: int = 0
    hits: list[Hit] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    retry_date: str = ""

    def url(self, path: str, host: str = "localhost", scheme: str = "http") -> str:
        return f"{scheme}://{host}:{self.port}{path}"

    def paths(self) -> list[str]:
        return [hit.path for hit in self.hits]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.hits.append(
            Hit(request.path, {k.lower(): v for k, v in request.headers.items()}, body)
        )
        match request.path:
            case "/ok":
                return web.Response(status=200)
            case "/fail":
                return web.Response(status=500)
            case "/busy":
                return web.Response(status=429, headers={"Retry-After": "7"})
            case "/later":
                return web.Response(status=503, headers={"Retry-After": self.retry_date})
            case "/gone":
                return web.Response(status=404)
            case "/moved":
                return web.Response(status=302, headers={"Location": self.url("/ok")})
            case "/hang":
                await self.release.wait()
                return web.Response(status=200)
        return web.Response(status=400)


async def serve(receiver: Receiver, tls: ssl.SSLContext | None = None) -> web.AppRunner:
    app = web.Application()
    app.router.add_post("/{tail:.*}", receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    receiver.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    runner = await serve(receiver)
    yield receiver
    receiver.release.set()
    await runner.cleanup()


ALLOWED = WebhookPolicy(allow=("localhost",))


async def deliver(url: str, policy: WebhookPolicy = ALLOWED, **options: Any) -> Outcome:
    return await send(url, new_secret(), "msg_t-1_replied", BODY, policy, **options)


# -- signatures -------------------------------------------------------------------------------


def test_a_signature_matches_the_specifications_published_example() -> None:
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"test": 2432232314}'
    made = sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body)
    assert made == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_signed_headers_verify_with_the_algorithm_written_here() -> None:
    secret = new_secret()
    body = json.dumps(BODY).encode()
    sent = headers(secret, "msg_1", 1_700_000_000, body)
    assert sent["webhook-id"] == "msg_1"
    assert sent["webhook-timestamp"] == "1700000000"
    assert sent["content-type"] == "application/json"
    assert verifies(secret, sent, body)
    assert not verifies(new_secret(), sent, body)
    assert not verifies(secret, sent, body + b" ")


def test_a_new_secret_is_whsec_and_base64_of_32_random_bytes() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
    assert new_secret() != secret


@pytest.mark.parametrize(
    "secret", ["whsec_not base64!", "whsec_" + base64.b64encode(b"short").decode()]
)
async def test_an_unusable_secret_is_refused_without_being_quoted(
    secret: str, receiver: Receiver
) -> None:
    with pytest.raises(ValueError) as raised:
        sign(secret, "msg_1", 1, b"{}")
    outcome = await send(receiver.url("/ok"), secret, "msg_1", BODY, ALLOWED)
    assert (outcome.delivered, outcome.retry) == (False, False)
    assert outcome.detail.startswith("refused: the webhook secret")
    body = secret.removeprefix("whsec_")
    assert body not in str(raised.value) and body not in outcome.detail
    assert receiver.hits == []


# -- deliveries and their outcomes ------------------------------------------------------------


async def test_a_delivery_is_signed_compact_json_to_the_name_it_was_given(
    receiver: Receiver,
) -> None:
    secret = new_secret()
    url = receiver.url("/ok")
    outcome = await send(url, secret, "msg_t-1_replied", BODY, ALLOWED, timestamp=1_700_000_000)
    assert outcome == Outcome(True, 200, False, None, "200")
    [hit] = receiver.hits
    assert hit.body == json.dumps(BODY, separators=(",", ":")).encode()
    assert hit.headers["webhook-id"] == "msg_t-1_replied"
    assert hit.headers["webhook-timestamp"] == "1700000000"
    assert hit.headers["host"] == f"localhost:{receiver.port}"
    assert verifies(secret, hit.headers, hit.body)
    assert secret not in json.dumps(hit.headers)


async def test_a_server_error_is_worth_retrying(receiver: Receiver) -> None:
    outcome = await deliver(receiver.url("/fail"))
    assert outcome == Outcome(False, 500, True, None, "500 Internal Server Error")


async def test_too_many_requests_retries_after_the_seconds_it_names(receiver: Receiver) -> None:
    outcome = await deliver(receiver.url("/busy"))
    assert (outcome.status, outcome.retry, outcome.retry_after) == (429, True, 7.0)


async def test_retry_after_as_an_http_date_becomes_seconds_from_now(receiver: Receiver) -> None:
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=120)
    receiver.retry_date = format_datetime(later, usegmt=True)
    outcome = await deliver(receiver.url("/later"))
    assert (outcome.status, outcome.retry) == (503, True)
    assert outcome.retry_after is not None and 60 < outcome.retry_after <= 121


def test_retry_after_reads_seconds_dates_in_the_past_and_nonsense() -> None:
    assert retry_after(" 30 ") == 30.0
    assert retry_after("Sun, 06 Nov 1994 08:49:37 GMT") == 0.0
    assert retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now=784111777 - 10) == 10.0
    assert retry_after("soon") is None
    assert retry_after("-5") is None
    assert retry_after(None) is None


async def test_a_client_error_is_final(receiver: Receiver) -> None:
    outcome = await deliver(receiver.url("/gone"))
    assert outcome == Outcome(False, 404, False, None, "404 Not Found")


async def test_a_redirect_is_final_and_not_followed_even_to_an_allowed_receiver(
    receiver: Receiver,
) -> None:
    outcome = await deliver(receiver.url("/moved"))
    assert outcome == Outcome(False, 302, False, None, "redirect (302) not followed")
    assert receiver.paths() == ["/moved"]


async def test_a_receiver_that_never_answers_times_out_and_is_worth_retrying(
    receiver: Receiver,
) -> None:
    policy = WebhookPolicy(allow=("localhost",), timeout_seconds=0.5)
    started = time.monotonic()
    outcome = await deliver(receiver.url("/hang"), policy)
    assert outcome == Outcome(False, None, True, None, "timed out after 0.5 s")
    assert receiver.paths() == ["/hang"]
    assert time.monotonic() - started < 5  # the policy's timeout, not the default 10 s


async def test_a_closed_port_is_a_connection_failure_worth_retrying() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    outcome = await deliver(f"http://localhost:{port}/ok")
    assert (outcome.delivered, outcome.status, outcome.retry) == (False, None, True)
    assert outcome.detail.startswith("connection failed")


async def test_a_name_that_does_not_resolve_is_worth_retrying() -> None:
    outcome = await deliver("https://hooks.invalid/notify")
    assert (outcome.delivered, outcome.retry) == (False, True)


async def test_a_body_over_the_limit_is_refused_before_sending(receiver: Receiver) -> None:
    policy = WebhookPolicy(allow=("localhost",), max_body_bytes=100)
    outcome = await send(receiver.url("/ok"), new_secret(), "m", {"text": "x" * 200}, policy)
    assert (outcome.delivered, outcome.retry) == (False, False)
    assert outcome.detail == "refused: the body is 211 bytes, over the limit of 100"
    assert receiver.hits == []


# -- the policy -------------------------------------------------------------------------------


async def test_a_name_resolving_to_loopback_is_refused_after_resolution(
    receiver: Receiver,
) -> None:
    over_https = await deliver(receiver.url("/ok", scheme="https"), WebhookPolicy())
    assert (over_https.delivered, over_https.retry) == (False, False)
    # The first address the resolver gives is named: 127.0.0.1 here, ::1 first on some hosts.
    named = {f"refused: localhost resolves to {a}, a loopback address" for a in LOCALHOST}
    assert over_https.detail in named
    over_http = await deliver(receiver.url("/ok"), WebhookPolicy())
    assert (
        over_http.detail == "refused: plain http:// to localhost; use https://, or allow the host"
    )
    assert receiver.hits == []


@pytest.mark.parametrize("allow", [LOCALHOST, ("localhost",), ("127.0.0.0/8", "::1/128")])
async def test_an_allowed_loopback_receiver_gets_plain_http(
    allow: tuple[str, ...], receiver: Receiver
) -> None:
    outcome = await deliver(receiver.url("/ok"), WebhookPolicy(allow=allow))
    assert outcome.delivered
    assert receiver.paths() == ["/ok"]


@pytest.mark.parametrize(
    ("url", "detail"),
    [
        ("https://10.1.2.3/hook", "10.1.2.3 is a private address"),
        ("https://[::1]:8443/hook", "::1 is a loopback address"),
        ("https://169.254.169.254/latest/meta-data", "169.254.169.254 is a link-local address"),
        ("https://[fe80::1]/", "fe80::1 is a link-local address"),
        ("https://0.0.0.0/", "0.0.0.0 is an unspecified address"),
        ("https://224.0.0.1/", "224.0.0.1 is a multicast address"),
        ("https://100.64.0.1/", "100.64.0.1 is a non-public address"),
        ("https://[fd00::1]/", "fd00::1 is a private address"),
        ("https://[::ffff:127.0.0.1]/", "::ffff:7f00:1 (127.0.0.1) is a loopback address"),
        ("https://[2002:a00:1::]/", "2002:a00:1:: (10.0.0.1) is a private address"),
        (
            "https://[64:ff9b::a9fe:a9fe]/",
            "64:ff9b::a9fe:a9fe (169.254.169.254) is a link-local address",
        ),
    ],
)
async def test_a_non_public_address_is_refused_without_a_connection(url: str, detail: str) -> None:
    outcome = await deliver(url, WebhookPolicy())
    assert outcome == Outcome(False, None, False, None, f"refused: {detail}")


@pytest.mark.parametrize("url", ["http://example.com/hook", "http://hooks.invalid/hook"])
async def test_plain_http_to_a_name_not_allowed_is_refused_before_any_lookup(url: str) -> None:
    # hooks.invalid can never resolve: a refusal, not a failed lookup, shows none was made.
    outcome = await deliver(url, WebhookPolicy())
    assert (outcome.retry, outcome.detail.split(";")[0]) == (
        False,
        f"refused: plain http:// to {url[7:].split('/')[0]}",
    )


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://hook:s3cr3t@hooks.example.com/", "the URL carries a user name or password"),
        ("ftp://hooks.example.com/", "the scheme is ftp, not https"),
        ("https:///nohost", "the URL has no host"),
        ("https://hooks.example.com:99999/", "the URL cannot be parsed"),
        ("https://hooks.example.com/a b", "the URL holds white space"),
    ],
)
async def test_malformed_urls_are_refused_naming_what_is_wrong(url: str, reason: str) -> None:
    with pytest.raises(WebhookRefused) as raised:
        await check_url(url, WebhookPolicy())
    assert raised.value.reason.startswith(reason)
    assert isinstance(raised.value, InvalidRequest) and raised.value.field == "notify"
    assert "s3cr3t" not in str(raised.value)


async def test_a_refusal_never_quotes_the_urls_path_or_query() -> None:
    outcome = await deliver("https://10.0.0.5/hooks/T0KEN?sig=S1GNATURE", WebhookPolicy())
    assert outcome.detail == "refused: 10.0.0.5 is a private address"


async def test_allowed_networks_and_public_literals_pass_without_a_lookup() -> None:
    allowed = await check_url("https://10.1.2.3:8443/h", WebhookPolicy.parse("10.0.0.0/8"))
    assert (allowed.host, allowed.port, allowed.addresses) == ("10.1.2.3", 8443, ("10.1.2.3",))
    public = await check_url("https://[2606:4700:4700::1111]/h", WebhookPolicy())
    assert public.address == "2606:4700:4700::1111"


def test_a_policy_parses_a_setting_and_names_a_bad_entry() -> None:
    policy = WebhookPolicy.parse("Hooks.Internal., 10.1.2.3/8  [::1]")
    assert policy.allow == ("hooks.internal", "10.0.0.0/8", "::1")
    assert WebhookPolicy.parse(["a.example", "192.168.1.1"]).allow == ("a.example", "192.168.1.1")
    for bad in ("10.0.0.0/33", "hooks/24", "::zz", "under score..x"):
        with pytest.raises(ValueError, match="is not"):
            WebhookPolicy.parse(bad)
    with pytest.raises(TypeError):
        WebhookPolicy(allow="localhost")  # type: ignore[arg-type]


# -- HTTPS: the request dials the checked address and TLS names the host ----------------------


@dataclass
class Authority:
    ca: Path
    server: ssl.SSLContext
    names: list[str]


def make_authority(tmp: Path) -> Authority:
    """A CA and a certificate for ``localhost`` (no IP address in it) signed by it."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "errands test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (tmp / "ca.pem").write_bytes(ca.public_bytes(pem))
    (tmp / "leaf.pem").write_bytes(leaf.public_bytes(pem))
    (tmp / "leaf.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp / "leaf.pem", tmp / "leaf.key")
    names: list[str] = []

    def seen(_sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        names.append(name or "")

    server.sni_callback = seen  # type: ignore[assignment]
    return Authority(tmp / "ca.pem", server, names)


async def test_https_dials_the_checked_address_with_the_hosts_name_in_tls(tmp_path: Path) -> None:
    authority = make_authority(tmp_path)
    receiver = Receiver()
    runner = await serve(receiver, authority.server)
    try:
        trusting = ssl.create_default_context(cafile=authority.ca)
        by_name = receiver.url("/ok", scheme="https")
        outcome = await deliver(by_name, ssl_context=trusting)
        assert outcome.delivered, outcome.detail
        assert authority.names == ["localhost"]
        assert receiver.hits[0].headers["host"] == f"localhost:{receiver.port}"

        untrusted = await deliver(by_name)
        assert (untrusted.delivered, untrusted.retry) == (False, True)
        assert "certificate verify failed" in untrusted.detail

        # The certificate names localhost, not 127.0.0.1: the check follows the URL's host.
        by_address = receiver.url("/ok", host="127.0.0.1", scheme="https")
        policy = WebhookPolicy(allow=("127.0.0.1",))
        mismatch = await deliver(by_address, policy, ssl_context=trusting)
        assert (mismatch.delivered, mismatch.retry) == (False, True)
        assert "mismatch" in mismatch.detail
        assert receiver.paths() == ["/ok"]
    finally:
        await runner.cleanup()
