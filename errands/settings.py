"""Configuration: one pydantic-settings model, read from the environment (and flags).

Built by ``worker.py`` and the CLI, never at import time of anything a workflow imports.
Provider keys are read here, on the worker, and never enter a workflow payload.

``load_settings`` is the way in: a value errands cannot use is a ``ConfigError`` whose one line
names every bad variable and what it accepts. ``Settings.report`` (and ``render_report``) show
the effective configuration with the secrets masked.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from annotated_types import Ge, Le, MinLen
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    HttpUrl,
    SecretStr,
    ValidationError,
    field_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, SettingsConfigDict

from errands.adapters.mcp.config import McpServerConfig, parse_mcp_servers
from errands.agent.model_catalog import model_catalog
from errands.agent.pricing import price_table
from errands.agent.validation import DEMO_MODEL, MODEL_PROVIDERS, check_model_spec
from errands.contracts.workflows import RoundSettings, model_queue
from errands.errors import ConfigError

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)")
_IDENTIFIERS = re.compile(r"[^\W\d]\w*(\.[^\W\d]\w*)*")
_HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?|\[[0-9A-Fa-f:.]+\]")


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


_SECONDS = BeforeValidator(parse_duration)
Seconds = Annotated[float, _SECONDS, Field(gt=0)]
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


class Settings(BaseSettings):
    """Every setting, by its environment variable. Built by ``load_settings``."""

    model_config = SettingsConfigDict(
        env_prefix="",
        extra="ignore",
        populate_by_name=True,
        env_ignore_empty=True,
        use_attribute_docstrings=True,
    )

    # -- where things are --------------------------------------------------------------------

    temporal_address: str | None = Field(default=None, alias="TEMPORAL_ADDRESS")
    """Where the Temporal frontend listens, as ``host:port``.

    Unset: a server on 127.0.0.1:<ERRANDS_DEV_PORT> if one listens, else the CLI starts the
    embedded dev server."""
    temporal_namespace: str = Field(default="default", min_length=1, alias="TEMPORAL_NAMESPACE")
    """The Temporal namespace tasks run in."""
    task_queue: str = Field(default="errands", min_length=1, alias="ERRANDS_TASK_QUEUE")
    """The task queue workers poll and frontends start tasks on."""
    data_dir: Path = Field(default=Path(".errands"), alias="ERRANDS_DATA_DIR")
    """The embedded stack's files: the session database and the dev server's SQLite file."""
    database_url: str | None = Field(default=None, alias="ERRANDS_DATABASE_URL")
    """The session store: ``sqlite:///path.db``, a plain file path, or ``postgresql://…``.

    Unset: ``<data_dir>/sessions.db``."""
    dev_port: Port = Field(default=7233, alias="ERRANDS_DEV_PORT")
    """Port of the embedded dev server's frontend; also where the CLI looks for a running one."""
    dev_ui_port: Port = Field(default=8233, alias="ERRANDS_DEV_UI_PORT")
    """Port of the embedded dev server's web UI (the Temporal UI)."""
    temporal_ui_url: HttpUrl | None = Field(default=None, alias="ERRANDS_TEMPORAL_UI_URL")
    """The Temporal UI's base URL, where frontends link each task (the web page, ``errands
    watch``).

    Unset: the embedded dev server's UI (``http://127.0.0.1:<ERRANDS_DEV_UI_PORT>``) when
    ``TEMPORAL_ADDRESS`` is unset, else no link."""

    # -- models and their credentials --------------------------------------------------------

    model: str | None = Field(default=None, alias="ERRANDS_MODEL")
    """Primary model, as ``provider:model`` (``openai:…``, ``anthropic:…``) or ``demo``.

    Unset: ``openai:gpt-4.1-mini`` with an OpenAI key, else ``anthropic:claude-sonnet-4-5``
    with an Anthropic key, else the offline ``demo``."""
    fallback_model: str | None = Field(default=None, alias="ERRANDS_FALLBACK_MODEL")
    """Model that takes a round over when the primary cannot finish it, as ``provider:model``.

    Unset: no fallback."""
    advisor_model: str | None = Field(default=None, alias="ERRANDS_ADVISOR_MODEL")
    """Model the ``advisor`` tool consults, as ``provider:model``; unset: the task's model."""
    side_question_model: str | None = Field(default=None, alias="ERRANDS_SIDE_QUESTION_MODEL")
    """Model that answers side questions (/btw), as ``provider:model``.

    Unset: the task's model, which replays the task's own request (the cache-friendly path)."""
    openai_api_key: SecretStr | None = Field(default=None, alias="OPENAI_API_KEY")
    """API key of ``openai:`` models (or of the OpenAI-compatible server); read on the worker."""
    openai_base_url: str | None = Field(default=None, alias="OPENAI_BASE_URL")
    """An OpenAI-compatible server to use instead of api.openai.com (``http(s)://…/v1``)."""
    anthropic_api_key: SecretStr | None = Field(default=None, alias="ANTHROPIC_API_KEY")
    """API key of ``anthropic:`` models; read on the worker."""
    anthropic_base_url: str | None = Field(default=None, alias="ANTHROPIC_BASE_URL")
    """An Anthropic-compatible server to use instead of api.anthropic.com (``http(s)://…``)."""
    prices: str | None = Field(default=None, alias="ERRANDS_PRICES")
    """Extra or changed prices, as JSON, on top of errands.agent.pricing.DEFAULT_PRICES.

    {"provider:model": {"input": …, "output": …, "cached": …}} in USD per million tokens."""
    models: str | None = Field(default=None, alias="ERRANDS_MODELS")
    """What errands should know about models, as JSON, on top of the model catalog.

    {"provider:model pattern": {"context_window": …, "max_output": …, "temperature": …}}."""
    subtask_types: str | None = Field(default=None, alias="ERRANDS_SUBTASK_TYPES")
    """Extra subtask types: comma-separated ``package.module:attribute`` paths.

    The worker imports them when it starts; each attribute is a SubtaskType or a list of them."""
    mcp_servers: str | None = Field(default=None, alias="ERRANDS_MCP_SERVERS")
    """MCP servers whose tools the agents may call, as JSON by server name
    (errands.adapters.mcp.config).

    {"name": {"command": [...], "env": {...}} or {"url": "…", "headers": {...}}}, with optional
    "tools", "for", "approval" and "timeout_seconds"; read by the worker only."""

    # -- a task's constants (SPEC §1), carried in its input: see round_settings() -----------

    step_budget: int = Field(default=24, ge=1, le=100_000, alias="ERRANDS_STEP_BUDGET")
    """Model steps of the main agent per task, shared by both slots and every repair."""
    branch_step_limit: int = Field(default=12, ge=1, le=10_000, alias="ERRANDS_BRANCH_STEP_LIMIT")
    """Model steps of one branch (one subtask)."""
    max_subtasks: int = Field(default=8, ge=1, le=64, alias="ERRANDS_MAX_SUBTASKS")
    """Most subtasks one ``delegate`` call may start."""
    max_repairs: int = Field(default=3, ge=0, le=20, alias="ERRANDS_MAX_REPAIRS")
    """Repairs of a rejected control call per slot (3: four attempts; 0: none)."""
    same_failure_rounds: int = Field(default=3, ge=1, le=100, alias="ERRANDS_SAME_FAILURE_ROUNDS")
    """Rounds in a row whose branches all failed the same way before the next round is final."""
    deadline_seconds: Seconds = Field(default=6 * 3600.0, alias="ERRANDS_DEADLINE")
    """Wall-clock time of a task after which its next round is final (e.g. ``6h``)."""
    max_output_tokens: int = Field(
        default=4096, ge=1, le=1_000_000, alias="ERRANDS_MAX_OUTPUT_TOKENS"
    )
    """Most output tokens of one model call of the main agent or a branch."""
    model_timeout_seconds: Seconds = Field(default=300.0, alias="ERRANDS_MODEL_TIMEOUT")
    """Start-to-close timeout of one model call (e.g. ``5m``)."""
    model_max_attempts: int = Field(default=6, ge=1, le=100, alias="ERRANDS_MODEL_MAX_ATTEMPTS")
    """Attempts of one model call on transient errors before the slot gives up."""
    heartbeat_timeout_seconds: Seconds = Field(default=30.0, alias="ERRANDS_HEARTBEAT_TIMEOUT")
    """Heartbeat timeout of model and tool activities (e.g. ``30s``).

    A killed worker's call is retried elsewhere this soon, not after ERRANDS_MODEL_TIMEOUT."""
    streaming: bool = Field(default=True, alias="ERRANDS_STREAMING")
    """Stream the model calls of rounds and branches, publishing their text to the event log as
    it is written (``reply_delta``).

    ``false``: one whole response per call, for a server whose streaming is broken."""
    tool_timeout_seconds: Seconds = Field(default=120.0, alias="ERRANDS_TOOL_TIMEOUT")
    """How long one work-tool call may run before it is stopped and reported (e.g. ``2m``)."""
    tool_max_attempts: int = Field(default=3, ge=1, le=100, alias="ERRANDS_TOOL_MAX_ATTEMPTS")
    """Attempts of one work-tool call whose server cannot be reached or whose worker died."""
    model_task_queue: str | None = Field(default=None, alias="ERRANDS_MODEL_TASK_QUEUE")
    """Task queue of the model activities; ``{provider}`` in it becomes the model's provider.

    E.g. ``errands-models-{provider}``. Workers started with it poll it too, with that
    provider's ``queue_rate`` (ERRANDS_PROVIDER_LIMITS). Unset: ERRANDS_TASK_QUEUE."""
    round_retry_limit: int = Field(default=5, ge=1, le=100, alias="ERRANDS_ROUND_RETRY_LIMIT")
    """Times a round that failed as transient is retried before the task fails."""
    round_retry_seconds: Seconds = Field(default=30.0, alias="ERRANDS_ROUND_RETRY_DELAY")
    """First wait before a transient round is retried; it doubles each time (e.g. ``30s``)."""
    ask_timeout_seconds: Seconds = Field(default=24 * 3600.0, alias="ERRANDS_ASK_TIMEOUT")
    """How long a question waits for the user before the model is told no one answered."""
    advisor_limit: int = Field(default=3, ge=1, le=100, alias="ERRANDS_ADVISOR_LIMIT")
    """Successful advisor consultations per task; failed ones do not count."""
    side_question_timeout_seconds: Seconds = Field(
        default=180.0, alias="ERRANDS_SIDE_QUESTION_TIMEOUT"
    )
    """How long a side question may take to be answered (e.g. ``3m``)."""
    max_history_events: int = Field(
        default=1500, ge=100, le=10_000, alias="ERRANDS_MAX_HISTORY_EVENTS"
    )
    """A task's run continues as new past this many history events.

    At most 10,000: inside Temporal's 10,240-event warning."""

    # -- operating it ------------------------------------------------------------------------

    provider_limits: str | None = Field(default=None, alias="ERRANDS_PROVIDER_LIMITS")
    """Requests one worker sends a provider (or model) at once and per minute, as JSON.

    {"openai": {"concurrency": 4, "rpm": 500}, "openai:gpt-4.1": {"concurrency": 2}}; a
    provider may add "queue_rate" (model activities per second, across workers)."""

    api_token: SecretStr | None = Field(default=None, alias="ERRANDS_API_TOKEN")
    """Bearer token the HTTP gateway requires; needed to serve beyond loopback."""
    log_level: str = Field(default="INFO", alias="ERRANDS_LOG_LEVEL")
    """Log level of workers and the gateway: DEBUG, INFO, WARNING, ERROR or CRITICAL."""
    log_json: bool = Field(default=False, alias="ERRANDS_LOG_JSON")
    """One JSON object per log line, with task_id, round and branch when a line has them.

    deploy/ turns it on. Off: text lines with the ids in brackets."""
    metrics_bind: str | None = Field(default=None, alias="ERRANDS_METRICS_BIND")
    """``IP:port`` where a worker serves the Temporal SDK's Prometheus metrics.

    E.g. ``127.0.0.1:9464``; ``0.0.0.0:9464`` in a container. Unset: no endpoint."""
    otel: bool = Field(default=False, alias="ERRANDS_OTEL")
    """Trace tasks with OpenTelemetry through temporalio's interceptor (the ``otel`` extra)."""

    # -- checks: each ValueError says what the variable accepts ------------------------------

    @field_validator("temporal_address")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        host, _, port = (value or "").rpartition(":")
        if value is not None and not (_HOST.fullmatch(host) and _is_port(port)):
            raise ValueError(
                "give host:port without a scheme, e.g. localhost:7233, temporal:7233 or "
                "[::1]:7233 (port 1-65535)"
            )
        return value

    @field_validator("metrics_bind")
    @classmethod
    def _ip_port(cls, value: str | None) -> str | None:
        if value is not None and not _is_ip_port(value):
            raise ValueError(
                "give IP:port, e.g. 127.0.0.1:9464, 0.0.0.0:9464 in a container, or [::1]:9464 "
                "(an IP address, not a host name; port 1-65535)"
            )
        return value

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        if value.strip().upper() not in LOG_LEVELS:
            raise ValueError("give DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return value.strip().upper()

    @field_validator("model", "fallback_model", "advisor_model", "side_question_model")
    @classmethod
    def _model_spec(cls, value: str | None) -> str | None:
        if value is not None:
            check_model_spec(value)
        return value

    @field_validator("openai_base_url", "anthropic_base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"https?://[^\s/]+\S*", value):
            raise ValueError("give an http:// or https:// URL, e.g. http://127.0.0.1:8000/v1")
        return value

    @field_validator("subtask_types")
    @classmethod
    def _subtask_types(cls, value: str | None) -> str | None:
        for path in filter(None, (p.strip() for p in (value or "").split(","))):
            module, _, attribute = path.partition(":")
            if not (_IDENTIFIERS.fullmatch(module) and attribute.isidentifier()):
                raise ValueError(
                    f"{path!r} is not a package.module:attribute path; give comma-separated "
                    "paths like mypackage.types:TYPES"
                )
        return value

    @field_validator("prices")
    @classmethod
    def _prices(cls, value: str | None) -> str | None:
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

    @field_validator("mcp_servers")
    @classmethod
    def _mcp_servers(cls, value: str | None) -> str | None:
        try:
            parse_mcp_servers(value)
        except ValueError as error:
            raise ValueError(f"it {str(error).removeprefix('ERRANDS_MCP_SERVERS ')}") from None
        return value

    @field_validator("provider_limits")
    @classmethod
    def _provider_limits(cls, value: str | None) -> str | None:
        provider_limits(value)
        return value

    @field_validator("model_task_queue")
    @classmethod
    def _model_task_queue(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"([^\s{}]|\{provider\})+", value):
            raise ValueError(
                "give a task queue name without spaces or braces; {provider} in it becomes "
                "the model's provider, e.g. errands-models-{provider}"
            )
        return value

    @field_validator("models")
    @classmethod
    def _models(cls, value: str | None) -> str | None:
        try:
            model_catalog(value)
        except ValueError as error:
            raise ValueError(f"it {str(error).removeprefix('ERRANDS_MODELS ')}") from None
        return value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        if value is not None:
            # Imported here: the store imports psycopg (~50 ms), which only a set URL should cost.
            from errands.adapters.store import sqlite_path

            sqlite_path(value)
        return value

    # -- what the rest of errands reads ------------------------------------------------------

    def session_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'sessions.db').resolve()}"

    def temporal_ui(self) -> str | None:
        """The Temporal UI's base URL (no trailing slash), or None when there is none to link."""
        if self.temporal_ui_url is not None:
            return str(self.temporal_ui_url).rstrip("/")
        if self.temporal_address:
            return None
        return f"http://127.0.0.1:{self.dev_ui_port}"

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

    def round_settings(self) -> RoundSettings:
        """The task constants a frontend puts in a task's input (a running task keeps them)."""
        return RoundSettings(
            max_subtasks=self.max_subtasks,
            max_repairs=self.max_repairs,
            step_budget=self.step_budget,
            branch_step_limit=self.branch_step_limit,
            same_failure_rounds=self.same_failure_rounds,
            deadline_seconds=self.deadline_seconds,
            max_output_tokens=self.max_output_tokens,
            model_timeout_seconds=self.model_timeout_seconds,
            model_max_attempts=self.model_max_attempts,
            heartbeat_timeout_seconds=self.heartbeat_timeout_seconds,
            tool_timeout_seconds=self.tool_timeout_seconds,
            tool_max_attempts=self.tool_max_attempts,
            model_task_queue=self.model_task_queue,
            round_retry_limit=self.round_retry_limit,
            round_retry_seconds=self.round_retry_seconds,
            ask_timeout_hours=self.ask_timeout_seconds / 3600,
            advisor_limit=self.advisor_limit,
            side_question_timeout_seconds=self.side_question_timeout_seconds,
            max_history_events=self.max_history_events,
        )

    def mcp(self) -> dict[str, McpServerConfig]:
        """``ERRANDS_MCP_SERVERS`` by server name."""
        return parse_mcp_servers(self.mcp_servers)

    def limits(self) -> dict[str, ProviderLimit]:
        """``ERRANDS_PROVIDER_LIMITS`` by provider or ``provider:model``."""
        return provider_limits(self.provider_limits)

    def model_task_queues(self) -> dict[str, float | None]:
        """The model task queues a worker polls (ERRANDS_MODEL_TASK_QUEUE for each provider)
        and the rate each is limited to (None: unlimited); empty when the setting is unset."""
        if not self.model_task_queue:
            return {}
        limits = self.limits()
        queues: dict[str, float | None] = {}
        for provider in MODEL_PROVIDERS:
            queue = model_queue(self.model_task_queue, provider)
            assert queue is not None
            limit = limits.get(provider)
            rate = limit.queue_rate if limit else None
            known = queues.get(queue)
            # One queue for several providers: the strictest of their rates.
            queues[queue] = rate if known is None else known if rate is None else min(known, rate)
        return queues

    def report(self) -> dict[str, dict[str, Any]]:
        """Every setting by its variable: ``value`` (JSON-able; secrets masked), ``default``
        (True when no variable or flag set it) and ``doc`` (its docstring's first line, plain)."""
        return {
            info.alias or name: {
                "value": _shown_value(name, getattr(self, name)),
                "default": name not in self.model_fields_set,
                "doc": (info.description or "").partition("\n")[0].replace("``", ""),
            }
            for name, info in type(self).model_fields.items()
        }


_FIELD_OF = {
    key: name for name, info in Settings.model_fields.items() for key in (name, info.alias or name)
}
"""Field name by variable name or field name: what ``load_settings`` and errors may use."""
_SECRETS = {"openai_api_key", "anthropic_api_key", "api_token"}
_URLS = {"database_url", "openai_base_url", "anthropic_base_url"}


def load_settings(**overrides: object) -> Settings:
    """The settings from the environment, with ``overrides`` on top (by variable or field name;
    None: not given). ``ConfigError`` naming every bad variable and what it accepts."""
    unknown = sorted(set(overrides) - _FIELD_OF.keys())
    if unknown:
        raise TypeError(f"load_settings() got unknown settings: {', '.join(unknown)}")
    values: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**values)
    except ValidationError as error:
        # `from None`: the pydantic error repeats every bad input, secrets included.
        raise _config_error(error) from None


def render_report(report: dict[str, dict[str, Any]]) -> str:
    """``report`` as aligned lines: ``VARIABLE  value  (default)  — doc``."""
    values = {var: _text(entry["value"]) for var, entry in report.items()}
    name_width = max(map(len, report), default=0)
    value_width = min(max(map(len, values.values()), default=0), 40)
    return "\n".join(
        f"{var:<{name_width}}  {values[var]:<{value_width}}  "
        f"{'(default)' if entry['default'] else '':<9}  — {entry['doc']}".rstrip(" —")
        for var, entry in report.items()
    )


def environ_has_temporal() -> bool:
    return bool(os.environ.get("TEMPORAL_ADDRESS"))


# -- helpers -------------------------------------------------------------------------------


def _config_error(error: ValidationError) -> ConfigError:
    problems: dict[str, str] = {}
    for detail in error.errors():
        variable, problem = _problem(detail)
        problems.setdefault(variable, problem)
    them = "it" if len(problems) == 1 else "them"
    message = " ".join(f"{'; '.join(problems.values())}; fix or unset {them}".split())
    return ConfigError(message, setting=next(iter(problems)) if len(problems) == 1 else None)


def _problem(detail: ErrorDetails) -> tuple[str, str]:
    key = str(detail["loc"][0]) if detail["loc"] else "settings"
    name = _FIELD_OF.get(key, key)
    info = Settings.model_fields.get(name)
    variable = (info.alias if info else None) or key
    given = "" if name in _SECRETS else f"={_compact(_shown_value(name, detail['input']))}"
    reason = (_accepts(info) if info else "") or _reason(detail)
    return variable, f"{variable}{given} is not allowed: {reason}"


def _accepts(info: FieldInfo) -> str:
    """What a number, a duration or a flag accepts, from its type and bounds ("" otherwise)."""
    low = next((m.ge for m in info.metadata if isinstance(m, Ge)), None)
    high = next((m.le for m in info.metadata if isinstance(m, Le)), None)
    if _SECONDS in info.metadata:
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


def _reason(detail: ErrorDetails) -> str:
    """A validator's own message (it says what is accepted), else pydantic's."""
    error = (detail.get("ctx") or {}).get("error")
    return str(error) if error is not None else detail["msg"].lower()


def _shown_value(name: str, value: Any) -> Any:
    """``value`` fit to print: secrets masked, a URL's password hidden, JSON-able."""
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if name in _SECRETS and value is not None:
        return f"****{value[-4:]}" if len(str(value)) >= 16 else "set"
    if name == "mcp_servers" and value is not None:
        # Headers and env may hold secrets: only each server's transport is shown.
        servers = parse_mcp_servers(value)
        return {n: "command" if c.command else "url" for n, c in servers.items()}
    if name in _URLS and isinstance(value, str):
        return _without_password(value)
    if isinstance(value, Path):
        return str(value)
    return value


def _without_password(url: str) -> str:
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url if "@" not in url else "****"
    query = parse_qsl(parts.query, keep_blank_values=True)
    if password is None and not any(key.lower() == "password" for key, _ in query):
        return url
    netloc = parts.netloc.replace(f":{password}@", ":****@", 1) if password else parts.netloc
    query = [(key, "****" if key.lower() == "password" else v) for key, v in query]
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query, safe="*")))


def _compact(value: Any) -> str:
    text = str(value)
    if len(text) > 60:
        text = text[:59] + "…"
    return text if re.fullmatch(r"\S+", text) else repr(text)


def _text(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _is_port(text: str) -> bool:
    return text.isdigit() and 0 < int(text) < 65536


def _is_ip_port(text: str) -> bool:
    host, _, port = text.rpartition(":")
    try:
        if host.startswith("[") and host.endswith("]"):
            ipaddress.IPv6Address(host[1:-1])
        else:
            ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return _is_port(port)
