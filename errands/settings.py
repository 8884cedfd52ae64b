"""Configuration: one pydantic-settings model, read from the environment (and flags).

Built by ``worker.py`` and the CLI, never at import time of anything a workflow imports.
Provider keys are read here, on the worker, and never enter a workflow payload.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

DEMO_MODEL = "demo"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    temporal_address: str | None = Field(default=None, alias="TEMPORAL_ADDRESS")
    """Where the Temporal frontend listens. Unset: the CLI starts the embedded dev server."""
    temporal_namespace: str = Field(default="default", alias="TEMPORAL_NAMESPACE")
    task_queue: str = Field(default="errands", alias="ERRANDS_TASK_QUEUE")
    data_dir: Path = Field(default=Path(".errands"), alias="ERRANDS_DATA_DIR")
    """The embedded stack's files: the session database and the dev server's SQLite file."""
    database_url: str | None = Field(default=None, alias="ERRANDS_DATABASE_URL")
    """``sqlite:///path`` or ``postgresql://…``; unset: ``<data_dir>/sessions.db``."""
    model: str | None = Field(default=None, alias="ERRANDS_MODEL")
    """Primary model as ``provider:model``. Unset: ``demo`` when no provider key is set."""
    fallback_model: str | None = Field(default=None, alias="ERRANDS_FALLBACK_MODEL")
    advisor_model: str | None = Field(default=None, alias="ERRANDS_ADVISOR_MODEL")
    subtask_types: str | None = Field(default=None, alias="ERRANDS_SUBTASK_TYPES")
    """Extra subtask types: comma-separated ``module:attribute`` paths."""
    openai_api_key: SecretStr | None = Field(default=None, alias="OPENAI_API_KEY")
    openai_base_url: str | None = Field(default=None, alias="OPENAI_BASE_URL")
    anthropic_api_key: SecretStr | None = Field(default=None, alias="ANTHROPIC_API_KEY")
    anthropic_base_url: str | None = Field(default=None, alias="ANTHROPIC_BASE_URL")
    api_token: SecretStr | None = Field(default=None, alias="ERRANDS_API_TOKEN")
    """Bearer token the HTTP gateway requires; needed to serve beyond loopback."""
    log_level: str = Field(default="INFO", alias="ERRANDS_LOG_LEVEL")
    """Log level of workers and the gateway: DEBUG, INFO, WARNING or ERROR."""
    log_json: bool = Field(default=False, alias="ERRANDS_LOG_JSON")
    """One JSON object per log line, with task_id, round and branch when a line belongs to a
    task; deploy/ turns it on. Off: text lines with the ids in brackets."""
    metrics_bind: str | None = Field(default=None, alias="ERRANDS_METRICS_BIND")
    """``IP:port`` where a worker serves the Temporal SDK's Prometheus metrics (e.g.
    ``127.0.0.1:9464``; ``0.0.0.0:9464`` in a container). Unset: no endpoint."""
    otel: bool = Field(default=False, alias="ERRANDS_OTEL")
    """Trace tasks with OpenTelemetry through temporalio's interceptor (the ``otel`` extra)."""
    prices: str | None = Field(default=None, alias="ERRANDS_PRICES")
    """Extra or changed prices, JSON: {"provider:model": {"input": …, "output": …, "cached": …}}
    in USD per million tokens, on top of errands.pricing.DEFAULT_PRICES."""
    dev_port: int = Field(default=7233, alias="ERRANDS_DEV_PORT")
    dev_ui_port: int = Field(default=8233, alias="ERRANDS_DEV_UI_PORT")

    def session_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'sessions.db').resolve()}"

    def default_model(self) -> tuple[str, str | None]:
        """The model to use and, when it is the offline demo, a one-line note saying why."""
        if self.model:
            return self.model, None
        if self.openai_api_key:
            return "openai:gpt-4.1-mini", None
        if self.anthropic_api_key:
            return "anthropic:claude-sonnet-4-5", None
        return DEMO_MODEL, (
            "errands: no ERRANDS_MODEL and no provider key set; using the offline `demo` model"
        )


def load_settings(**overrides: object) -> Settings:
    values = {k: v for k, v in overrides.items() if v is not None}
    return Settings(**values)  # type: ignore[arg-type]


def environ_has_temporal() -> bool:
    return bool(os.environ.get("TEMPORAL_ADDRESS"))
