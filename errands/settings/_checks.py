"""The checks of single settings: each takes the value given and returns the value kept, or
raises a ``ValueError`` that says what the variable accepts; and ``SettingsChecks``, the base
of ``Settings`` that binds them (and the check over several settings) to its fields."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr, ValidationError, field_validator, model_validator

from errands.adapters.encryption import parse_keys
from errands.adapters.mcp.config import parse_mcp_servers
from errands.agent.model_catalog import model_catalog
from errands.agent.pricing import price_table
from errands.agent.quotas import parse_quotas
from errands.agent.validation import check_model_spec
from errands.contracts.versions import BUILD_ID, DEPLOYMENT_NAME
from errands.settings._parse import (
    HOST,
    IDENTIFIERS,
    LOG_LEVELS,
    check_allowed_hosts,
    check_api_token,
    check_proxies,
    check_state_keys,
    is_ip_port,
    is_port,
    provider_limits,
)
from errands.settings._webhooks import WebhookSettings

if TYPE_CHECKING:
    from errands.settings._model import Settings


def check_host_port(value: str | None) -> str | None:
    host, _, port = (value or "").rpartition(":")
    if value is not None and not (HOST.fullmatch(host) and is_port(port)):
        raise ValueError(
            "give host:port without a scheme, e.g. localhost:7233, temporal:7233 or "
            "[::1]:7233 (port 1-65535)"
        )
    return value


def check_encryption_keys(value: SecretStr | None) -> SecretStr | None:
    if value is not None:
        parse_keys(value.get_secret_value())  # its ValueError shows no key
    return value


def check_deployment_name(value: str | None) -> str | None:
    # Temporal writes a version as NAME.BUILD_ID: a '.' in the name makes it ambiguous.
    if value is not None and not DEPLOYMENT_NAME.fullmatch(value):
        raise ValueError(
            "give 1 to 100 letters, digits, '_' or '-' starting with a letter or digit (no '.', "
            "':' or '/'), e.g. errands"
        )
    return value


def check_build_id(value: str | None) -> str | None:
    if value is not None and not BUILD_ID.fullmatch(value):
        raise ValueError(
            "give 1 to 100 letters, digits, '.', '_' or '-' starting with a letter or digit "
            "(no ':' or '/'), e.g. 2026-12-02.1"
        )
    return value


def check_ip_port(value: str | None) -> str | None:
    if value is not None and not is_ip_port(value):
        raise ValueError(
            "give IP:port, e.g. 127.0.0.1:9464, 0.0.0.0:9464 in a container, or [::1]:9464 "
            "(an IP address, not a host name; port 1-65535)"
        )
    return value


def check_log_level(value: str) -> str:
    if value.strip().upper() not in LOG_LEVELS:
        raise ValueError("give DEBUG, INFO, WARNING, ERROR or CRITICAL")
    return value.strip().upper()


def check_model_specs(value: str | None) -> str | None:
    if value is not None:
        check_model_spec(value)
    return value


def check_http_url(value: str | None) -> str | None:
    if value is not None and not re.fullmatch(r"https?://[^\s/]+\S*", value):
        raise ValueError("give an http:// or https:// URL, e.g. http://127.0.0.1:8000/v1")
    return value


def check_https_url(value: str | None) -> str | None:
    # Imported here: the verifier imports PyJWT and aiohttp, which only a set URL should cost.
    from errands.adapters.identity.jwks import secure_url

    if value is not None and not secure_url(value):
        raise ValueError(
            "give an https:// URL, e.g. https://login.example.com (http:// only to a loopback "
            "host: 127.0.0.1, [::1] or localhost)"
        )
    return value


def check_subtask_types(value: str | None) -> str | None:
    for path in filter(None, (p.strip() for p in (value or "").split(","))):
        module, _, attribute = path.partition(":")
        if not (IDENTIFIERS.fullmatch(module) and attribute.isidentifier()):
            raise ValueError(
                f"{path!r} is not a package.module:attribute path; give comma-separated "
                "paths like mypackage.types:TYPES"
            )
    return value


def check_quotas(value: str | None) -> str | None:
    parse_quotas(value)
    return value


def check_prices(value: str | None) -> str | None:
    try:
        price_table(value)
    except ValidationError as error:
        problems = ", ".join(
            f"{'.'.join(map(str, e['loc'])) or 'a price'}: {e['msg'].lower()}"
            for e in error.errors()
        )
        raise ValueError(
            f"a price is wrong ({problems}); give "
            '{"provider:model": {"input": …, "output": …, "cached": …}} in USD per million '
            "tokens"
        ) from None
    except ValueError as error:
        raise ValueError(f"it {str(error).removeprefix('ERRANDS_PRICES ')}") from None
    return value


def check_mcp_servers(value: str | None) -> str | None:
    try:
        parse_mcp_servers(value)
    except ValueError as error:
        said = str(error)
        if said.startswith("ERRANDS_MCP_SERVERS: "):  # one server is wrong: it names it
            raise ValueError(said.removeprefix("ERRANDS_MCP_SERVERS: ")) from None
        raise ValueError(f"it {said.removeprefix('ERRANDS_MCP_SERVERS ')}") from None
    return value


def check_provider_limits(value: str | None) -> str | None:
    provider_limits(value)
    return value


def check_model_task_queue(value: str | None) -> str | None:
    if value is not None and not re.fullmatch(r"([^\s{}]|\{provider\})+", value):
        raise ValueError(
            "give a task queue name without spaces or braces; {provider} in it becomes "
            "the model's provider, e.g. errands-models-{provider}"
        )
    return value


def check_models(value: str | None) -> str | None:
    try:
        model_catalog(value)
    except ValueError as error:
        raise ValueError(f"it {str(error).removeprefix('ERRANDS_MODELS ')}") from None
    return value


def check_database_url(value: str | None) -> str | None:
    if value is not None:
        # Imported here: the store imports psycopg (~50 ms), which only a set URL should cost.
        from errands.adapters.store import sqlite_path

        sqlite_path(value)
    return value


def check_together(settings: Settings) -> Settings:
    """The settings that only make sense with others (a model validator of ``Settings``)."""
    # The deployment name alone is an operator's (errands upgrade); a build needs its deployment.
    if settings.build_id is not None and settings.deployment_name is None:
        raise ValueError(
            "ERRANDS_BUILD_ID needs ERRANDS_DEPLOYMENT_NAME: set both (a versioned worker) "
            "or neither (an unversioned one)"
        )
    if (settings.oidc_issuer is None) != (settings.oidc_audience is None):
        raise ValueError(
            "ERRANDS_OIDC_ISSUER and ERRANDS_OIDC_AUDIENCE go together: set both to accept "
            "the issuer's JWTs, or neither"
        )
    if settings.oidc_jwks_url is not None and settings.oidc_issuer is None:
        raise ValueError("ERRANDS_OIDC_JWKS_URL needs ERRANDS_OIDC_ISSUER and _AUDIENCE")
    return settings


def _on(*fields: str) -> Any:
    """A check bound to ``fields``, which ``Settings`` declares (so not checked for here)."""
    return field_validator(*fields, check_fields=False)


class SettingsChecks(WebhookSettings):
    """The checks of ``Settings``' fields, bound here: each ValueError says what the variable
    accepts."""

    _host_port = _on("temporal_address")(check_host_port)
    _encryption_keys = _on("encryption_keys")(check_encryption_keys)
    _deployment_name = _on("deployment_name")(check_deployment_name)
    _build_id = _on("build_id")(check_build_id)
    _ip_port = _on("metrics_bind")(check_ip_port)
    _log_level = _on("log_level")(check_log_level)
    _model_spec = _on("model", "fallback_model", "advisor_model", "side_question_model")(
        check_model_specs
    )
    _http_url = _on("openai_base_url", "anthropic_base_url")(check_http_url)
    _subtask_types = _on("subtask_types")(check_subtask_types)
    _prices = _on("prices")(check_prices)
    _mcp_servers = _on("mcp_servers")(check_mcp_servers)
    _provider_limits = _on("provider_limits")(check_provider_limits)
    _model_task_queue = _on("model_task_queue")(check_model_task_queue)
    _models = _on("models")(check_models)
    _database_url = _on("database_url")(check_database_url)

    _api_token = _on("api_token")(check_api_token)
    _oidc_urls = _on("oidc_issuer", "oidc_jwks_url")(check_https_url)
    _quotas = _on("quotas")(check_quotas)
    _together = model_validator(mode="after")(check_together)

    _allowed_hosts = _on("allowed_hosts")(check_allowed_hosts)
    _proxies = _on("forwarded_allow_ips")(check_proxies)
    _state_keys = _on("mcp_state_keys")(check_state_keys)
