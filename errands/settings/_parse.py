"""The values of settings: durations, ports, provider limits, and how a value is shown (secrets
masked, a URL's password hidden). Shared by the model, the report and the generated docs."""

from __future__ import annotations

import ipaddress
import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

from annotated_types import Ge, Le, MinLen
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, ValidationError
from pydantic.fields import FieldInfo

from errands.adapters.encryption import parse_keys
from errands.adapters.mcp.config import parse_mcp_servers
from errands.agent.validation import MODEL_PROVIDERS, check_model_spec
from errands.agent.webhooks import parse_webhooks
from errands.contracts.urls import masked_url
from errands.contracts.workflows import RoundSettings, model_queue

if TYPE_CHECKING:
    from errands.settings._model import Settings

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)")
IDENTIFIERS = re.compile(r"[^\W\d]\w*(\.[^\W\d]\w*)*")
HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?|\[[0-9A-Fa-f:.]+\]")


def parse_duration(value: object) -> float:
    """Seconds in ``value``: a number of seconds (``90``, ``1.5``) or a number with a unit
    (``90s``, ``15m``, ``24h``, ``2d``, ``1.5h``); ``ValueError`` for anything else."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.fullmatch(value.strip())):
        seconds = float(match[1]) * _UNIT_SECONDS[match[2]]
    else:
        raise ValueError(f"{value!r} is not a duration; give e.g. 90, 90s, 15m, 24h or 2d")
    if not math.isfinite(seconds):
        raise ValueError(f"{value!r} is not a finite duration")
    return seconds


SECONDS = BeforeValidator(parse_duration)
"""The validator that makes a duration of a setting: ``Seconds`` carries it."""
Seconds = Annotated[float, SECONDS, Field(gt=0)]
"""A duration in seconds, given as ``90``, ``90s``, ``15m``, ``24h``, ``2d`` or ``1.5h``."""
Port = Annotated[int, Field(ge=1, le=65535)]


class ProviderLimit(BaseModel):
    """What one worker sends to one provider (or to one of its models), across all its tasks
    and branches. Unset: no limit."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    concurrency: int | None = Field(default=None, ge=1)
    """Requests in flight at once."""
    rpm: int | None = Field(default=None, ge=1)
    """Requests started per minute."""
    queue_rate: float | None = Field(default=None, gt=0)
    """Model activities per second the provider's model task queue hands out, across every
    worker (with ERRANDS_MODEL_TASK_QUEUE); provider keys only."""


def provider_limits(text: str | None) -> dict[str, ProviderLimit]:
    """``ERRANDS_PROVIDER_LIMITS`` by key (``openai``, ``openai:gpt-4.1``); ``ValueError``
    saying what is wrong."""
    if not text:
        return {}
    try:
        raw = json.loads(text)
    except ValueError:
        raise ValueError(
            'it is not JSON; give e.g. {"openai": {"concurrency": 4, "rpm": 500}}'
        ) from None
    if not isinstance(raw, dict):
        raise ValueError('give a JSON object, e.g. {"openai": {"concurrency": 4}}')
    limits: dict[str, ProviderLimit] = {}
    for key, value in raw.items():
        if ":" in key:
            check_model_spec(key)
        elif key not in MODEL_PROVIDERS:
            raise ValueError(
                f"{key!r} is neither a provider ({', '.join(MODEL_PROVIDERS)}) nor a provider:model"
            )
        try:
            limits[key] = ProviderLimit.model_validate(value)
        except ValidationError as error:
            problems = ", ".join(
                f"{'.'.join(map(str, e['loc'])) or 'the value'}: {e['msg'].lower()}"
                for e in error.errors()
            )
            raise ValueError(
                f"the limit of {key!r} is wrong ({problems}); give concurrency and rpm as whole "
                "numbers of at least 1 and queue_rate as a number above 0"
            ) from None
        if ":" in key and limits[key].queue_rate is not None:
            raise ValueError(
                f"{key!r} sets queue_rate, which only a provider key may set (a task queue "
                "serves a provider, not a model)"
            )
    return limits


def accepts(info: FieldInfo) -> str:
    """What a number, a duration, a flag or a name accepts, from its type and bounds, as a refusal
    says it ("" for any other setting: its own check says it)."""
    low = next((m.ge for m in info.metadata if isinstance(m, Ge)), None)
    high = next((m.le for m in info.metadata if isinstance(m, Le)), None)
    if SECONDS in info.metadata:
        return "give seconds (90) or a number with a unit: 90s, 15m, 24h, 2d, 1.5h; more than 0"
    if info.annotation is bool:
        return "give true or false (or 1/0, yes/no, on/off)"
    if info.annotation is int:
        if (low, high) == (1, 65535):
            return "give a port from 1 to 65535"
        if high is None:
            return f"give a whole number of at least {low}"
        return f"give a whole number from {low} to {high:,}"
    if any(isinstance(m, MinLen) for m in info.metadata):
        return "give a non-empty name"
    return ""


SECRETS = {
    "openai_api_key",
    "anthropic_api_key",
    "api_token",
    "temporal_api_key",
    "encryption_keys",
    "mcp_state_keys",
}
"""Fields never shown: the report masks them, a refusal leaves out what was given."""
URLS = {
    "database_url",
    "openai_base_url",
    "anthropic_base_url",
    "temporal_ui_url",
    "public_url",
}
"""Fields whose value is shown through ``masked_url``: its password and query secrets hidden."""


def shown_value(name: str, value: Any) -> Any:
    """``value`` fit to print: secrets masked, a URL's password and query secrets hidden,
    JSON-able."""
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if name == "encryption_keys" and value is not None:
        # The ids say which key encrypts and which decrypt; no part of a key is shown.
        ids = list(parse_keys(value))
        return {"encrypts": ids[0], "keys": ids}
    if name in SECRETS and value is not None:
        return f"****{value[-4:]}" if len(str(value)) >= 16 else "set"
    if name == "webhooks" and value is not None:
        # Each carries a secret, and a URL's path may hold a token: each webhook's host only.
        hooks = parse_webhooks(value)
        return {n: urlsplit(hook.url).hostname for n, hook in hooks.items()}
    if name == "mcp_servers" and value is not None:
        # Headers and env may hold secrets: only each server's transport is shown.
        servers = parse_mcp_servers(value)
        return {n: "command" if c.command else "url" for n, c in servers.items()}
    if name in URLS and value is not None:
        return masked_url(str(value))
    if isinstance(value, Path):
        return str(value)
    return value


def compact(value: Any) -> str:
    """``value`` in a refusal's one line: at most 60 characters, quoted if it has spaces."""
    text = str(value)
    if len(text) > 60:
        text = text[:59] + "…"
    return text if re.fullmatch(r"\S+", text) else repr(text)


def as_text(value: Any) -> str:
    """A reported value as ``errands config`` prints it."""
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def is_port(text: str) -> bool:
    """``text`` is a port number, 1 to 65535."""
    return text.isdigit() and 0 < int(text) < 65536


def is_ip_port(text: str) -> bool:
    """``text`` is ``IP:port`` (``[IPv6]:port`` too), never a host name."""
    host, _, port = text.rpartition(":")
    try:
        if host.startswith("[") and host.endswith("]"):
            ipaddress.IPv6Address(host[1:-1])
        else:
            ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return is_port(port)


TOKEN_MIN_LENGTH = 43
"""32 random bytes in URL-safe base64, as ``secrets.token_urlsafe(32)`` makes them."""


def check_api_token(value: SecretStr | None) -> SecretStr | None:
    """``ERRANDS_API_TOKEN`` long enough that guessing it is hopeless (the value is never said),
    without the white space around it (a secret file's last newline): the value compared."""
    token = value.get_secret_value().strip() if value is not None else None
    if token is not None and len(token) < TOKEN_MIN_LENGTH:
        raise ValueError(
            f"a token needs at least {TOKEN_MIN_LENGTH} characters (32 random bytes); make one "
            'with `python -c "import secrets; print(secrets.token_urlsafe(32))"`'
        )
    return None if token is None else SecretStr(token)


def state_keys(value: SecretStr | None) -> list[str]:
    """``ERRANDS_MCP_STATE_KEYS`` as its keys, the sealing one first; empty when unset."""
    return [k.strip() for k in value.get_secret_value().split(",")] if value is not None else []


def check_state_keys(value: SecretStr | None) -> SecretStr | None:
    """Each key long enough for the SDK's AES-256-GCM (which derives its own from it with HKDF):
    at least ``TOKEN_MIN_LENGTH`` characters, as 32 random bytes in base64 are; and no key twice
    (a slip while rotating, which the SDK would refuse as the gateway starts). No key is said."""
    keys = state_keys(value)
    for place, key in enumerate(keys, 1):
        if len(key) < TOKEN_MIN_LENGTH:
            raise ValueError(
                f"key {place} has {len(key)} characters; each needs at least "
                f"{TOKEN_MIN_LENGTH} (32 random bytes), comma-separated, e.g. "
                '`python -c "import secrets; print(secrets.token_urlsafe(32))"`'
            )
        if key in keys[: place - 1]:
            raise ValueError(
                f"key {place} is key {keys.index(key) + 1} again; list each key once, the one "
                "that seals first"
            )
    return value


def check_proxies(value: str | None) -> str | None:
    """``ERRANDS_FORWARDED_ALLOW_IPS`` as IP addresses or networks joined by commas, or ``*``."""
    entries = [e.strip() for e in (value or "").split(",") if e.strip()]
    for entry in entries:
        try:
            if entry != "*":
                ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ValueError(
                f"{entry!r} is not an IP address or network; give the addresses of the proxies "
                "in front of the gateway, comma-separated (10.0.0.5, 10.0.0.0/8, ::1), or * for "
                "any (only when nothing else can reach the gateway)"
            ) from None
    return ",".join(entries) or None


def split_host(authority: str) -> tuple[str, str]:
    """``host[:port]`` (``[IPv6]:port`` too) as ``(host, port)``, lower case; port "" if none."""
    authority = authority.strip().lower()
    if authority.startswith("[") and "]" in authority:
        host, _, rest = authority.partition("]")
        if rest and not rest.startswith(":"):
            return authority, ""  # no host: what follows the address is no port
        return host + "]", rest[1:]
    host, _, port = authority.partition(":")
    return host, port


def check_allowed_hosts(value: str | None) -> str | None:
    """``ERRANDS_ALLOWED_HOSTS`` as ``host[:port]`` entries joined by commas, lower case."""
    hosts = [h.strip().lower() for h in (value or "").split(",") if h.strip()]
    for entry in hosts:
        host, port = split_host(entry)
        if entry != "*" and not (HOST.fullmatch(host) and (port == "" or is_port(port))):
            raise ValueError(
                f"{entry!r} is not a host; give host names or addresses with an optional port, "
                "comma-separated (gateway.example.com, 10.0.0.5:8080, [::1]), or * for any"
            )
    return ",".join(hosts) or None


def model_task_queues(
    template: str | None, limits: dict[str, ProviderLimit]
) -> dict[str, float | None]:
    """The model task queues ``template`` (ERRANDS_MODEL_TASK_QUEUE) names for the providers,
    each with the rate it is limited to (None: unlimited); empty when it is unset."""
    if not template:
        return {}
    queues: dict[str, float | None] = {}
    for provider in MODEL_PROVIDERS:
        queue = model_queue(template, provider)
        assert queue is not None
        limit = limits.get(provider)
        rate = limit.queue_rate if limit else None
        known = queues.get(queue)
        # One queue for several providers: the strictest of their rates.
        queues[queue] = rate if known is None else known if rate is None else min(known, rate)
    return queues


def round_settings(settings: Settings) -> RoundSettings:
    """The task constants of ``settings`` a frontend puts in a task's input."""
    return RoundSettings(
        max_subtasks=settings.max_subtasks,
        max_repairs=settings.max_repairs,
        step_budget=settings.step_budget,
        branch_step_limit=settings.branch_step_limit,
        same_failure_rounds=settings.same_failure_rounds,
        deadline_seconds=settings.deadline_seconds,
        max_output_tokens=settings.max_output_tokens,
        model_timeout_seconds=settings.model_timeout_seconds,
        model_max_attempts=settings.model_max_attempts,
        heartbeat_timeout_seconds=settings.heartbeat_timeout_seconds,
        tool_timeout_seconds=settings.tool_timeout_seconds,
        tool_max_attempts=settings.tool_max_attempts,
        model_task_queue=settings.model_task_queue,
        round_retry_limit=settings.round_retry_limit,
        round_retry_seconds=settings.round_retry_seconds,
        ask_timeout_hours=settings.ask_timeout_seconds / 3600,
        advisor_limit=settings.advisor_limit,
        side_question_timeout_seconds=settings.side_question_timeout_seconds,
        max_history_events=settings.max_history_events,
        notify_retry_seconds=settings.webhook_retry_seconds,
    )
