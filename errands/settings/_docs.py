"""``docs/configuration.md``, generated from ``Settings``: every variable with what it accepts,
its default and its docstring (a test keeps the file equal to ``render_configuration()``)."""

from __future__ import annotations

import re

from pydantic import HttpUrl, SecretStr
from pydantic.fields import FieldInfo

from errands.settings._model import Settings
from errands.settings._parse import LOG_LEVELS, SECONDS, accepts
from errands.settings._webhooks import WebhookSettings

GROUPS = {
    "temporal_address": ("Where things are", ""),
    "temporal_config_file": (
        "A secured cluster, encryption and versions",
        "The connection is read by `temporalio.envconfig`: flags, then these variables, then the "
        "`temporal.toml` profile, then the embedded dev server ([operations.md](operations.md)).",
    ),
    "model": ("Models, their keys, and what agents may use", ""),
    "step_budget": (
        "A task's constants",
        "Read where a task is started (the CLI, the gateway, `errands.Client`) and carried in its "
        "input, so a running task never changes them.",
    ),
    "oidc_issuer": (
        "Many users: principals and quotas",
        "Who may use the gateway and how much ([security.md](security.md)): errands API keys "
        "(`errands principals`), OIDC bearer JWTs, and ERRANDS_API_TOKEN as one admin.",
    ),
    "provider_limits": (
        "Operating it",
        "Rate limits, logs, metrics and tracing are explained in [operations.md](operations.md).",
    ),
    "webhooks": (
        "Work while nobody watches: notifications",
        "Signed webhooks when a task waits for someone, replies, fails or is canceled "
        "([notifications.md](notifications.md)).",
    ),
}
"""Sections of the page, by the first field of each (fields keep the model's order)."""

ACCEPTS = {
    "temporal_address": "`host:port`",
    "data_dir": "a directory",
    "temporal_config_file": "a file",
    "temporal_profile": "a profile name",
    "temporal_tls_client_cert_path": "a PEM file",
    "temporal_tls_client_key_path": "a PEM file",
    "temporal_tls_server_ca_cert_path": "a PEM file",
    "temporal_tls_server_name": "a host name",
    "encryption_keys": "`id=BASE64`, comma-separated",
    "encryption_keys_file": "a file",
    "mcp_state_keys": "keys of 43 or more characters, comma-separated",
    "codec_cors_origins": "origins (`https://host[:port]`), comma-separated",
    "deployment_name": "a name",
    "build_id": "a build id",
    "database_url": "`sqlite:///path.db`, a file path, or `postgresql://…`",
    "model": "`provider:model` or `demo`",
    "fallback_model": "`provider:model` or `demo`",
    "advisor_model": "`provider:model` or `demo`",
    "side_question_model": "`provider:model` or `demo`",
    "openai_base_url": "an `http://` or `https://` URL",
    "anthropic_base_url": "an `http://` or `https://` URL",
    "prices": "JSON",
    "models": "JSON",
    "subtask_types": "`package.module:attribute`, comma-separated",
    "mcp_servers": "JSON",
    "model_task_queue": "a task queue name; `{provider}` is replaced",
    "provider_limits": "JSON",
    "log_level": ", ".join(f"`{level}`" for level in LOG_LEVELS[:-1]) + f" or `{LOG_LEVELS[-1]}`",
    "metrics_bind": "`IP:port`",
    "allowed_hosts": "`host[:port]`, comma-separated, or `*`",
    "forwarded_allow_ips": "IP addresses or networks, comma-separated, or `*`",
    "oidc_issuer": "an `https://` URL (`http://` only on loopback)",
    "oidc_audience": "a string",
    "oidc_jwks_url": "an `https://` URL (`http://` only on loopback)",
    "oidc_principal_claim": "a claim name",
    "oidc_role_claim": "a claim name",
    "quotas": "JSON",
    "webhooks": "JSON",
    "webhook_allow": "host names, addresses or networks, comma-separated",
}
"""What a setting whose type does not say it accepts (strings, mostly); its check refuses the
rest."""

_CODE = re.compile(r"(`[^`]*`)")


def render_configuration() -> str:
    """``docs/configuration.md``: the settings as a reader wants them."""
    lines = [
        "# Configuration",
        "",
        "<!-- generated from errands/settings (Settings); tests/test_cli_usage.py checks it -->",
        "",
        "Every setting of errands is an environment variable; a few commands take a flag for one",
        "as well (`errands run --model`, `errands dev --port`), which wins. An empty variable",
        "counts as unset. `errands config` prints the effective values (`--json`: one object,",
        "variable → value, whether it is the default, what it means), secrets masked. A bad",
        "value is refused when any command starts, in one line naming the variable and what it",
        "accepts, with exit code 2. Keys are read by the worker and never enter workflow inputs,",
        "results or history. A duration is a number of seconds or a number with a unit: `90`,",
        "`90s`, `15m`, `24h`, `2d`, `1.5h`.",
    ]
    fields = Settings.model_fields
    # The parts mixed into Settings come first in its fields; they are read last.
    parts = set(WebhookSettings.model_fields)
    ordered = [n for n in fields if n not in parts] + [n for n in fields if n in parts]
    for name, info in ((n, fields[n]) for n in ordered):
        if name in GROUPS:
            title, intro = GROUPS[name]
            lines += ["", f"## {title}", ""]
            lines += [intro, ""] if intro else []
            lines += ["| variable | accepts | default | meaning |", "|---|---|---|---|"]
        cells = [f"`{info.alias}`", _accepted(name, info), _default(info), _meaning(info)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _accepted(name: str, info: FieldInfo) -> str:
    if SECONDS in info.metadata:
        return "a duration"
    if info.annotation in (bool, bool | None):
        return "`true` or `false`"
    if name in ACCEPTS:
        return ACCEPTS[name]
    if info.annotation == SecretStr | None:
        return "a secret"
    if info.annotation == HttpUrl | None:
        return "an `http://` or `https://` URL"
    derived = accepts(info).removeprefix("give ")
    if not derived:
        raise ValueError(f"say what {info.alias} accepts in errands.settings._docs.ACCEPTS")
    return derived


def _default(info: FieldInfo) -> str:
    value = info.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if SECONDS in info.metadata:
        return f"`{_duration(float(value))}`"
    return f"`{value}`"


def _duration(seconds: float) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _meaning(info: FieldInfo) -> str:
    """The docstring on one line for a table cell: ``code`` as markdown code, ``|`` escaped,
    and ``*`` and ``<`` outside code."""
    text = " ".join((info.description or "").split()).replace("``", "`").replace("|", "\\|")
    parts = _CODE.split(text)
    return "".join(
        part if part.startswith("`") else re.sub(r"([*<])", r"\\\1", part) for part in parts
    )
