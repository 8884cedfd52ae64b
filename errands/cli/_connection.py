"""The Temporal connection on the command line: the flags every command that reaches Temporal
takes, the settings they override, and the connection as ``errands config`` shows it.

Precedence: a flag, then a ``TEMPORAL_*`` variable, then the ``temporal.toml`` profile, then the
embedded dev server (``errands.adapters.connection``)."""

from __future__ import annotations

import argparse
from typing import Any

from errands.adapters.connection import Connection, resolve
from errands.cli._terminal import one_line
from errands.errors import ConfigError
from errands.settings import Settings

REACHES_TEMPORAL = (
    "run",
    "wait",
    "status",
    "answer",
    "say",
    "approve",
    "deny",
    "watch",
    "cancel",
    "btw",
    "serve",
    "worker",
    "config",
    "upgrade",
    "notifications",
)
"""The commands that open a Temporal client (or, ``config``, show which one they would)."""


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "Temporal connection", "over the TEMPORAL_* variables and the temporal.toml profile"
    )
    group.add_argument("--address", help="host:port of the Temporal frontend (TEMPORAL_ADDRESS)")
    group.add_argument("--namespace", help="the Temporal namespace (TEMPORAL_NAMESPACE)")
    group.add_argument("--profile", help="the temporal.toml profile to use (TEMPORAL_PROFILE)")
    group.add_argument(
        "--config-file", metavar="PATH", help="the temporal.toml to read (TEMPORAL_CONFIG_FILE)"
    )


def connection_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the flags give (None: not given), for ``load_settings``."""
    return {
        "TEMPORAL_ADDRESS": getattr(args, "address", None),
        "TEMPORAL_NAMESPACE": getattr(args, "namespace", None),
        "TEMPORAL_PROFILE": getattr(args, "profile", None),
        "TEMPORAL_CONFIG_FILE": getattr(args, "config_file", None),
    }


def connection_report(settings: Settings) -> dict[str, Any]:
    """The connection, secrets masked, each part with its source (``errands config``); a
    connection that cannot be read is ``{"error": "the one line"}``, so the settings still show."""
    try:
        return dict(resolve(settings).report())
    except ConfigError as error:
        return {"error": one_line(" ".join(error.message.split()))}


def render_connection(report: dict[str, Any]) -> str:
    """``report`` as aligned lines under a heading: ``part  value  (source)``, or its error."""
    if "error" in report:
        return "\n".join(["Temporal connection:", f"  error: {report['error']}"])
    values = {part: _text(entry["value"]) for part, entry in report.items()}
    width = max(map(len, report), default=0)
    value_width = min(max(map(len, values.values()), default=0), 40)
    lines = [
        one_line(f"  {part:<{width}}  {values[part]:<{value_width}}  ({entry['source']})")
        for part, entry in report.items()
    ]
    return "\n".join(["Temporal connection:", *lines])


def default_profile_note(settings: Settings, connection: Connection) -> str | None:
    """The line to print when the address comes from a profile nobody named: Temporal's default
    ``temporal.toml`` (no TEMPORAL_PROFILE, --profile, TEMPORAL_CONFIG_FILE or --config-file).
    Temporal's convention is kept, but a Temporal CLI user is told where their task goes."""
    if settings.temporal_profile or settings.temporal_config_file is not None:
        return None
    source = connection.source("address")
    if not source.startswith("profile "):
        return None
    return one_line(
        f"errands: using Temporal at {connection.address} from {source}, Temporal's default "
        "file (TEMPORAL_CONFIG_FILE=/dev/null for the embedded stack, or TEMPORAL_ADDRESS or "
        "--address for another server)"
    )


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)
