"""An OIDC issuer's signing keys (its JWKS), as ``errands.adapters.identity.oidc`` verifies
tokens with them.

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
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp

from errands.errors import ConfigError, Unavailable

logger = logging.getLogger("errands.identity")

FETCH_TIMEOUT_SECONDS = 5.0
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


@dataclass(frozen=True)
class _KeySet:
    keys: tuple[dict[str, Any], ...]
    fetched_at: float


class IssuerKeys:
    """The key set of one issuer, fetched and cached (one per verifier)."""

    def __init__(
        self,
        issuer: str,
        jwks_url: str | None,
        *,
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
        self.jwks_url = jwks_url
        self.refresh_interval = refresh_interval
        self.max_age = max_age
        self._keys: _KeySet | None = None
        self._discovered: str | None = None
        self._attempts = 0
        self._last_error: Unavailable | ConfigError | None = None
        self._failed_at: float | None = None
        self._last_refresh: float | None = None
        self._lock = asyncio.Lock()

    async def keys(self, kid: str | None) -> tuple[dict[str, Any], ...]:
        """The issuer's signing keys, fetched when none are held, when they are older than
        ``max_age``, or when ``kid`` names a key they lack (at most once per
        ``refresh_interval``)."""
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
