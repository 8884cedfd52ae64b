"""How errands reaches Temporal: one way for every client it opens (the worker, the CLI, the
gateway, ``errands.Client``, the codec server).

``resolve(settings)`` reads the connection through ``temporalio.envconfig``: flags, then the
``TEMPORAL_*`` variables, then the ``temporal.toml`` profile, then the embedded dev server
(``Connection.configured`` is False). An API key turns TLS on. ``open_client`` checks the TLS
material (files, certificates valid today, a key with its certificate) and connects within
``CONNECT_TIMEOUT``; every problem is one ``ConfigError`` or ``TemporalUnreachable`` line naming
the variable, flag or profile key to fix. ``Connection.report`` is what ``errands config`` shows.

What the SDK raises, what it means, what errands raises::

    tcp connect error, dns error          nothing answers there           TemporalUnreachable
    InvalidCertificate(UnknownIssuer)     server cert not from our CA     ConfigError: the CA
    InvalidCertificate(NotValidForName)   server cert for another name    ConfigError: server name
    alert CertificateRequired, BadCert…   client cert missing or refused  ConfigError: client cert
    Unauthenticated, PermissionDenied     key (or certificate) refused    ConfigError: key or cert
    an HTTP/2 or TLS record error         TLS on one side only            ConfigError: TEMPORAL_TLS
    no answer within CONNECT_TIMEOUT      a black hole                    TemporalUnreachable
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

from temporalio.client import Client as TemporalClient
from temporalio.client import Interceptor, Plugin
from temporalio.converter import DataConverter
from temporalio.runtime import Runtime

from errands.adapters.temporal_profile import (
    Connection,
    check_unconfigured,
    default_config_file,
    embedded,
    resolve,
)
from errands.adapters.tls_material import tls_config
from errands.errors import ConfigError, ErrandsError, TemporalUnreachable

__all__ = [
    "CONNECT_TIMEOUT",
    "Connection",
    "check_unconfigured",
    "default_config_file",
    "embedded",
    "open_client",
    "refusal",
    "resolve",
    "tls_config",
]

CONNECT_TIMEOUT = 8.0
"""Seconds the first connection (the TLS handshake and the first call) may take; beyond that the
server is taken as unreachable, so a start never hangs on a black-holed address."""


async def open_client(
    connection: Connection,
    data_converter: DataConverter,
    *,
    runtime: Runtime | None = None,
    interceptors: Sequence[Interceptor] = (),
    plugins: Sequence[Plugin] = (),
) -> TemporalClient:
    """A Temporal client on ``connection``; ``ConfigError`` for material or a refusal the
    operator must fix, ``TemporalUnreachable`` for a server that does not answer."""
    assert connection.address is not None, "resolve the embedded server's address first"
    tls = tls_config(connection)
    try:
        return await asyncio.wait_for(
            TemporalClient.connect(
                connection.address,
                namespace=connection.namespace,
                api_key=connection.api_key,
                tls=tls,
                rpc_metadata=dict(connection.rpc_metadata),
                data_converter=data_converter,
                runtime=runtime,
                interceptors=interceptors,
                plugins=plugins,
            ),
            CONNECT_TIMEOUT,
        )
    except TimeoutError:
        raise TemporalUnreachable(
            f"Temporal at {connection.address} did not answer within {CONNECT_TIMEOUT:g} s; "
            f"check {connection.entry('address')} and that the server is reachable from here"
        ) from None
    except RuntimeError as error:  # what Client.connect raises when it cannot connect
        raise refusal(connection, " ".join(str(error).split())) from None


def refusal(connection: Connection, reason: str) -> ErrandsError:
    """The error ``reason`` (the SDK's text) means for ``connection``, as one line."""
    at = f"Temporal at {connection.address}"
    status = re.search(r"code: (\w+), message: \"([^\"]*)\"", reason)
    if status and status.group(1) in ("Unauthenticated", "PermissionDenied"):
        return _refused(connection, at, status.group(1), status.group(2))
    if "UnknownIssuer" in reason or "BadSignature" in reason:
        ca = connection.source("server_ca_cert")
        trusted = (
            f"the CA in {connection.entry('server_ca_cert')}"
            if ca != "default"
            else "this system's root CAs"
        )
        return ConfigError(
            f"{at}: its TLS certificate is not signed by {trusted}; set "
            f"{connection.entry('server_ca_cert')} to the CA certificate that signed the "
            "server's certificate",
            setting=connection.entry("server_ca_cert"),
        )
    if "NotValidForName" in reason:
        return ConfigError(
            f"{at}: its TLS certificate is not valid for the name errands checked; set "
            f"{connection.entry('server_name')} to a name the certificate carries",
            setting=connection.entry("server_name"),
        )
    if "Expired" in reason and "InvalidCertificate" in reason:
        return ConfigError(
            f"{at}: its TLS certificate has expired; the server's operator must renew it",
            setting=connection.entry("address"),
        )
    if re.search(r"CertificateRequired|BadCertificate|UnknownCA|CertificateUnknown", reason):
        return _client_certificate(connection, at, "refused during the TLS handshake")
    if re.search(r"tcp connect error|dns error|Connection refused|No route", reason, re.I):
        return TemporalUnreachable(
            f"cannot connect to {at} (nothing answers there); check "
            f"{connection.entry('address')} and that the server is up, or start the embedded "
            "stack with `errands dev`"
        )
    if connection.tls and re.search(r"InvalidContentType|CorruptMessage|record", reason):
        return ConfigError(
            f"{at} does not speak TLS; set TEMPORAL_TLS=false (or tls.disabled = true in the "
            "profile) if it is a plain server, or check the address",
            setting=connection.entry("tls"),
        )
    if not connection.tls and re.search(r"h2 protocol error|connection reset|GoAway", reason):
        return ConfigError(
            f"{at} did not answer plain gRPC; if it expects TLS, set TEMPORAL_TLS=true (and "
            "the CA, client certificate or API key it needs)",
            setting=connection.entry("tls"),
        )
    return TemporalUnreachable(
        f"cannot connect to {at} ({reason}); check {connection.entry('address')} and that "
        "the server is up"
    )


def _refused(connection: Connection, at: str, code: str, message: str) -> ConfigError:
    said = f" ({message})" if message else ""
    if "certificate" in message.lower():
        return _client_certificate(connection, at, f"refused the connection{said}")
    if connection.api_key is None:
        return ConfigError(
            f"{at} refused the connection as {code}{said}: it needs an API key (or a client "
            "certificate); set TEMPORAL_API_KEY, or the TLS client certificate it expects",
            setting="TEMPORAL_API_KEY",
        )
    return ConfigError(
        f"{at} refused the API key in {connection.entry('api_key')} ({code}{said}); check "
        f"that key, and that it may use namespace {connection.namespace}",
        setting=connection.entry("api_key"),
    )


def _client_certificate(connection: Connection, at: str, what: str) -> ConfigError:
    if connection.client_cert is None:
        return ConfigError(
            f"{at} {what}: it requires a client certificate; set "
            "TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH (mTLS)",
            setting="TEMPORAL_TLS_CLIENT_CERT_PATH",
        )
    return ConfigError(
        f"{at} {what}: it does not accept the client certificate in "
        f"{connection.entry('client_cert')}; give one signed by the CA the server trusts",
        setting=connection.entry("client_cert"),
    )
