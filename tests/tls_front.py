"""A secured Temporal for the connection tests: Debian's nginx in front of the test dev server,
speaking TLS with a certificate from a test CA, requiring a client certificate from that CA and
an API key (``authorization: Bearer <key>``), and passing gRPC through to the dev server.

What a refusal looks like is what a secured cluster sends: a TLS handshake the client cannot
trust, or a gRPC ``UNAUTHENTICATED`` status (nginx answers it itself, as a trailers-only gRPC
response, for a missing client certificate or a wrong key).
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from errands.adapters.devserver import free_port, port_open

NGINX_MISSING = (
    "nginx is not installed: `apt-get install nginx-light` (CI installs it) to run the "
    "secured-connection tests"
)
API_KEY = "errands-test-api-key-" + "0123456789abcdef" * 2


def nginx_path() -> str | None:
    """Debian's nginx, on PATH or where Debian puts it (outside a normal user's PATH)."""
    found = shutil.which("nginx")
    if found:
        return found
    return "/usr/sbin/nginx" if Path("/usr/sbin/nginx").is_file() else None


@dataclass(frozen=True)
class Material:
    """The PEM files of one test PKI, in one directory."""

    ca: Path
    """The CA that signed the server's and the clients' certificates."""
    other_ca: Path
    """A CA unrelated to everything else: trusting it is trusting the wrong CA."""
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    expired_cert: Path
    """A client certificate from the right CA whose validity ended yesterday (key: client_key)."""
    future_cert: Path
    """A client certificate from the right CA valid only from tomorrow (key: client_key)."""


def make_material(directory: Path) -> Material:
    """A CA, a server certificate for 127.0.0.1 and localhost, client certificates (valid,
    expired, not yet valid) and an unrelated CA, written as PEM files into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    day = datetime.timedelta(days=1)
    ca_key, ca_cert = _ca("errands test CA", now)
    other_key, other_cert = _ca("an unrelated CA", now)
    del other_key
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _signed(
        "127.0.0.1",
        server_key,
        ca_key,
        ca_cert,
        now - day,
        now + 30 * day,
        x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        ),
        ExtendedKeyUsageOID.SERVER_AUTH,
    )
    client_key = ec.generate_private_key(ec.SECP256R1())

    def client(start: datetime.datetime, end: datetime.datetime) -> x509.Certificate:
        return _signed(
            "errands-worker",
            client_key,
            ca_key,
            ca_cert,
            start,
            end,
            x509.SubjectAlternativeName([x509.DNSName("errands-worker")]),
            ExtendedKeyUsageOID.CLIENT_AUTH,
        )

    files = Material(
        ca=directory / "ca.pem",
        other_ca=directory / "other-ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        expired_cert=directory / "expired.pem",
        future_cert=directory / "future.pem",
    )
    _write_cert(files.ca, ca_cert)
    _write_cert(files.other_ca, other_cert)
    _write_cert(files.server_cert, server_cert)
    _write_key(files.server_key, server_key)
    _write_cert(files.client_cert, client(now - day, now + 30 * day))
    _write_key(files.client_key, client_key)
    _write_cert(files.expired_cert, client(now - 30 * day, now - day))
    _write_cert(files.future_cert, client(now + day, now + 30 * day))
    return files


@dataclass(frozen=True)
class Front:
    address: str
    """``127.0.0.1:<port>`` where nginx listens with TLS."""
    material: Material
    api_key: str


@contextmanager
def tls_front(upstream: str, directory: Path, material: Material) -> Iterator[Front]:
    """nginx on a free port of 127.0.0.1, in front of the gRPC server at ``upstream``, as its
    own process (no root: its files, logs and pid are in ``directory``), stopped at the end."""
    nginx = nginx_path()
    if nginx is None:
        raise RuntimeError(NGINX_MISSING)
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    (directory / "nginx.conf").write_text(_config(directory, port, upstream, material))
    process = subprocess.Popen(
        [nginx, "-p", str(directory), "-c", str(directory / "nginx.conf"), "-g", "daemon off;"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not port_open("127.0.0.1", port):
            if process.poll() is not None:
                error = process.stderr.read().decode() if process.stderr else ""
                raise RuntimeError(f"nginx did not start: {error.strip()}")
            if time.monotonic() > deadline:
                raise RuntimeError("nginx did not listen within 30 s")
            time.sleep(0.05)
        yield Front(address=f"127.0.0.1:{port}", material=material, api_key=API_KEY)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr:
            process.stderr.close()


def _config(directory: Path, port: int, upstream: str, material: Material) -> str:
    temp = directory / "temp"
    temp.mkdir(exist_ok=True)
    return f"""
worker_processes 1;
pid {directory}/nginx.pid;
error_log {directory}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {directory}/access.log;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {material.server_cert};
        ssl_certificate_key {material.server_key};
        ssl_client_certificate {material.ca};
        ssl_verify_client on;
        client_max_body_size 0;
        # 495: a client certificate nginx cannot verify; 496: none sent.
        error_page 495 = @bad_certificate;
        error_page 496 = @no_certificate;
        error_page 401 = @bad_key;
        location / {{
            if ($http_authorization != "Bearer {API_KEY}") {{ return 401; }}
            grpc_read_timeout 300s;
            grpc_send_timeout 300s;
            grpc_pass grpc://{upstream};
        }}
        location @no_certificate {{
            default_type application/grpc;
            add_header grpc-status 16 always;
            add_header grpc-message "client certificate required" always;
            return 204;
        }}
        location @bad_certificate {{
            default_type application/grpc;
            add_header grpc-status 16 always;
            add_header grpc-message "client certificate not trusted" always;
            return 204;
        }}
        location @bad_key {{
            default_type application/grpc;
            add_header grpc-status 16 always;
            add_header grpc-message "invalid API key" always;
            return 204;
        }}
    }}
}}
"""


def _ca(name: str, now: datetime.datetime) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _signed(
    name: str,
    key: ec.EllipticCurvePrivateKey,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    start: datetime.datetime,
    end: datetime.datetime,
    names: x509.SubjectAlternativeName,
    usage: x509.ObjectIdentifier,
) -> x509.Certificate:
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(names, critical=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
