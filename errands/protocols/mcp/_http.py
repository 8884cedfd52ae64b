"""``/mcp`` on a FastAPI app: errands' MCP server over Streamable HTTP, every request acting as
the principal its ``Authorization: Bearer`` names (``errands.client.Authenticator``: an API key,
an OIDC JWT, ERRANDS_API_TOKEN, or the one local user of a loopback app with no auth
configured), exactly as the gateway's ``/v1`` routes.

The guard answers before the MCP app sees a request: no bearer where one is needed, or a refused
one, is a 401 with ``WWW-Authenticate`` and errands' message; a misconfigured app a 500; an OIDC
issuer that does not answer a 503. A request that passes carries its principal in its ASGI scope,
and each tool call acts as it (``_acting``).

The MCP session manager's lifespan must run with the app's: ``mount_mcp`` wraps the app's own
lifespan, so serving the app (uvicorn, ``errands.gateway.serving``) runs it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from errands.client import Authenticator, Client
from errands.contracts.principals import Principal
from errands.errors import ConfigError, Unauthorized, Unavailable
from errands.protocols.mcp._acting import PRINCIPAL_KEY, Frontend
from errands.protocols.mcp._server import build_server

MCP_PATH = "/mcp"

PrincipalOf = Callable[[Request], Awaitable[Principal]]
"""Resolves a request's principal, or raises ``Unauthorized`` (or an ``HTTPException``, e.g. a
429 of a throttle): the gateway passes its own ``PrincipalGuard`` so /mcp is throttled as /v1."""


class PrincipalGate:
    """ASGI middleware: resolves every HTTP request's principal before ``app`` sees it, through
    ``principal_of`` when given, else ``authenticator``."""

    def __init__(
        self,
        app: ASGIApp,
        authenticator: Authenticator,
        *,
        loopback_only: bool,
        principal_of: PrincipalOf | None = None,
    ) -> None:
        self.app = app
        self.authenticator = authenticator
        self.loopback_only = loopback_only
        self.principal_of = principal_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            principal = await self._principal(scope)
        except Unauthorized as refused:
            challenge = {"WWW-Authenticate": refused.challenge}
            response = JSONResponse({"detail": refused.message}, 401, headers=challenge)
            await response(scope, receive, send)
            return
        except HTTPException as refused:
            detail = {"detail": refused.detail}
            response = JSONResponse(detail, refused.status_code, headers=refused.headers)
            await response(scope, receive, send)
            return
        except (ConfigError, Unavailable) as failed:
            status = 503 if isinstance(failed, Unavailable) else 500
            await JSONResponse({"detail": failed.message}, status)(scope, receive, send)
            return
        scope[PRINCIPAL_KEY] = principal
        await self.app(scope, receive, send)

    async def _principal(self, scope: Scope) -> Principal:
        if self.principal_of is not None:
            return await self.principal_of(Request(scope))
        header = Headers(scope=scope).get("authorization")
        return await self.authenticator.authenticate(header, loopback_only=self.loopback_only)


def mount_mcp(
    app: FastAPI,
    base: Client,
    *,
    authenticator: Authenticator | None = None,
    loopback_only: bool = True,
    allowed_hosts: list[str] | None = None,
    path: str = MCP_PATH,
    principal_of: PrincipalOf | None = None,
) -> MCPServer[Any]:
    """Serve errands' MCP server at ``path`` of ``app`` over Streamable HTTP, each request acting
    through ``base`` as its principal (``authenticator``; default: API keys in ``base``'s store,
    ERRANDS_OIDC_* and ERRANDS_API_TOKEN of its settings). ``loopback_only``: the app is
    reachable from this machine alone, so with no auth configured its one user is ``local``.
    ``allowed_hosts``: the ``Host`` values the MCP transport accepts (``host:port``, ``*`` for any
    port); None leaves Host and Origin to the app (the gateway's ``BrowserGuard`` checks both on
    every request). ``principal_of``: resolves the principal instead of ``authenticator``
    (the gateway's ``PrincipalGuard``, which also slows token guessing). Wraps the app's
    lifespan so the MCP session manager runs with it. Returns the MCP server."""
    if authenticator is None:
        authenticator = Authenticator.from_settings(base.settings, base.store)
    server = build_server(Frontend(base, per_request=True), base.settings.state_keys())
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=allowed_hosts is not None,
        allowed_hosts=allowed_hosts or [],
        allowed_origins=[f"http://{h}" for h in allowed_hosts or []]
        + [f"https://{h}" for h in allowed_hosts or []],
    )

    def transport() -> ASGIApp:
        return server.streamable_http_app(streamable_http_path=path, transport_security=security)

    gate = PrincipalGate(
        transport(), authenticator, loopback_only=loopback_only, principal_of=principal_of
    )
    # A route of the exact path (no catch-all mount): every other route of the app stays its own.
    app.router.routes.append(Route(path, endpoint=gate, methods=["GET", "POST", "DELETE"]))
    previous = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(running: Any) -> AsyncIterator[Any]:
        # A session manager runs once: each time the app is served, a transport of its own.
        gate.app = transport()
        async with server.session_manager.run(), previous(running) as state:
            yield state

    app.router.lifespan_context = lifespan
    return server
