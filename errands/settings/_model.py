"""``Settings``: every setting of errands as one pydantic-settings model, by its environment
variable, each field with its docstring (``errands config`` and docs/configuration.md show it)
and a check whose ``ValueError`` says what the variable accepts."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, cast

from pydantic import (
    Field,
    HttpUrl,
    PrivateAttr,
    SecretStr,
)
from pydantic_settings import SettingsConfigDict

from errands.adapters.mcp.config import McpServerConfig, parse_mcp_servers
from errands.adapters.temporal_profile import resolve
from errands.agent.quotas import Quota, parse_quotas
from errands.agent.validation import DEMO_MODEL
from errands.contracts.workflows import RoundSettings
from errands.errors import ErrandsError
from errands.settings._checks import SettingsChecks
from errands.settings._parse import (
    Port,
    ProviderLimit,
    Seconds,
    model_task_queues,
    provider_limits,
    round_settings,
    shown_value,
    state_keys,
)


class Settings(SettingsChecks):
    """Every setting, by its environment variable. Built by ``load_settings``."""

    model_config = SettingsConfigDict(
        env_prefix="",
        extra="ignore",
        populate_by_name=True,
        env_ignore_empty=True,
        use_attribute_docstrings=True,
    )
    _flags = cast("frozenset[str]", PrivateAttr(default_factory=frozenset))  # given_as_flags()

    # -- where things are --------------------------------------------------------------------

    temporal_address: str | None = Field(default=None, alias="TEMPORAL_ADDRESS")
    """Where the Temporal frontend listens, as ``host:port`` (``--address`` wins over it).

    Unset: the TEMPORAL_PROFILE profile's address; with none, a server on
    127.0.0.1:<ERRANDS_DEV_PORT> if one listens, else the CLI starts the embedded dev server."""
    temporal_namespace: str = Field(default="default", min_length=1, alias="TEMPORAL_NAMESPACE")
    """The Temporal namespace tasks run in (``--namespace`` wins over it).

    Unset: the TEMPORAL_PROFILE profile's namespace, else ``default``."""
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

    Unset: the embedded dev server's UI (``http://127.0.0.1:<ERRANDS_DEV_UI_PORT>``) when no
    Temporal is configured (no TEMPORAL_ADDRESS, no profile address), else no link."""

    # -- a secured cluster: read through temporalio.envconfig (docs/operations.md) -----------

    temporal_config_file: Path | None = Field(default=None, alias="TEMPORAL_CONFIG_FILE")
    """The ``temporal.toml`` whose profile gives the connection (Temporal's own format;
    ``--config-file`` wins over it).

    Unset: Temporal's default file (``~/.config/temporalio/temporal.toml``) if it exists;
    ``/dev/null``: no file, so the embedded dev server when nothing else names a server."""
    temporal_profile: str | None = Field(default=None, alias="TEMPORAL_PROFILE")
    """The profile of that file to use (``--profile`` wins over it); unset: ``default``."""
    temporal_api_key: SecretStr | None = Field(default=None, alias="TEMPORAL_API_KEY")
    """API key sent to Temporal (Temporal Cloud, or a proxy that checks one); turns TLS on."""
    temporal_tls: bool | None = Field(default=None, alias="TEMPORAL_TLS")
    """Reach Temporal over TLS (``true``/``false``).

    Unset: on when an API key or any TLS file is given, else off."""
    temporal_tls_client_cert_path: Path | None = Field(
        default=None, alias="TEMPORAL_TLS_CLIENT_CERT_PATH"
    )
    """The client certificate (PEM) for mTLS; needs TEMPORAL_TLS_CLIENT_KEY_PATH."""
    temporal_tls_client_key_path: Path | None = Field(
        default=None, alias="TEMPORAL_TLS_CLIENT_KEY_PATH"
    )
    """The client certificate's private key (PEM)."""
    temporal_tls_server_ca_cert_path: Path | None = Field(
        default=None, alias="TEMPORAL_TLS_SERVER_CA_CERT_PATH"
    )
    """The CA (PEM) that signed the server's certificate; unset: the system's roots."""
    temporal_tls_server_name: str | None = Field(default=None, alias="TEMPORAL_TLS_SERVER_NAME")
    """The name the server's certificate must carry, when it differs from the address's host."""

    # -- what users write is theirs (DESIGN invariant 12) -----------------------------------

    encryption_keys: SecretStr | None = Field(default=None, alias="ERRANDS_ENCRYPTION_KEYS")
    """AES-256 keys that encrypt every payload errands writes to Temporal, as ``id=BASE64,…``.

    The first encrypts; every one listed decrypts, so a new key goes first and an old one stays
    until no task needs it. Each key is 32 random bytes in base64, after its id:
    ``k1=$(python -c "import base64, os; print(base64.b64encode(os.urandom(32)).decode())")``.
    Unset: payloads are not encrypted."""
    encryption_keys_file: Path | None = Field(default=None, alias="ERRANDS_ENCRYPTION_KEYS_FILE")
    """A file holding the keys in the same form (a mounted secret); instead of the variable."""
    codec_cors_origins: str | None = Field(default=None, alias="ERRANDS_CODEC_CORS_ORIGINS")
    """Origins of the Temporal UI allowed to call ``errands codec-server``, comma-separated.

    Unset: the Temporal UI errands links (ERRANDS_TEMPORAL_UI_URL, or the embedded one)."""

    # -- versioned upgrades (docs/operations.md "Releasing a new version") -------------------

    deployment_name: str | None = Field(default=None, alias="ERRANDS_DEPLOYMENT_NAME")
    """The worker deployment workers belong to (Temporal Worker Versioning).

    A worker needs ERRANDS_BUILD_ID too: tasks stay on the version that started them and move to
    a new current version between rounds; alone, it is the deployment ``errands upgrade`` looks
    in. Unset: workers are unversioned."""
    build_id: str | None = Field(default=None, alias="ERRANDS_BUILD_ID")
    """This worker's build within ERRANDS_DEPLOYMENT_NAME, e.g. a release or a commit."""

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
    """An OpenAI-compatible server to use instead of api.openai.com (``http(s)://…/v1``).

    Any Chat Completions server with tool calling: vLLM, Ollama, llama.cpp, gateways (the user
    guide's "Local model servers" says how to start them)."""
    anthropic_api_key: SecretStr | None = Field(default=None, alias="ANTHROPIC_API_KEY")
    """API key of ``anthropic:`` models; read on the worker."""
    anthropic_base_url: str | None = Field(default=None, alias="ANTHROPIC_BASE_URL")
    """An Anthropic-compatible server to use instead of api.anthropic.com (``http(s)://…``)."""
    prices: str | None = Field(default=None, alias="ERRANDS_PRICES")
    """Extra or changed prices, as JSON, on top of errands.agent.pricing.DEFAULT_PRICES.

    ``{"provider:model": {"input": …, "output": …, "cached": …}}`` in USD per million tokens."""
    models: str | None = Field(default=None, alias="ERRANDS_MODELS")
    """What errands should know about models, as JSON, on top of the model catalog.

    ``{"provider:model pattern": {"context_window": …, "max_output": …, "temperature": …}}``,
    e.g. ``{"openai:my-local": {"context_window": 16000, "max_output": 2048}}``; also
    ``output_limit`` (``max_tokens``, ``max_completion_tokens`` or ``both``),
    ``reasoning_tokens`` and ``prompt_cache``. A model the catalog does not know gets a
    32,000-token window and 4,096 output tokens."""
    subtask_types: str | None = Field(default=None, alias="ERRANDS_SUBTASK_TYPES")
    """Extra subtask types: comma-separated ``package.module:attribute`` paths.

    The worker imports them when it starts; each attribute is a SubtaskType or a list of them."""
    mcp_servers: str | None = Field(default=None, alias="ERRANDS_MCP_SERVERS")
    """MCP servers whose tools the agents may call, as JSON by server name
    (errands.adapters.mcp.config).

    ``{"name": {"command": [...], "env": {...}}}`` or ``{"name": {"url": "…", "headers":
    {...}}}``, with optional ``tools`` (an allow list), ``for`` (``main``, ``*`` or subtask type
    keys), ``approval``, ``timeout_seconds``, ``session`` (``shared``, ``task``, ``branch``),
    ``idle_seconds`` and ``list_ttl_seconds``; read by the worker only (docs/guide.md)."""
    mcp_max_processes: int = Field(default=32, ge=1, le=4096, alias="ERRANDS_MCP_MAX_PROCESSES")
    """Most MCP server processes (stdio) one worker keeps running, sessions included."""

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
    tool_timeout_seconds: Seconds = Field(default=120.0, alias="ERRANDS_TOOL_TIMEOUT")
    """How long one work-tool call may run before it is stopped and reported (e.g. ``2m``)."""
    tool_max_attempts: int = Field(default=3, ge=1, le=100, alias="ERRANDS_TOOL_MAX_ATTEMPTS")
    """Attempts of one work-tool call whose server cannot be reached or whose worker died."""
    tool_result_percent: int = Field(default=25, ge=1, le=100, alias="ERRANDS_TOOL_RESULT_PERCENT")
    """Percent of a model's input budget one work-tool result may take in a request.

    A bigger result is shown in the request that follows it as its head and tail, how much was
    left out, and the ``read_message`` call that pages through the rest."""
    tool_result_max_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=64 * 1024,
        le=256 * 1024 * 1024,
        alias="ERRANDS_TOOL_RESULT_MAX_BYTES",
    )
    """Most UTF-8 bytes of one work-tool result errands reads and stores (e.g. ``4194304``).

    A longer result is cut to this size, and the stored text says so to the model; an MCP
    server's answer is read no further than about this much."""
    model_task_queue: str | None = Field(default=None, alias="ERRANDS_MODEL_TASK_QUEUE")
    """Task queue of the model activities; ``{provider}`` in it becomes the model's provider.

    E.g. ``errands-models-{provider}``. Workers started with it poll it too, with that
    provider's ``queue_rate`` (ERRANDS_PROVIDER_LIMITS; "Rate limits" in docs/operations.md).
    Unset: ERRANDS_TASK_QUEUE."""
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

    # -- many users: principals, ownership, quotas (SPEC §10, docs/security.md) -------------

    oidc_issuer: str | None = Field(default=None, alias="ERRANDS_OIDC_ISSUER")
    """Issuer of the OIDC bearer JWTs the gateway accepts, e.g. ``https://login.example.com``.

    Its keys come from the issuer's discovery document (or ERRANDS_OIDC_JWKS_URL). Needs
    ERRANDS_OIDC_AUDIENCE. Unset: no JWTs, only errands API keys and ERRANDS_API_TOKEN."""
    oidc_audience: str | None = Field(default=None, alias="ERRANDS_OIDC_AUDIENCE")
    """The ``aud`` a JWT must carry to be accepted (the gateway's client id or API name)."""
    oidc_jwks_url: str | None = Field(default=None, alias="ERRANDS_OIDC_JWKS_URL")
    """Where the issuer's signing keys are, when not in its discovery document.

    Cached; fetched again when a JWT names a key id the cache lacks."""
    oidc_principal_claim: str = Field(default="sub", alias="ERRANDS_OIDC_PRINCIPAL_CLAIM")
    """The JWT claim that names the principal (``sub``, or e.g. ``email``)."""
    oidc_role_claim: str = Field(default="errands_role", alias="ERRANDS_OIDC_ROLE_CLAIM")
    """The JWT claim holding the principal's role (``user``, ``approver`` or ``admin``, or a list
    of roles: the highest counts). Absent from a token: ``user``."""
    quotas: str | None = Field(default=None, alias="ERRANDS_QUOTAS")
    """Limits per principal id, ``role:ROLE`` or ``*``, as JSON.

    ``{"*": {"running_tasks": 5, "starts_per_hour": 60, "cost_per_day_usd": 20}}``; each limit
    from the most specific entry that sets it. Over one, a start is refused (HTTP 429), and a
    task past its owner's daily cost takes a final round at the next boundary. Unset: none."""

    # -- operating it ------------------------------------------------------------------------

    provider_limits: str | None = Field(default=None, alias="ERRANDS_PROVIDER_LIMITS")
    """Requests one worker sends a provider (or model) at once and per minute, as JSON.

    ``{"openai": {"concurrency": 4, "rpm": 500}, "openai:gpt-4.1": {"concurrency": 2}}``; a
    provider may add ``queue_rate`` (model activities per second, across workers)."""

    api_token: SecretStr | None = Field(default=None, alias="ERRANDS_API_TOKEN")
    """Bearer token the HTTP gateway requires; needed to serve beyond loopback.

    At least 43 characters: ``python -c "import secrets; print(secrets.token_urlsafe(32))"``."""
    allowed_hosts: str | None = Field(default=None, alias="ERRANDS_ALLOWED_HOSTS")
    """``Host`` names the gateway answers to besides its own address, comma-separated.

    E.g. ``errands.example.com`` behind a proxy, or ``*`` for any (only with ERRANDS_API_TOKEN).
    Unset: its own address (and 127.0.0.1, localhost, [::1] on loopback); others are refused."""
    mcp_state_keys: SecretStr | None = Field(default=None, alias="ERRANDS_MCP_STATE_KEYS")
    """Keys every gateway replica shares to seal the state of MCP forms, comma-separated.

    The first seals, each unseals (docs/mcp-server.md). Unset: a key of the process alone."""
    forwarded_allow_ips: str | None = Field(default=None, alias="ERRANDS_FORWARDED_ALLOW_IPS")
    """Proxies whose ``X-Forwarded-For`` names the client, comma-separated: ``10.0.0.0/8``.

    Wrong tokens then slow that client, not all behind the proxy. Unset: no proxy is trusted."""
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
    streaming: bool = Field(default=True, alias="ERRANDS_STREAMING")
    """Stream the model calls of rounds and branches, publishing their text to the event log as
    it is written (``reply_delta``).

    ``false``: one whole response per call, for a server whose streaming is broken."""

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
        with contextlib.suppress(ErrandsError):  # unreadable: the connection will say why
            if not resolve(self).configured:  # nor a profile names a server
                return f"http://127.0.0.1:{self.dev_ui_port}"
        return None

    def given_as_flags(self) -> frozenset[str]:
        """Fields given by flags (``load_settings``' overrides), not by variables."""
        return frozenset(self._flags)

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
        return round_settings(self)

    def quota_table(self) -> dict[str, Quota]:
        """``ERRANDS_QUOTAS``, parsed (``errands.agent.quotas``)."""
        return parse_quotas(self.quotas)

    def mcp(self) -> dict[str, McpServerConfig]:
        """``ERRANDS_MCP_SERVERS`` by server name."""
        return parse_mcp_servers(self.mcp_servers)

    def state_keys(self) -> list[str]:
        """``ERRANDS_MCP_STATE_KEYS``, the sealing key first; empty when unset."""
        return state_keys(self.mcp_state_keys)

    def limits(self) -> dict[str, ProviderLimit]:
        """``ERRANDS_PROVIDER_LIMITS`` by provider or ``provider:model``."""
        return provider_limits(self.provider_limits)

    def model_task_queues(self) -> dict[str, float | None]:
        """The model task queues a worker polls (ERRANDS_MODEL_TASK_QUEUE for each provider)
        and the rate each is limited to (None: unlimited); empty when the setting is unset."""
        return model_task_queues(self.model_task_queue, self.limits())

    def report(self) -> dict[str, dict[str, Any]]:
        """Every setting by its variable: ``value`` (JSON-able; secrets masked), ``default``
        (True when no variable or flag set it) and ``doc`` (its docstring's first line, plain)."""
        return {
            info.alias or name: {
                "value": shown_value(name, getattr(self, name)),
                "default": name not in self.model_fields_set,
                "doc": (info.description or "").partition("\n")[0].replace("``", ""),
            }
            for name, info in type(self).model_fields.items()
        }
