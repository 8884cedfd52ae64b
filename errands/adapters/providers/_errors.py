"""Retry posture for provider failures, decided here and nowhere else (DESIGN invariant 3).

The SDK clients run with their own retries off, so every failure reaches this function once per
activity attempt and comes out as an ``ApplicationError`` whose ``type`` is one of these kinds
(``errands.errors.PROVIDER_KINDS``)::

    transient          timeouts, connection errors, 408/409/429/5xx, overloaded, a streamed
                       answer broken off by an error event or a dropped connection
                       -> retried by the activity retry policy, honouring retry-after
    credential         401 (or no credentials at all)    -> non_retryable
    permission         403                               -> non_retryable
    unknown_model      404                               -> non_retryable
    context            a 400/413/500 saying the prompt is longer than the model's window
                       (OpenAI ``context_length_exceeded``, Anthropic "prompt is too long",
                       vLLM's and llama.cpp's wordings) -> non_retryable; the model activity
                       compacts the conversation and sends it again
    payload_too_large  413                               -> non_retryable
    invalid_request    any other 4xx, or a 500/501 whose body names the request
                       ("JSON schema conversion failed", "invalid", "unsupported",
                       "parse"): the same request fails the same way -> non_retryable
    internal           anything else: a bug on our side  -> non_retryable

``refuses_required_tool_choice`` recognises a server that takes only ``auto``/``none`` for
``tool_choice``; the OpenAI provider retries such a call with ``auto`` instead of failing it.
"""

from __future__ import annotations

import email.utils
import json
import math
import re
import time
from datetime import timedelta
from typing import Any

import anthropic
import httpx2
import openai
from temporalio.exceptions import ApplicationError

from errands.errors import FailureKind

_KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
_URL_VARIABLES = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}
_TRANSIENT_STATUSES = {408, 409, 429}
# A 500/501 is the server's own verdict, and these words say it is about the request (llama.cpp:
# "JSON schema conversion failed: …"); gateways (502-504) and overload (529) stay transient.
_REQUEST_VERDICT_STATUSES = {500, 501}
_NAMES_THE_REQUEST = re.compile(
    r"json schema|\binvalid|\bunsupported|not supported|\bpars(e|ing)", re.IGNORECASE
)
_CONTEXT_STATUSES = {400, 413, 422, 500}
_NAMES_THE_CONTEXT = re.compile(
    r"context[_ ]length|maximum context|context (window|size|limit)|prompt is too long"
    r"|exceeds? the (available )?context",
    re.IGNORECASE,
)
_TOOL_CHOICE_REFUSAL_STATUSES = {400, 422, 500}
_NAMES_TOOL_CHOICE = re.compile(r"""tool[_ ]choice|['"`]required['"`]""", re.IGNORECASE)

# Providers echo part of a rejected key back ("Incorrect API key provided: sk-ab***yz"); strip
# anything key-shaped so no fragment of a credential reaches workflow history.
_KEY_LIKE = re.compile(r"\b(?:sk|key|token)[-_][A-Za-z0-9_\-*.]{6,}", re.IGNORECASE)

# The HTTP client's own errors (httpx2, under both SDKs) reach us from a streamed answer: the
# SDKs wrap only the request's send.
_TIMEOUT_ERRORS = (
    openai.APITimeoutError,
    anthropic.APITimeoutError,
    TimeoutError,
    httpx2.TimeoutException,
)
_CONNECTION_ERRORS = (
    openai.APIConnectionError,
    anthropic.APIConnectionError,
    ConnectionError,
    httpx2.TransportError,
)
_STATUS_ERRORS = (openai.APIStatusError, anthropic.APIStatusError)
# An error event in a streamed answer: OpenAI's SDK raises a bare APIError, Anthropic's a status
# error with the stream's own status (200).
_STREAM_ERRORS = (openai.APIError, anthropic.APIError)
# Raised when the anthropic SDK (2.x) resolves no credentials; older SDKs lack the class.
_CREDENTIAL_ERRORS: tuple[type[BaseException], ...] = tuple(
    c for c in [getattr(anthropic, "CredentialsError", None)] if c is not None
)


def classify_provider_error(error: BaseException, provider: str) -> ApplicationError:
    """Turn one failed provider call into the error the activity raises.

    The message is an instruction: which provider, what happened, what to do next.
    """
    if isinstance(error, _TIMEOUT_ERRORS):
        return _failure(
            "transient",
            provider,
            f"{provider} did not answer within the call timeout; the activity retry policy will "
            "try again (raise the model call timeout if this keeps happening)",
        )
    if isinstance(error, _CONNECTION_ERRORS):
        return _failure(
            "transient",
            provider,
            f"could not reach {provider} ({_describe(error)}); the activity retry policy will try "
            f"again - check {_URL_VARIABLES.get(provider, 'the base URL')} and the network if it "
            "persists",
        )
    if isinstance(error, _STATUS_ERRORS) and error.status_code >= 400:
        return _classify_status(error, provider)
    if isinstance(error, _CREDENTIAL_ERRORS) or _is_missing_anthropic_auth(error):
        return missing_credentials(error, provider)
    if isinstance(error, _STREAM_ERRORS):
        return _failure(
            "transient",
            provider,
            f"{provider} broke off its streamed answer ({_describe(error)}); the activity retry "
            "policy will try again",
        )
    return _failure(
        "internal",
        provider,
        f"calling {provider} failed with an unexpected {type(error).__name__}: "
        f"{_describe(error)}; this is a bug in errands, not a provider outage - report it",
    )


def missing_credentials(error: BaseException, provider: str) -> ApplicationError:
    """The worker has no key for ``provider``: nothing to retry, the operator must set one."""
    return _failure(
        "credential",
        provider,
        f"{provider} has no usable credentials ({_describe(error)}); set "
        f"{_KEY_VARIABLES.get(provider, 'the API key')} on the worker and restart it",
    )


StatusError = openai.APIStatusError | anthropic.APIStatusError


def refuses_required_tool_choice(error: BaseException) -> bool:
    """Whether ``error`` is a server refusing ``tool_choice: "required"`` (some accept only
    ``auto`` and ``none``), as opposed to any other failure of the same request."""
    return (
        isinstance(error, _STATUS_ERRORS)
        and error.status_code in _TOOL_CHOICE_REFUSAL_STATUSES
        and bool(_NAMES_TOOL_CHOICE.search(_provider_message(error)))
    )


def _classify_status(error: StatusError, provider: str) -> ApplicationError:
    status = error.status_code
    said = _provider_message(error)
    key_var = _KEY_VARIABLES.get(provider, "the API key variable")
    url_var = _URL_VARIABLES.get(provider, "the base URL variable")
    if status in _CONTEXT_STATUSES and (
        _error_field(error, "code") == "context_length_exceeded" or _NAMES_THE_CONTEXT.search(said)
    ):
        return _failure(
            "context",
            provider,
            f"{provider} refused the request as longer than the model's context window "
            f"(HTTP {status}: {said}); errands compacts the conversation and sends it again - "
            "if this keeps happening, set the model's context_window in ERRANDS_MODELS to the "
            "server's own",
            status=status,
        )
    if status in _REQUEST_VERDICT_STATUSES and _NAMES_THE_REQUEST.search(said):
        return _failure(
            "invalid_request",
            provider,
            f"{provider} could not process the request (HTTP {status}: {said}); the server "
            "names the request itself, so sending it again cannot succeed - use a model or "
            f"server that accepts it ({url_var}, ERRANDS_MODELS)",
            status=status,
        )
    overloaded = _error_field(error, "type") == "overloaded_error"
    if status in _TRANSIENT_STATUSES or status >= 500 or overloaded:
        return _failure(
            "transient",
            provider,
            f"{provider} answered HTTP {status} ({said}); the activity retry policy will try again",
            status=status,
            next_retry_delay=_retry_after(error.response.headers),
        )
    if status == 401:
        return _failure(
            "credential",
            provider,
            f"{provider} rejected the credentials (HTTP 401: {said}); set {key_var} to a valid key "
            f"for the server at {_origin(error)} (change {url_var} if that is the wrong server) "
            "and restart the worker",
            status=status,
        )
    if status == 403:
        return _failure(
            "permission",
            provider,
            f"{provider} refused the request (HTTP 403: {said}); the key in {key_var} is valid but "
            "lacks access to this model or feature - grant it or choose another model",
            status=status,
        )
    if status == 404:
        model = _requested_model(error)
        which = f"model {model!r}" if model else "the model (check ERRANDS_MODEL)"
        return _failure(
            "unknown_model",
            provider,
            f"{provider} does not know {which} (HTTP 404: {said}); fix the model name in "
            f"ERRANDS_MODEL / ERRANDS_FALLBACK_MODEL / ERRANDS_ADVISOR_MODEL, or {url_var} if it "
            "points at the wrong server",
            status=status,
        )
    if status == 413:
        return _failure(
            "payload_too_large",
            provider,
            f"{provider} refused the request as too large (HTTP 413: {said}); retrying cannot help "
            "- the conversation must be compacted or the input shortened",
            status=status,
        )
    return _failure(
        "invalid_request",
        provider,
        f"{provider} rejected the request (HTTP {status}: {said}); retrying the same request "
        "cannot succeed - fix the request or the model settings",
        status=status,
    )


def _failure(
    kind: FailureKind,
    provider: str,
    message: str,
    *,
    status: int | None = None,
    next_retry_delay: timedelta | None = None,
) -> ApplicationError:
    return ApplicationError(
        _redact(message),
        {"provider": provider, "status": status},
        type=kind,
        non_retryable=kind != "transient",
        next_retry_delay=next_retry_delay,
    )


def _retry_after(headers: Any) -> timedelta | None:
    """Read ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    value = headers.get("retry-after-ms")
    if value is not None:
        seconds = _number(value)
        if seconds is not None:
            return timedelta(milliseconds=seconds)
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return timedelta(seconds=seconds)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return timedelta(seconds=max(0.0, when.timestamp() - time.time()))


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _provider_message(error: StatusError) -> str:
    body = error.body
    if isinstance(body, dict):
        # OpenAI's SDK hands over the inner error object, Anthropic's the whole envelope.
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
    return error.message


def _error_field(error: StatusError, field: str) -> str | None:
    """A string field of the provider's error object (``code``, ``type``), if it has one."""
    body = error.body
    if isinstance(body, dict):
        # OpenAI's SDK hands over the inner error object, Anthropic's the whole envelope.
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get(field), str):
            return inner[field]
    return None


def _requested_model(error: StatusError) -> str | None:
    try:
        sent = json.loads(error.request.content)
    except (RuntimeError, TypeError, ValueError):  # a streamed or non-JSON body
        return None
    model = sent.get("model") if isinstance(sent, dict) else None
    return model if isinstance(model, str) and model else None


def _origin(error: StatusError) -> str:
    # Scheme, host and port only: a URL's user info or query could carry a secret.
    url = error.request.url
    port = f":{url.port}" if url.port else ""
    return f"{url.scheme}://{url.host}{port}"


def _is_missing_anthropic_auth(error: BaseException) -> bool:
    # The anthropic SDK raises a bare TypeError at request time when it finds no credentials.
    return isinstance(error, TypeError) and "authentication method" in str(error)


def _describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    cause = error.__cause__ or error.__context__
    if cause is not None and str(cause):
        text = f"{text} {type(cause).__name__}: {cause}"
    return text


def _redact(message: str) -> str:
    return _KEY_LIKE.sub("[redacted]", message)
