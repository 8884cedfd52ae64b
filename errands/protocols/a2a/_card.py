"""errands' A2A agent card, served at ``/.well-known/agent-card.json``: the skill (delegated
tasks), both interfaces (JSON-RPC and HTTP+JSON) at the address the card was asked for, the
ways the gateway tells callers apart, and the errands extension for resuming a stream."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    OpenIdConnectSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from starlette.requests import Request
from starlette.responses import JSONResponse

from errands.settings import Settings

RESUME_EXTENSION = "urn:errands:a2a:resume-after-seq:v1"
"""The errands extension a client uses to resume a stream: every streamed event carries
``errands.seq`` in its metadata; ``SubscribeToTask`` with the header ``Last-Event-ID: <seq>``
sends exactly the events after it, in order (and no snapshot first)."""

SKILL = AgentSkill(
    id="delegated-task",
    name="Delegated task",
    description=(
        "Takes a long task and sees it through durably: it plans, delegates parts to subtasks "
        "that run in parallel, and answers with one reply. It may stop to ask structured "
        "questions (input-required, the question set as a DataPart) or to have a tool call "
        "approved, and waits for the answer as long as it takes; crashes of workers or of the "
        "gateway lose nothing."
    ),
    tags=["delegation", "research", "planning", "durable", "human-in-the-loop"],
    examples=[
        "Compare three managed PostgreSQL offerings for a 2 TB workload and recommend one.",
        "Plan a week in Portugal by train, and ask me what I prefer where it matters.",
    ],
    input_modes=["text/plain", "application/json"],
    output_modes=["text/plain"],
)


def _version() -> str:
    try:
        return version("errands")
    except PackageNotFoundError:
        return "0"


def agent_card(base_url: str, settings: Settings, path: str) -> AgentCard:
    """The card for a gateway reached at ``base_url``, its A2A endpoints under ``path``."""
    base = base_url.rstrip("/")
    schemes = {
        "bearer": SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(
                scheme="Bearer",
                description="An errands API key (errands principals add), an OIDC JWT of "
                "the configured issuer, or ERRANDS_API_TOKEN; on a loopback gateway with none "
                "of them configured, no token.",
            )
        )
    }
    if settings.oidc_issuer:
        issuer = settings.oidc_issuer.rstrip("/")
        schemes["oidc"] = SecurityScheme(
            open_id_connect_security_scheme=OpenIdConnectSecurityScheme(
                open_id_connect_url=f"{issuer}/.well-known/openid-configuration",
                description="A JWT of this issuer, for audience ERRANDS_OIDC_AUDIENCE, sent as "
                "Authorization: Bearer.",
            )
        )
    return AgentCard(
        name="errands",
        description="Durable delegated LLM tasks on Temporal: long tasks that plan, delegate "
        "to parallel subtasks, ask their user structured questions, and survive crashes.",
        version=_version(),
        supported_interfaces=[
            AgentInterface(url=f"{base}{path}", protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(
                url=f"{base}{path}/rest", protocol_binding="HTTP+JSON", protocol_version="1.0"
            ),
        ],
        capabilities=AgentCapabilities(
            streaming=True,
            push_notifications=True,
            extensions=[
                AgentExtension(
                    uri=RESUME_EXTENSION,
                    description="Resume a stream after the errands.seq of the last event "
                    "received: SubscribeToTask with the header Last-Event-ID: <seq>.",
                    required=False,
                )
            ],
        ),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=[SKILL],
        security_schemes=schemes,
        security_requirements=[
            SecurityRequirement(schemes={name: StringList()}) for name in schemes
        ],
    )


def card_endpoint(settings: Settings, path: str) -> Callable[[Request], Awaitable[JSONResponse]]:
    """The route's endpoint: the card for the address the request came to (public, like the
    OpenAPI document: it holds no data)."""

    async def card(request: Request) -> JSONResponse:
        found = agent_card(str(request.base_url), settings, path)
        return JSONResponse(agent_card_to_dict(found))

    return card
