"""The TLS material of a connection, checked before any connection is tried: each file exists
and reads, each certificate (a file, or the PEM itself from a ``*_DATA`` variable or a profile's
``*_data``) is a PEM certificate valid today, a client key goes with its certificate, and an API
key never leaves this machine over plain gRPC. A problem is one ``ConfigError`` line naming the
variable or profile key to fix — the TLS stack would otherwise say it later, deep in a stack
trace or not at all. A PEM given inline is never shown, a private key least of all."""

from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from temporalio.envconfig import DataSource
from temporalio.service import TLSConfig

from errands.adapters.temporal_profile import PROFILE_KEYS, VARIABLES, Connection, is_loopback
from errands.errors import ConfigError


def tls_config(connection: Connection) -> TLSConfig | bool:
    """What ``Client.connect`` takes for ``tls``, from checked material; False when off."""
    if not connection.tls:
        check_plain_key(connection)
        return False
    check_pairing(connection)
    ca = _read(connection, "server_ca_cert")
    cert = _read(connection, "client_cert")
    key = _read(connection, "client_key")
    if ca is not None:
        _certificates(connection, "server_ca_cert", ca)
    if cert is not None:
        leaf = _certificates(connection, "client_cert", cert)[0]
        _valid_today(connection, leaf)
        if key is not None:
            _matching_key(connection, leaf, key)
    return TLSConfig(
        domain=connection.server_name,
        server_root_ca_cert=ca,
        client_cert=cert,
        client_private_key=key,
    )


def check_plain_key(connection: Connection) -> None:
    """Refuse an API key with TLS turned off, unless the server is this machine: the key would
    cross the network in the clear."""
    address = connection.address
    if connection.tls or connection.api_key is None or address is None or is_loopback(address):
        return
    off = connection.entry("tls")
    said = f"{off}=false" if off.startswith("TEMPORAL_") else off
    raise ConfigError(
        f"TLS is off ({said}) but {connection.entry('api_key')} sets an API key: it would go to "
        f"{address} unencrypted; turn TLS on (unset {off}) or unset the key (a key goes over "
        "plain gRPC only to this machine)",
        setting=off,
    )


def check_pairing(connection: Connection) -> None:
    """A client certificate needs its key and a key its certificate."""
    cert, key = connection.client_cert, connection.client_key
    if (cert is None) == (key is None):
        return
    given, missing = ("client_cert", "client_key") if key is None else ("client_key", "client_cert")
    raise ConfigError(
        f"{connection.entry(given)} is set but {_named(connection, missing)} is not: mTLS needs "
        "the client certificate and its private key; set both or neither",
        setting=connection.entry(given),
    )


def _named(connection: Connection, part: str) -> str:
    """The missing half, named where its other half was set (the same profile, or a variable)."""
    other = "client_cert" if part == "client_key" else "client_key"
    if connection.source(other).startswith("profile "):
        return f"{PROFILE_KEYS[part]} of {connection.source(other)}"
    return VARIABLES[part]


def _read(connection: Connection, part: str) -> bytes | None:
    source: DataSource | None = getattr(connection, part)
    if source is None:
        return None
    if isinstance(source, bytes):
        return source
    if isinstance(source, str):
        return source.encode()
    entry = connection.entry(part)
    try:
        return Path(source).read_bytes()
    except FileNotFoundError:
        problem = "no such file"
    except IsADirectoryError:
        problem = "a directory, not a file"
    except OSError as error:
        problem = f"cannot be read ({error.strerror or error})"
    raise ConfigError(
        f"{entry}={source}: {problem}; give the path of the {_what(part)} (PEM)", setting=entry
    )


def _certificates(connection: Connection, part: str, data: bytes) -> list[x509.Certificate]:
    entry = connection.entry(part)
    try:
        found = x509.load_pem_x509_certificates(data)
    except ValueError:
        found = []
    if not found:
        hint = " (it holds a private key)" if b"PRIVATE KEY" in data else ""
        raise ConfigError(
            f"{_given(connection, part)} is not a PEM certificate{hint}; give the "
            f"{_what(part)} (-----BEGIN CERTIFICATE-----)",
            setting=entry,
        )
    return found


def _valid_today(connection: Connection, cert: x509.Certificate) -> None:
    entry = connection.entry("client_cert")
    now = datetime.datetime.now(datetime.UTC)
    if cert.not_valid_after_utc < now:
        ended = cert.not_valid_after_utc.strftime("%Y-%m-%d %H:%M UTC")
        raise ConfigError(
            f"{_given(connection, 'client_cert')}: the client certificate expired on "
            f"{ended}; give a renewed certificate (and its key)",
            setting=entry,
        )
    if cert.not_valid_before_utc > now:
        starts = cert.not_valid_before_utc.strftime("%Y-%m-%d %H:%M UTC")
        raise ConfigError(
            f"{_given(connection, 'client_cert')}: the client certificate is not valid "
            f"before {starts}; check this machine's clock or give a certificate valid now",
            setting=entry,
        )


def _matching_key(connection: Connection, cert: x509.Certificate, data: bytes) -> None:
    entry = connection.entry("client_key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise ConfigError(
            f"{_given(connection, 'client_key')} is an encrypted private key; give it "
            "without a passphrase (openssl pkey -in KEY -out PLAIN)",
            setting=entry,
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise ConfigError(
            f"{_given(connection, 'client_key')} is not a PEM private key; give the "
            "client certificate's private key (-----BEGIN PRIVATE KEY-----)",
            setting=entry,
        ) from None
    pem = serialization.Encoding.PEM
    info = serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(pem, info) != cert.public_key().public_bytes(pem, info):
        raise ConfigError(
            f"{_given(connection, 'client_key')} is not the key of the client "
            f"certificate {_given(connection, 'client_cert')}; "
            "give the two files that belong together",
            setting=entry,
        )


def _given(connection: Connection, part: str) -> str:
    """``ENTRY=PATH`` for a file, ``ENTRY (inline PEM)`` for the PEM itself (never shown)."""
    entry = connection.entry(part)
    source = getattr(connection, part)
    return f"{entry}={source}" if isinstance(source, Path) else f"{entry} (inline PEM)"


def _what(part: str) -> str:
    return {
        "server_ca_cert": "CA certificate that signed the server's certificate",
        "client_cert": "client certificate",
        "client_key": "client certificate's private key",
    }[part]
