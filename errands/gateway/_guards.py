"""What keeps a web page from turning a browser against the gateway, on every response::

    Host not the gateway's own address (or ERRANDS_ALLOWED_HOSTS)   400  DNS rebinding
    POST/PUT/PATCH/DELETE with an Origin (or Sec-Fetch-Site) of
      another site                                                  403  cross-site request
    POST/PUT/PATCH/DELETE with a body that is not application/json  415  a form or text/plain
    every response, refusals and static files included              the security headers

A request without an Origin (curl, the CLI, a server) is no browser's: only its Host is checked.
With ERRANDS_ALLOWED_HOSTS=* (allowed only with a token) an Origin counts as the gateway's own
only when it names the gateway's address or a listed host, never for matching the Host.
One ASGI middleware, outside everything FastAPI does, so no route can be reached around it.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from errands.gateway._auth import is_loopback
from errands.gateway._errors import SEND_JSON
from errands.settings import split_host

log = logging.getLogger("errands.gateway")

SECURITY_HEADERS = {
    # The page loads its scripts, styles and data from the gateway alone, and nothing frames it.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SAME_SITE = frozenset({"same-origin", "none"})
DEFAULT_PORTS = {"http": "80", "https": "443"}


class BrowserGuard:
    """ASGI middleware: refuses what only a hostile page would send, and adds
    ``SECURITY_HEADERS`` to every response. ``allowed_hosts``: ERRANDS_ALLOWED_HOSTS."""

    def __init__(self, app: ASGIApp, allowed_hosts: str | None = None) -> None:
        self.app = app
        listed = {h for h in (allowed_hosts or "").split(",") if h}
        self.any_host = "*" in listed
        # An entry without a port names the host on any port.
        self.listed = {split_host(h) for h in listed - {"*"}}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def secured(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        refusal = self.refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, secured)
            return
        try:
            await self.app(scope, receive, secured)
        except Exception:
            if started:
                raise
            # Answered here so even this answer carries the headers (Starlette's own would not).
            log.exception("%s %s failed", scope["method"], scope["path"])
            failed = "the gateway failed on this request; its log says why. Try again"
            await JSONResponse({"detail": failed}, 500)(scope, receive, secured)

    def refusal(self, scope: Scope) -> JSONResponse | None:
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if not self._host_allowed(host, scope):
            return JSONResponse({"detail": _foreign_host(host, scope)}, 400)
        if scope["method"] in SAFE_METHODS:
            return None
        origin = headers.get("origin")
        site = headers.get("sec-fetch-site")
        if origin is not None and not self._same_origin(origin, host, scope):
            return JSONResponse({"detail": _cross_site(f"the page at {_shown(origin)}")}, 403)
        if site is not None and site.lower() not in SAME_SITE and not self._listed_origin(origin):
            sender = f"a page on another site (Sec-Fetch-Site: {_shown(site)})"
            return JSONResponse({"detail": _cross_site(sender)}, 403)
        media = headers.get("content-type")
        has_body = headers.get("content-length", "0") != "0" or "transfer-encoding" in headers
        if (media is not None or has_body) and _media_type(media) != "application/json":
            return JSONResponse({"detail": _not_json(media, scope)}, 415)
        return None

    def _host_allowed(self, host: str, scope: Scope) -> bool:
        return self.any_host or self._names_gateway(host, scope)

    def _names_gateway(self, host: str, scope: Scope, default_port: str = "80") -> bool:
        """``host[:port]`` is the gateway's own address (or a loopback name for it) or listed."""
        name, port = split_host(host)
        port = port or default_port
        if (name, "") in self.listed or (name, port) in self.listed:
            return True
        server = scope.get("server")
        if not host or server is None or str(server[1]) != port:
            return False
        local = f"[{server[0]}]" if ":" in server[0] else server[0]
        return name == local or (is_loopback(server[0]) and name in LOOPBACK_HOSTS)

    def _same_origin(self, origin: str, host: str, scope: Scope) -> bool:
        scheme, authority = _origin(origin)
        if authority is None:
            return False  # "null": a sandboxed frame, a file, a redirect across sites
        default = DEFAULT_PORTS.get(scheme, "")
        if self.any_host:
            # With `*` a Host proves nothing: a page rebound to the gateway sends its own name
            # as both Host and Origin. Only the gateway's address or a listed name is its own.
            return self._names_gateway(authority, scope, default)
        name, port = split_host(authority)
        own, own_port = split_host(host)
        same = (name, port or default) == (own, own_port or default)
        return same or self._listed_origin(origin)

    def _listed_origin(self, origin: str | None) -> bool:
        """An origin ERRANDS_ALLOWED_HOSTS names (``*`` is for Host only: it names no site)."""
        _, authority = _origin(origin or "")
        if authority is None:
            return False
        name, port = split_host(authority)
        return (name, "") in self.listed or (name, port) in self.listed


def _origin(origin: str) -> tuple[str, str | None]:
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return "", None
    return parts.scheme.lower(), parts.netloc.lower() or None


def _media_type(content_type: str | None) -> str:
    return (content_type or "").partition(";")[0].strip().lower()


def _shown(value: str) -> str:
    return repr(value[:80] + ("…" if len(value) > 80 else ""))


def _foreign_host(host: str, scope: Scope) -> str:
    server = scope.get("server")
    own = "its own address"
    if server:
        own = (
            f"http://[{server[0]}]:{server[1]}"
            if ":" in server[0]
            else f"http://{server[0]}:{server[1]}"
        )
    return (
        f"this gateway does not answer to the host {_shown(host)} (a page on another site may be "
        f"reaching it through DNS rebinding); open it as {own}, or add the name to "
        "ERRANDS_ALLOWED_HOSTS"
    )


def _cross_site(sender: str) -> str:
    return (
        f"refused a request sent by {sender}: calls that change something "
        "are taken only from the gateway's own page or from clients that send no Origin (the "
        "CLI, curl, a server). To let another site's page call it, add that site's host to "
        "ERRANDS_ALLOWED_HOSTS"
    )


def _not_json(content_type: str | None, scope: Scope) -> str:
    given = "no Content-Type" if content_type is None else f"Content-Type {_shown(content_type)}"
    return f"{scope['method']} {scope['path']} takes JSON only (it got {given}); {SEND_JSON}"
