"""One delivery attempt of one notification, and what it came to.

The caller (an activity) owns retries: ``Outcome.retry`` and ``Outcome.retry_after`` are its
advice, as DESIGN invariant 3 wants. What is worth another attempt::

    2xx                                   delivered
    408, 429, 5xx                         retry (Retry-After honoured: seconds or an HTTP date)
    timeout, connection or TLS failure    retry
    a name that does not resolve          retry (DNS trouble may pass)
    3xx                                   final: redirects are never followed
    any other 4xx                         final
    refused by the policy, body too big   final, nothing sent

``detail`` is one line for the records. It names a status, a host or an address, never the
URL's path or query (a receiver's URL may hold a token) and never the secret.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from errands.adapters.webhooks._guard import Resolved, WebhookPolicy, check_url
from errands.adapters.webhooks._sign import headers
from errands.errors import WebhookRefused


class _NoUrlPaths(logging.Filter):
    """httpx logs each request's whole URL; a webhook's path or query may hold a token, and no
    log line may (SPEC §11): its records keep a URL's scheme, host and port."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                f"{a.scheme}://{a.netloc.decode('ascii')}/…" if isinstance(a, httpx.URL) else a
                for a in record.args
            )
        return True


_HTTPX_LOG = logging.getLogger("httpx")
_NO_URL_PATHS = _NoUrlPaths()

_RETRY_STATUSES = frozenset({408, 429})
_MAX_DETAIL = 200


@dataclass(frozen=True)
class Outcome:
    """What one delivery attempt came to."""

    delivered: bool
    status: int | None
    """The HTTP status, when a response came."""
    retry: bool
    """Whether another attempt may succeed (timeouts, connection errors, 408, 429, 5xx)."""
    retry_after: float | None
    """Seconds the receiver asked to wait (``Retry-After``), uncapped: the caller caps it."""
    detail: str
    """One line for the records: ``200``, ``500 Internal Server Error``, ``refused: …``."""


async def send(
    url: str,
    secret: str,
    msg_id: str,
    body: dict[str, Any],
    policy: WebhookPolicy,
    *,
    timestamp: int | None = None,
    ssl_context: ssl.SSLContext | None = None,
    extra_headers: Mapping[str, str] | None = None,
) -> Outcome:
    """POST ``body`` as compact JSON to ``url``, signed with ``secret`` as Standard Webhooks
    (``msg_id`` is the ``webhook-id``: the same on every attempt of one notification;
    ``timestamp`` defaults to now). The URL is checked by ``policy`` and the request connects
    to the checked addresses only; the whole attempt, resolution included, takes at most
    ``policy.timeout_seconds``. ``ssl_context`` replaces the default certificate authorities
    (those of ``certifi``), e.g. for a receiver with a private CA. ``extra_headers`` go with
    the signed ones (an A2A push config's token)."""
    if _NO_URL_PATHS not in _HTTPX_LOG.filters:
        _HTTPX_LOG.addFilter(_NO_URL_PATHS)
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    if len(data) > policy.max_body_bytes:
        limit = policy.max_body_bytes
        return _final(f"refused: the body is {len(data)} bytes, over the limit of {limit}")
    when = int(time.time()) if timestamp is None else timestamp
    try:
        signed = {**(extra_headers or {}), **headers(secret, msg_id, when, data)}
    except ValueError as exc:
        return _final(f"refused: {exc}")
    try:
        async with asyncio.timeout(policy.timeout_seconds):
            resolved = await check_url(url, policy)
            return await _post(url, resolved, signed, data, policy, ssl_context)
    except WebhookRefused as exc:
        return _final(f"refused: {exc.reason}")
    except (httpx.InvalidURL, UnicodeError):
        return _final("refused: the URL cannot be sent as it is written")
    except (TimeoutError, httpx.TimeoutException):
        return _again(f"timed out after {policy.timeout_seconds:g} s")
    except socket.gaierror as exc:
        return _again(_one_line(f"could not resolve {urlsplit(url).hostname}: {exc.strerror}"))
    except (OSError, httpx.TransportError) as exc:
        return _again(_failure(exc))


async def _post(
    url: str,
    resolved: Resolved,
    signed: dict[str, str],
    data: bytes,
    policy: WebhookPolicy,
    ssl_context: ssl.SSLContext | None,
) -> Outcome:
    target = httpx.URL(url)
    request_headers = {**signed, "host": _host_header(target), "user-agent": "errands-webhooks"}
    # TLS names the host (SNI) and checks the certificate against it, not the address dialled.
    sni = target.raw_host.decode("ascii")
    extensions = (
        {"sni_hostname": sni} if resolved.scheme == "https" and sni != resolved.address else {}
    )
    async with httpx.AsyncClient(
        verify=ssl_context if ssl_context is not None else True,
        timeout=policy.timeout_seconds,
        follow_redirects=False,
        trust_env=False,
    ) as client:
        failure: httpx.ConnectError | None = None
        for address in resolved.addresses:
            request = client.build_request(
                "POST",
                target.copy_with(host=address),
                headers=request_headers,
                content=data,
                extensions=extensions,
            )
            try:
                response = await client.send(request, stream=True)
            except httpx.ConnectError as exc:
                failure = exc  # nothing was sent: the next checked address may answer
                continue
            await response.aclose()
            return _judge(response)
        assert failure is not None
        raise failure


def _host_header(url: httpx.URL) -> str:
    # netloc is the host as sent (IDNA-encoded, IPv6 in brackets) and a port only when it is
    # not the scheme's default, as a client that resolved the name itself would send it.
    return url.netloc.decode("ascii")


def _judge(response: httpx.Response) -> Outcome:
    status = response.status_code
    if 200 <= status < 300:
        return Outcome(True, status, False, None, str(status))
    line = _one_line(f"{status} {response.reason_phrase}")
    if 300 <= status < 400:
        return Outcome(False, status, False, None, f"redirect ({status}) not followed")
    if status in _RETRY_STATUSES or status >= 500:
        after = retry_after(response.headers.get("retry-after"))
        return Outcome(False, status, True, after, line)
    return Outcome(False, status, False, None, line)


def retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` value: delta-seconds or an HTTP date (0 when past);
    None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _failure(exc: BaseException) -> str:
    # httpx's transport errors and the resolver's say what failed (refused, unreachable, a
    # certificate) without the URL; the class name stands in when they say nothing.
    if isinstance(exc, httpx.LocalProtocolError):
        # Its text quotes the header it refused, which may be a token.
        return "connection failed: a header of the request is not valid HTTP"
    said = str(exc) or exc.__class__.__name__
    return _one_line(f"connection failed: {said}")


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    clean = "".join(c if c.isprintable() else "?" for c in flat)
    return clean if len(clean) <= _MAX_DETAIL else clean[: _MAX_DETAIL - 1] + "…"


def _final(detail: str) -> Outcome:
    return Outcome(False, None, False, None, _one_line(detail))


def _again(detail: str) -> Outcome:
    return Outcome(False, None, True, None, detail)
