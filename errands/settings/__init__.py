"""Configuration: one pydantic-settings model, read from the environment (and flags).

Built by ``worker.py`` and the CLI, never at import time of anything a workflow imports.
Provider keys are read here, on the worker, and never enter a workflow payload.

``load_settings`` is the way in: a value errands cannot use is a ``ConfigError`` whose one line
names every bad variable and what it accepts. ``Settings.report`` (and ``render_report``) show
the effective configuration with the secrets masked; ``render_configuration`` writes
docs/configuration.md from the model.

The model is in ``_model``, the checks it binds to its fields in ``_checks``, the values it
parses in ``_parse``, the way in and the report in
``_report``, the generated page in ``_docs``.
"""

from errands.settings._docs import render_configuration
from errands.settings._model import Settings
from errands.settings._parse import (
    LOG_LEVELS,
    Port,
    ProviderLimit,
    Seconds,
    parse_duration,
    provider_limits,
    split_host,
)
from errands.settings._report import load_settings, render_report

__all__ = [
    "LOG_LEVELS",
    "Port",
    "ProviderLimit",
    "Seconds",
    "Settings",
    "load_settings",
    "parse_duration",
    "provider_limits",
    "render_configuration",
    "render_report",
    "split_host",
]
