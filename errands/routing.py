"""Model names (``provider:model``) to providers, on the worker, where the credentials live."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import anthropic
import openai
from temporalio.exceptions import ApplicationError

from errands.contracts import ModelRequest, ModelResponse
from errands.demo import start_demo_server
from errands.providers import (
    AnthropicMessagesProvider,
    OpenAIChatProvider,
    Provider,
    anthropic_client,
    classify_provider_error,
    missing_credentials,
    openai_client,
)
from errands.scripted import ScriptedModelServer
from errands.settings import Settings
from errands.validation import check_model_spec


@dataclass(frozen=True)
class Route:
    provider: Provider
    model: str


class ModelRouter:
    """Builds each provider's client once (retries off) and starts the demo server on first use."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._providers: dict[str, Provider] = {}
        self._lock = threading.Lock()
        self._clients: list[openai.AsyncOpenAI | anthropic.AsyncAnthropic] = []
        self._demo_server: ScriptedModelServer | None = None

    def route(self, spec: str) -> Route:
        provider_name, model = parse_model(spec)
        with self._lock:
            if provider_name not in self._providers:
                self._providers[provider_name] = self._build(provider_name)
        return Route(self._providers[provider_name], model)

    async def complete(self, spec: str, request: ModelRequest, *, timeout: float) -> ModelResponse:
        """One provider call; any provider error leaves here classified (DESIGN invariant 3)."""
        route = self.route(spec)
        try:
            return await route.provider.complete(route.model, request, timeout=timeout)
        except ApplicationError:
            raise
        except Exception as error:  # noqa: BLE001 - the one place that decides retry posture
            # `from None`: Temporal serialises an error's cause chain into history, and a
            # provider's raw message may echo the key. The classified error is redacted.
            raise classify_provider_error(error, route.provider.name) from None

    async def aclose(self) -> None:
        """Close the SDK clients' connections and stop the demo server, if one was started."""
        for client in self._clients:
            await client.close()
        self._clients.clear()
        if self._demo_server is not None:
            self._demo_server.stop()
            self._demo_server = None

    def _build(self, provider_name: str) -> Provider:
        s = self._settings
        if provider_name == "anthropic":
            key = s.anthropic_api_key.get_secret_value() if s.anthropic_api_key else None
            client = anthropic_client(api_key=key, base_url=s.anthropic_base_url)
            self._clients.append(client)
            return AnthropicMessagesProvider(client)
        if provider_name == "openai":
            key = s.openai_api_key.get_secret_value() if s.openai_api_key else None
            base_url = s.openai_base_url
        else:
            # The demo model runs the real OpenAI client against rules served on loopback.
            self._demo_server = start_demo_server()
            key, base_url = "demo", self._demo_server.openai_base_url
        try:
            openai_sdk = openai_client(api_key=key, base_url=base_url)
        except openai.OpenAIError as error:
            # The SDK refuses to build a client it has no credentials for.
            raise missing_credentials(error, provider_name) from None
        self._clients.append(openai_sdk)
        return OpenAIChatProvider(openai_sdk)


def parse_model(spec: str) -> tuple[str, str]:
    """``openai:gpt-4.1`` → ("openai", "gpt-4.1"); ``demo`` → ("demo", "demo").

    Runs inside activities, so a bad spec is a non-retryable ``unknown_model`` failure."""
    try:
        return check_model_spec(spec)
    except ValueError as error:
        raise ApplicationError(
            f"{error}; fix ERRANDS_MODEL or --model", type="unknown_model", non_retryable=True
        ) from None
