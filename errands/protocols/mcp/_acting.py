"""Who an MCP request acts as, and how errands' refusals reach an MCP client.

Over stdio the server is the operator's own process, as the CLI is: it acts as the operator
(``Client.acting`` None). Over Streamable HTTP every request is authenticated before the MCP
app sees it (``errands.protocols.mcp._http``), and the principal is left in the request's ASGI
scope under ``PRINCIPAL_KEY``; each tool call reads it from there, so a tool never acts as
anyone the request did not prove to be.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from errands.client import Client
from errands.contracts.principals import Principal
from errands.errors import ErrandsError, TaskEnded, Unauthorized

PRINCIPAL_KEY = "errands.principal"
"""Where the HTTP guard leaves the request's principal in its ASGI scope."""


@dataclass(frozen=True)
class Frontend:
    """The errands client an MCP server works through. ``per_request``: the server is reached
    over HTTP and each request acts as the principal its bearer names; otherwise (stdio) every
    call acts as ``base`` does (the operator)."""

    base: Client
    per_request: bool = False

    def acting(self, request: Any) -> Client:
        """The client acting as the principal of ``request`` (the transport's request object,
        None over stdio)."""
        if not self.per_request:
            return self.base
        scope = getattr(request, "scope", None) or {}
        principal = scope.get(PRINCIPAL_KEY)
        if not isinstance(principal, Principal):
            # Only the guard puts a principal there; a request that passed no guard acts as
            # nobody rather than as the unscoped client.
            raise Unauthorized(
                "this MCP request carries no verified principal; send it to the gateway's /mcp "
                "with `Authorization: Bearer <token>`"
            )
        return self.base.as_principal(principal)


def refused(error: ErrandsError) -> ToolError:
    """An errands refusal as the tool error the client reads: errands' own words, on one line."""
    if isinstance(error, TaskEnded):
        text = (
            f"task {error.task_id} has already ended ({error.ended}); {error.consequence}. "
            f"task_status({error.task_id}) shows its result"
        )
    else:
        text = error.message
    return ToolError(" ".join(text.split()))
