"""Model names (``provider:model``) to providers, on the worker, where the credentials live;
and the worker's share of each provider: ``ERRANDS_PROVIDER_LIMITS``, held across every task
and branch the worker runs."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta

import anthropic
import openai
from temporalio.exceptions import ApplicationError

from errands.adapters.demo import start_demo_server
from errands.adapters.providers import (
    AnthropicMessagesProvider,
    OpenAIChatProvider,
    Provider,
    anthropic_client,
    classify_provider_error,
    missing_credentials,
    openai_client,
)
from errands.adapters.scripted import ScriptedModelServer
from errands.agent.arguments import guard_response
from errands.agent.context import TokenEstimator, request_bytes
from errands.agent.model_catalog import ModelInfo, model_catalog
from errands.agent.validation import check_model_spec
from errands.contracts.messages import DeltaSink, ModelRequest, ModelResponse
from errands.contracts.text import clean_response
from errands.settings import ProviderLimit, Settings


@dataclass(frozen=True)
class Route:
    provider: Provider
    model: str


class _Gate:
    """One ``ERRANDS_PROVIDER_LIMITS`` entry: a semaphore for the requests in flight and a
    sliding minute for the requests started."""

    def __init__(self, limit: ProviderLimit) -> None:
        self._slots = asyncio.Semaphore(limit.concurrency) if limit.concurrency else None
        self._per_minute = limit.rpm
        self._starts: deque[float] = deque()
        self._turn = asyncio.Lock()

    async def enter(self) -> None:
        if self._slots is not None:
            await self._slots.acquire()
        try:
            await self._wait_for_the_minute()
        except BaseException:
            self.leave()
            raise

    def leave(self) -> None:
        if self._slots is not None:
            self._slots.release()

    async def _wait_for_the_minute(self) -> None:
        if self._per_minute is None:
            return
        async with self._turn:
            while True:
                now = time.monotonic()
                while self._starts and now - self._starts[0] >= 60:
                    self._starts.popleft()
                if len(self._starts) < self._per_minute:
                    self._starts.append(now)
                    return
                await asyncio.sleep(60 - (now - self._starts[0]))


class ModelRouter:
    """Builds each provider's client once (retries off) and starts the demo server on first use;
    holds every call to the worker's limits for its provider and model."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._providers: dict[str, Provider] = {}
        self._lock = threading.Lock()
        self._limits = settings.limits()
        self._gates: dict[str, _Gate] = {}
        self._clients: list[openai.AsyncOpenAI | anthropic.AsyncAnthropic] = []
        self._demo_server: ScriptedModelServer | None = None
        self._catalog = model_catalog(settings.models)  # checked when the settings loaded
        self.estimator = TokenEstimator()
        """Bytes per token for each model, calibrated from the input tokens providers report."""

    @property
    def settings(self) -> Settings:
        """The settings the router was built from (the activities that hold it read theirs)."""
        return self._settings

    def model_info(self, spec: str) -> ModelInfo:
        """What the catalog (with ``ERRANDS_MODELS``) knows of ``spec``: its window, its output."""
        return self._catalog.lookup(spec)

    def route(self, spec: str) -> Route:
        provider_name, model = parse_model(spec)
        with self._lock:
            if provider_name not in self._providers:
                self._providers[provider_name] = self._build(provider_name)
        return Route(self._providers[provider_name], model)

    async def complete(
        self,
        spec: str,
        request: ModelRequest,
        *,
        timeout: float,
        on_delta: DeltaSink | None = None,
    ) -> ModelResponse:
        """One provider call within the worker's limits, ``timeout`` counting the wait for
        them; any provider error leaves here classified (DESIGN invariant 3). With
        ``on_delta`` (and ``ERRANDS_STREAMING`` on), the answer streams through it."""
        route = self.route(spec)
        sink = on_delta if self._settings.streaming else None
        async with self._within_limits(spec, parse_model(spec)[0], timeout) as left:
            try:
                response = await route.provider.complete(
                    route.model, request, timeout=left(), on_delta=sink
                )
            except ApplicationError:
                raise
            except Exception as error:  # noqa: BLE001 - the one place that decides retry posture
                # `from None`: Temporal serialises an error's cause chain into history, and a
                # provider's raw message may echo the key. The classified error is redacted.
                raise with_jitter(classify_provider_error(error, route.provider.name)) from None
        self.estimator.observe(spec, request_bytes(request), response.usage.input_tokens)
        # Arguments past the guards leave here as a small marker: neither a payload, a stored
        # step nor the next request ever carries them (errands.agent.arguments); nor any
        # character no store can hold (errands.contracts.text).
        return clean_response(guard_response(response))

    @contextlib.asynccontextmanager
    async def _within_limits(
        self, spec: str, provider: str, timeout: float
    ) -> AsyncIterator[Callable[[], float]]:
        """Hold a place under the provider's limit and the model's, for the call; yields what
        is left of ``timeout`` once the places are held."""
        start = time.monotonic()

        def left() -> float:
            return timeout - (time.monotonic() - start)

        gates = [g for g in (self._gate(provider), self._gate(spec)) if g is not None]
        held: list[_Gate] = []
        try:
            for gate in gates:
                try:
                    # A second to spare for the call itself, as model_timeout() leaves one.
                    await asyncio.wait_for(gate.enter(), max(0.0, left() - 1))
                except TimeoutError:
                    raise ApplicationError(
                        f"{spec} waited {time.monotonic() - start:.0f} s for a place under this "
                        "worker's ERRANDS_PROVIDER_LIMITS; the activity retry policy will try "
                        "again (raise the limit, or add workers, if this keeps happening)",
                        {"provider": provider, "status": None},
                        type="transient",
                    ) from None
                held.append(gate)
            yield lambda: max(1.0, left())
        finally:
            for gate in reversed(held):
                gate.leave()

    def _gate(self, key: str) -> _Gate | None:
        limit = self._limits.get(key)
        if limit is None or (limit.concurrency is None and limit.rpm is None):
            return None
        if key not in self._gates:
            self._gates[key] = _Gate(limit)
        return self._gates[key]

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
        catalog = self._catalog
        if provider_name == "anthropic":
            key = s.anthropic_api_key.get_secret_value() if s.anthropic_api_key else None
            client = anthropic_client(api_key=key, base_url=s.anthropic_base_url)
            self._clients.append(client)
            return AnthropicMessagesProvider(client, catalog)
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
        return OpenAIChatProvider(openai_sdk, catalog)


JITTER = 0.2
"""A provider's ``retry-after`` is stretched by up to this share (at least up to a second), so
the branches it stopped together do not all come back at the same instant."""


def with_jitter(error: ApplicationError) -> ApplicationError:
    """``error`` with its ``next_retry_delay`` (a provider's ``retry-after``) jittered."""
    delay = error.next_retry_delay
    if delay is None:
        return error
    seconds = delay.total_seconds()
    extra = random.uniform(0, max(1.0, JITTER * seconds))
    return ApplicationError(
        error.message,
        *error.details,
        type=error.type,
        non_retryable=error.non_retryable,
        next_retry_delay=timedelta(seconds=seconds + extra),
    )


def parse_model(spec: str) -> tuple[str, str]:
    """``openai:gpt-4.1`` → ("openai", "gpt-4.1"); ``demo`` → ("demo", "demo").

    Runs inside activities, so a bad spec is a non-retryable ``unknown_model`` failure."""
    try:
        return check_model_spec(spec)
    except ValueError as error:
        raise ApplicationError(
            f"{error}; fix ERRANDS_MODEL or --model", type="unknown_model", non_retryable=True
        ) from None
