"""Model providers: the official SDK clients with their retries off, and one error classifier.

A provider maps the neutral ``ModelRequest`` to one API's wire format and back, as the model
catalog (``errands.agent.model_catalog``) says the model takes it; it raises the SDK's own
exceptions, which the activity turns into retry posture with ``classify_provider_error``
(DESIGN invariant 3).
"""

from typing import Protocol

from errands.adapters.providers._anthropic import (
    AnthropicMessagesProvider,
    anthropic_client,
    anthropic_params,
    anthropic_response,
)
from errands.adapters.providers._errors import (
    classify_provider_error,
    missing_credentials,
    refuses_required_tool_choice,
)
from errands.adapters.providers._openai import (
    OpenAIChatProvider,
    is_openai_api,
    openai_client,
    openai_params,
    openai_response,
)
from errands.contracts.messages import DeltaSink, ModelRequest, ModelResponse


class Provider(Protocol):
    """What a model activity needs from a provider: one call, one answer, SDK errors raised.
    With ``on_delta`` the answer is streamed, and each piece passed to it as it arrives."""

    name: str

    async def complete(
        self,
        model: str,
        request: ModelRequest,
        *,
        timeout: float,
        on_delta: DeltaSink | None = None,
    ) -> ModelResponse: ...


__all__ = [
    "AnthropicMessagesProvider",
    "OpenAIChatProvider",
    "Provider",
    "anthropic_client",
    "anthropic_params",
    "anthropic_response",
    "classify_provider_error",
    "is_openai_api",
    "missing_credentials",
    "openai_client",
    "openai_params",
    "openai_response",
    "refuses_required_tool_choice",
]
