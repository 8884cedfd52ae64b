"""``mount_a2a``: A2A 1.0 on a gateway's app: the agent card at
``/.well-known/agent-card.json``, JSON-RPC at ``/a2a`` and HTTP+JSON under ``/a2a/rest``, every
A2A request acting as the principal ``principal_of`` resolves for it (the gateway's own
authentication: its refusals answer as the gateway's do, before any A2A handling)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

from a2a.server.context import ServerCallContext
from a2a.server.routes import (
    DefaultServerCallContextBuilder,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from errands.client import Client
from errands.contracts.principals import Principal
from errands.errors import Unauthorized, Unavailable
from errands.protocols.a2a._card import card_endpoint
from errands.protocols.a2a._handler import PRINCIPAL, RECHECK, ErrandsRequestHandler

PATH = "/a2a"
PING_SECONDS = 2
"""How often an A2A stream with nothing to say sends a comment: sse-starlette's default (15 s)
is longer than the read timeout of httpx's default client (5 s), which the a2a-sdk client uses,
so a task thinking quietly would cut its stream. Set on each A2A stream, not as sse-starlette's
default: the process's other event streams keep theirs."""

PrincipalOf = Callable[[Request], Awaitable[Principal]]
Endpoint = Callable[[Request], Awaitable[Response]]


class _Acting(DefaultServerCallContextBuilder):
    """The call context of an A2A request, with the principal resolved for it and how to ask
    its credential again (``RECHECK``: an open stream does, as it goes)."""

    def __init__(self, principal_of: PrincipalOf) -> None:
        self._principal_of = principal_of

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        principal = request.scope.get(PRINCIPAL)
        context.state[PRINCIPAL] = principal
        context.state[RECHECK] = partial(_still, self._principal_of, request, principal)
        return context


async def _still(principal_of: PrincipalOf, request: Request, principal: Principal | None) -> None:
    """Refuse (``Unauthorized``) a request whose credential no longer stands for ``principal``:
    a key revoked or a token expired since the request began."""
    try:
        again = await principal_of(request)
    except (Unavailable, HTTPException):
        return  # the store or the issuer did not answer, or a throttle: asked again later
    if again != principal:
        raise Unauthorized("the credential now stands for someone else; sign in again", guess=False)


def _as_principal(endpoint: Endpoint, principal_of: PrincipalOf) -> Endpoint:
    async def acting(request: Request) -> Response:
        request.scope[PRINCIPAL] = await principal_of(request)  # refusals: the gateway's
        response = await endpoint(request)
        if isinstance(response, EventSourceResponse) and response.ping_interval > PING_SECONDS:
            response.ping_interval = PING_SECONDS
        return response

    return acting


def mount_a2a(app: Starlette, base: Client, principal_of: PrincipalOf, *, path: str = PATH) -> None:
    """Add A2A to ``app`` (tasks of ``base``, each request acting as ``principal_of(request)``;
    it raises the gateway's refusals: ``Unauthorized`` for a missing or refused bearer)."""
    handler = ErrandsRequestHandler(base)
    built = _Acting(principal_of)
    routes = [
        *create_jsonrpc_routes(handler, rpc_url=path, context_builder=built),
        # Without the tenant Mount('/{tenant}') the SDK appends, which would take every later
        # route of two or more segments: errands has no tenants.
        *create_rest_routes(handler, context_builder=built, path_prefix=f"{path}/rest"),
    ]
    for route in routes:
        if isinstance(route, Route):
            acting = _as_principal(route.endpoint, principal_of)
            app.router.routes.append(Route(route.path, acting, methods=route.methods))
    card = card_endpoint(base.settings, path)
    app.router.routes.append(Route(AGENT_CARD_WELL_KNOWN_PATH, card, methods=["GET"]))
