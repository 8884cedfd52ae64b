"""The way in and the way out: ``load_settings`` (a bad value is one ``ConfigError`` line naming
every bad variable and what it accepts) and ``render_report`` (what ``errands config`` prints)."""

from __future__ import annotations

import os
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from errands.errors import ConfigError
from errands.settings._model import Settings
from errands.settings._parse import SECRETS, accepts, as_text, compact, shown_value

_FIELD_OF = {
    key: name for name, info in Settings.model_fields.items() for key in (name, info.alias or name)
}
"""Field name by variable name or field name: what ``load_settings`` and errors may use."""


def load_settings(**overrides: object) -> Settings:
    """The settings from the environment, with ``overrides`` on top (by variable or field name;
    None: not given). ``ConfigError`` naming every bad variable and what it accepts."""
    unknown = sorted(set(overrides) - _FIELD_OF.keys())
    if unknown:
        raise TypeError(f"load_settings() got unknown settings: {', '.join(unknown)}")
    values: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
    _check_encoding()
    try:
        settings = Settings(**values)
    except ValidationError as error:
        # `from None`: the pydantic error repeats every bad input, secrets included.
        raise _config_error(error) from None
    settings._flags = frozenset(_FIELD_OF[key] for key in values)
    return settings


def render_report(report: dict[str, dict[str, Any]]) -> str:
    """``report`` as aligned lines: ``VARIABLE  value  (default)  — doc``."""
    values = {var: as_text(entry["value"]) for var, entry in report.items()}
    name_width = max(map(len, report), default=0)
    value_width = min(max(map(len, values.values()), default=0), 40)
    return "\n".join(
        f"{var:<{name_width}}  {values[var]:<{value_width}}  "
        f"{'(default)' if entry['default'] else '':<9}  — {entry['doc']}".rstrip(" —")
        for var, entry in report.items()
    )


# -- helpers -------------------------------------------------------------------------------


def _config_error(error: ValidationError) -> ConfigError:
    problems: dict[str, str] = {}
    for detail in error.errors():
        variable, problem = _problem(detail)
        problems.setdefault(variable, problem)
    them = "it" if len(problems) == 1 else "them"
    message = " ".join(f"{'; '.join(problems.values())}; fix or unset {them}".split())
    return ConfigError(message, setting=next(iter(problems)) if len(problems) == 1 else None)


def _check_encoding() -> None:
    """Refuse a variable of the settings whose value is not UTF-8 (Python keeps its bytes as
    lone surrogates, which no payload, store or terminal can take later)."""
    bad = [
        variable
        for variable in sorted(_FIELD_OF)
        if any("\udc80" <= char <= "\udcff" for char in os.environ.get(variable, ""))
    ]
    if bad:
        verb, them = ("is", "it") if len(bad) == 1 else ("are", "them")
        raise ConfigError(
            f"{', '.join(bad)} {verb} not UTF-8 text; fix or unset {them}",
            setting=bad[0] if len(bad) == 1 else None,
        )


def _problem(detail: ErrorDetails) -> tuple[str, str]:
    if not detail["loc"]:  # a rule over several settings: its message names them
        reason = _reason(detail)
        return reason.split(" ", 1)[0], reason
    key = str(detail["loc"][0])
    name = _FIELD_OF.get(key, key)
    info = Settings.model_fields.get(name)
    variable = (info.alias if info else None) or key
    given = "" if name in UNSHOWN else f"={compact(_given(name, detail['input']))}"
    reason = (accepts(info) if info else "") or _reason(detail)
    return variable, f"{variable}{given} is not allowed: {reason}"


UNSHOWN = SECRETS | {"mcp_servers", "webhooks"}
"""Settings a refusal does not repeat: secrets, the MCP servers (their headers and env hold
credentials) and the webhooks (their secrets); the reason says where the JSON is wrong."""


def _given(name: str, value: Any) -> Any:
    """The refused value as the report would show it; its raw text if it cannot be shown so."""
    try:
        return shown_value(name, value)
    except ValueError:
        return value


def _reason(detail: ErrorDetails) -> str:
    """A validator's own message (it says what is accepted), else pydantic's."""
    error = (detail.get("ctx") or {}).get("error")
    return str(error) if error is not None else detail["msg"].lower()
