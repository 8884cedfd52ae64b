"""Which Temporal errands reaches, and why: the connection resolved through
``temporalio.envconfig`` from flags, ``TEMPORAL_*`` variables and a ``temporal.toml`` profile,
with where each value came from.

Precedence (Temporal's own, with flags on top): a flag, then a ``TEMPORAL_*`` variable, then the
profile (``TEMPORAL_PROFILE``, default ``default``, of ``TEMPORAL_CONFIG_FILE`` or Temporal's
default file), then errands' default: the embedded dev server. Envconfig gets as its environment
every ``TEMPORAL_*`` variable of the process (``TEMPORAL_GRPC_META_*``, the ``*_DATA`` forms of
the TLS material, …) with the settings' values on top (which a flag or ``load_settings``'
overrides may have given), so what it merges is what Temporal's CLI would use, plus the flags.
``TEMPORAL_CONFIG_FILE=/dev/null`` reads no file at all (as in Temporal's CLI).
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.envconfig import ClientConfig, ClientConfigProfile, DataSource

from errands.errors import ConfigError

if TYPE_CHECKING:
    from errands.settings import Settings

VARIABLES = {
    "address": "TEMPORAL_ADDRESS",
    "namespace": "TEMPORAL_NAMESPACE",
    "api_key": "TEMPORAL_API_KEY",
    "tls": "TEMPORAL_TLS",
    "server_name": "TEMPORAL_TLS_SERVER_NAME",
    "server_ca_cert": "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    "client_cert": "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "client_key": "TEMPORAL_TLS_CLIENT_KEY_PATH",
}
"""Each part of a connection by the variable that sets it."""
DATA_VARIABLES = {
    "server_ca_cert": "TEMPORAL_TLS_SERVER_CA_CERT_DATA",
    "client_cert": "TEMPORAL_TLS_CLIENT_CERT_DATA",
    "client_key": "TEMPORAL_TLS_CLIENT_KEY_DATA",
}
"""The TLS material given as the PEM itself rather than a path (envconfig reads them; the
settings do not hold them)."""
OWN_VARIABLES = frozenset({*VARIABLES.values(), "TEMPORAL_CONFIG_FILE", "TEMPORAL_PROFILE"})
"""The variables the settings read: envconfig gets the settings' values for these, never the
process's (a flag or an override may have replaced them)."""
FIELDS = {
    "address": "temporal_address",
    "namespace": "temporal_namespace",
    "api_key": "temporal_api_key",
    "tls": "temporal_tls",
    "server_name": "temporal_tls_server_name",
    "server_ca_cert": "temporal_tls_server_ca_cert_path",
    "client_cert": "temporal_tls_client_cert_path",
    "client_key": "temporal_tls_client_key_path",
}
"""Each part by its field of the settings."""
PROFILE_KEYS = {
    "address": "address",
    "namespace": "namespace",
    "api_key": "api_key",
    "tls": "tls.disabled",
    "server_name": "tls.server_name",
    "server_ca_cert": "tls.server_ca_cert_path",
    "client_cert": "tls.client_cert_path",
    "client_key": "tls.client_key_path",
}
"""Each part by its key in a ``temporal.toml`` profile (Temporal's format)."""
FLAGS = {"address": "--address", "namespace": "--namespace"}


@dataclass(frozen=True)
class Connection:
    """How to reach Temporal, each part with where it came from (``sources``: ``flag --x``,
    ``TEMPORAL_X``, ``profile P in FILE`` or ``default``)."""

    address: str | None
    """None: nothing configured it, so errands uses the embedded dev server."""
    namespace: str
    api_key: str | None = field(default=None, repr=False)
    tls: bool = False
    server_name: str | None = None
    server_ca_cert: DataSource | None = None
    """A Path (a file to read) or the PEM itself (a profile's ``*_data``)."""
    client_cert: DataSource | None = None
    client_key: DataSource | None = field(default=None, repr=False)
    rpc_metadata: Mapping[str, str] = field(default_factory=dict, repr=False)
    """gRPC headers (``TEMPORAL_GRPC_META_*``, a profile's ``grpc_meta``); may carry secrets."""
    sources: Mapping[str, str] = field(default_factory=dict)
    profile: str | None = None
    """``profile NAME in FILE`` when a profile was read."""

    @property
    def configured(self) -> bool:
        """Whether a flag, a variable or a profile named a server (else: the embedded one)."""
        return self.address is not None

    def source(self, part: str) -> str:
        return self.sources.get(part, "default")

    def entry(self, part: str) -> str:
        """What to fix for ``part``, as a person would find it: a flag, a variable, or a key of
        the profile in its file; a part nobody set is named by its variable."""
        source = self.source(part)
        if source.startswith("flag "):
            return source.removeprefix("flag ")
        if source.startswith("profile "):
            return f"{_profile_key(part, getattr(self, part, None))} of {source}"
        if source.startswith("TEMPORAL_"):
            return source
        return VARIABLES[part]

    def report(self) -> dict[str, dict[str, Any]]:
        """Each part with its value (the API key masked, a PEM given inline as ``inline``) and
        its source: what ``errands config`` shows."""
        values: dict[str, Any] = {
            "address": self.address or "the embedded dev server",
            "namespace": self.namespace,
            "tls": self.tls,
            "server_name": self.server_name,
            "server_ca_cert": _shown_source(self.server_ca_cert),
            "client_cert": _shown_source(self.client_cert),
            "client_key": _shown_source(self.client_key),
            "api_key": _masked(self.api_key),
        }
        return {
            part: {"value": value, "source": self.source(part), "variable": self._variable(part)}
            for part, value in values.items()
        }

    def _variable(self, part: str) -> str:
        """The variable that sets ``part``: the ``*_DATA`` one when that gave it."""
        source = self.source(part)
        return source if source in DATA_VARIABLES.values() else VARIABLES[part]


def resolve(
    settings: Settings, *, address: str | None = None, namespace: str | None = None
) -> Connection:
    """The connection ``settings`` describe, with ``address`` and ``namespace`` as flags over
    them. ``ConfigError`` for a config file or profile that cannot be read; the TLS material
    itself is checked when connecting (``tls_config``), so ``errands config`` still shows it."""
    file = _config_file(settings)
    name = settings.temporal_profile or "default"
    where = f"profile {name} in {file}" if file else None
    from_profile = _load(settings, file, {}, disable_env=True)
    flags = settings.given_as_flags()
    given = {k: v for k, v in os.environ.items() if k.startswith("TEMPORAL_")}
    given = {k: v for k, v in given.items() if k not in OWN_VARIABLES}
    sources = {part: name for part, name in DATA_VARIABLES.items() if name in given}
    for part, field_name in FIELDS.items():
        value = getattr(settings, field_name)
        if value is None or field_name not in settings.model_fields_set:
            continue
        if hasattr(value, "get_secret_value"):
            value = value.get_secret_value()
        given[VARIABLES[part]] = str(value).lower() if isinstance(value, bool) else str(value)
        sources[part] = f"flag {_flag(part)}" if field_name in flags else VARIABLES[part]
    for part, value in (("address", address), ("namespace", namespace)):
        if value is not None:
            given[VARIABLES[part]] = value
            sources[part] = f"flag {FLAGS[part]}"
    merged = _load(settings, file, given, disable_env=False)
    for part, value in _parts(from_profile).items():
        if value is not None and part not in sources and where:
            sources[part] = where
    tls_config = merged.tls
    api_key = merged.api_key
    tls = bool(api_key) or tls_config is not None
    if tls_config is not None and tls_config.disabled is not None:
        tls = not tls_config.disabled
    if tls and "tls" not in sources:
        sources["tls"] = _implied_tls(merged, sources, where)
    return Connection(
        address=merged.address or None,
        namespace=merged.namespace or settings.temporal_namespace,
        api_key=api_key or None,
        tls=tls,
        server_name=tls_config.server_name if tls_config else None,
        server_ca_cert=tls_config.server_root_ca_cert if tls_config else None,
        client_cert=tls_config.client_cert if tls_config else None,
        client_key=tls_config.client_private_key if tls_config else None,
        rpc_metadata=dict(merged.grpc_meta),
        sources=sources,
        profile=where,
    )


def embedded(address: str, settings: Settings) -> Connection:
    """The embedded dev server at ``address``: plain gRPC, no key, whatever else is set."""
    return Connection(
        address=address,
        namespace=settings.temporal_namespace,
        sources={"address": "the embedded dev server"},
    )


def is_loopback(address: str) -> bool:
    """Whether ``address`` (``host:port``, ``[v6]:port`` or a bare host) is this machine:
    127.0.0.0/8, ::1 or ``localhost``."""
    host = address.strip()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host[1:]
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_unconfigured(connection: Connection) -> None:
    """Refuse TLS material with no server to use it on (the embedded one takes none)."""
    parts = ("api_key", "client_cert", "client_key", "server_ca_cert")
    given = [p for p in parts if p in connection.sources]
    if given and not connection.configured:
        raise ConfigError(
            f"{connection.entry(given[0])} is set but no Temporal address is: set "
            "TEMPORAL_ADDRESS (or the profile's address, or --address) to the server it is for",
            setting="TEMPORAL_ADDRESS",
        )


def default_config_file() -> Path:
    """Where Temporal looks for ``temporal.toml`` when ``TEMPORAL_CONFIG_FILE`` is unset (the
    user's configuration directory, as Temporal's CLI and SDKs find it)."""
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    elif sys.platform == "win32":
        base = Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming")
    else:
        base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "temporalio" / "temporal.toml"


# -- helpers -------------------------------------------------------------------------------


def _config_file(settings: Settings) -> Path | None:
    file = settings.temporal_config_file
    if file is None:
        default = default_config_file()
        return default if default.is_file() else None
    if str(file) == os.devnull:
        return None  # Temporal's CLI reads it as an empty file: no profile, not even the default
    if not file.exists():
        raise ConfigError(
            f"TEMPORAL_CONFIG_FILE={file}: no such file; give the path of a temporal.toml "
            "(`temporal config set` writes one) or unset it",
            setting="TEMPORAL_CONFIG_FILE",
        )
    if not file.is_file() or not os.access(file, os.R_OK):
        raise ConfigError(
            f"TEMPORAL_CONFIG_FILE={file} is not a readable file; fix its permissions or the path",
            setting="TEMPORAL_CONFIG_FILE",
        )
    return file


def _load(
    settings: Settings, file: Path | None, env: dict[str, str], *, disable_env: bool
) -> ClientConfigProfile:
    if file is None and disable_env:
        if settings.temporal_profile:
            raise _profile_error(settings, None, ValueError("not found"))
        return ClientConfigProfile()
    try:
        return ClientConfigProfile.load(
            profile=settings.temporal_profile,
            config_source=file,
            disable_file=file is None,
            disable_env=disable_env,
            override_env_vars=env,
        )
    except Exception as error:  # noqa: BLE001  # the bridge's ConfigError (its own class)
        raise _profile_error(settings, file, error) from None


def _profile_error(settings: Settings, file: Path | None, error: Exception) -> ConfigError:
    reason = _reason(str(error))
    profile = settings.temporal_profile
    if profile and "not found" in reason:
        named = settings.temporal_config_file
        where = (
            str(file or named)
            if file or named
            else f"no temporal.toml (looked for {default_config_file()})"
        )
        known = _profiles(file)
        listed = f" (it has {', '.join(known)})" if known else ""
        return ConfigError(
            f"TEMPORAL_PROFILE={profile}: no such profile in {where}{listed}; name a profile "
            "of the file (or set TEMPORAL_CONFIG_FILE to the file that has it)",
            setting="TEMPORAL_PROFILE",
        )
    if "Cannot specify" in reason:
        return ConfigError(
            f"{reason.removeprefix('Invalid configuration: ')}: give each of the CA, the client "
            "certificate and its key one way only (a path or the PEM itself, *_PATH or *_DATA)",
            setting="TEMPORAL_CONFIG_FILE" if file else None,
        )
    shown = file or default_config_file()
    return ConfigError(
        f"cannot read the Temporal profile in {shown}: {reason}; fix the file "
        "(TEMPORAL_CONFIG_FILE) or point TEMPORAL_CONFIG_FILE at another one",
        setting="TEMPORAL_CONFIG_FILE",
    )


def _reason(text: str) -> str:
    """What envconfig said, as one line that never quotes the file: a TOML syntax error keeps
    its position and the parser's last clause (what it expected), not the line it quotes,
    which may hold an API key or a private key; a value the clause quotes is dropped too."""
    position = re.search(r"TOML parse error at line \d+, column \d+", text)
    if position is None:
        return " ".join(text.split())
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    if re.match(r"^\d*\s*\|", last) or position.group(0) in last:
        return position.group(0)
    clause = re.sub(r"\s*`([^`]*)`", _punctuation_only, last)
    return f"{position.group(0)}: {' '.join(clause.split())}"


def _punctuation_only(quoted: re.Match[str]) -> str:
    """A quoted token the parser expected (`=`, `]`) stays; a quoted value is dropped."""
    return quoted.group(0) if re.fullmatch(r"[^\w\s]{1,3}", quoted.group(1)) else ""


def _profiles(file: Path | None) -> list[str]:
    if file is None:
        return []
    try:
        return sorted(ClientConfig.load(config_source=file, override_env_vars={}).profiles)
    except Exception:  # noqa: BLE001  # the file's own error is reported elsewhere
        return []


def _parts(profile: ClientConfigProfile) -> dict[str, Any]:
    tls = profile.tls
    return {
        "address": profile.address,
        "namespace": profile.namespace,
        "api_key": profile.api_key,
        "tls": tls.disabled if tls else None,
        "server_name": tls.server_name if tls else None,
        "server_ca_cert": tls.server_root_ca_cert if tls else None,
        "client_cert": tls.client_cert if tls else None,
        "client_key": tls.client_private_key if tls else None,
    }


def _implied_tls(merged: ClientConfigProfile, sources: Mapping[str, str], where: str | None) -> str:
    """Why TLS is on when nothing set it: the API key, else the first TLS entry given."""
    parts = _parts(merged)
    given = ("api_key", "server_ca_cert", "client_cert", "client_key", "server_name")
    implied = next((p for p in given if parts.get(p) is not None), "api_key")
    return f"implied by {_named(implied, sources, where, parts.get(implied))}"


def _flag(part: str) -> str:
    return FLAGS.get(part, VARIABLES[part])


def _named(part: str, sources: Mapping[str, str], where: str | None, value: Any = None) -> str:
    source = sources.get(part)
    if source is None or source.startswith("profile "):
        return f"{_profile_key(part, value)} of {where}" if where else VARIABLES[part]
    return source.removeprefix("flag ")


def _profile_key(part: str, value: Any) -> str:
    """The profile's key for ``part``: ``*_data`` when it gave the PEM itself, else ``*_path``."""
    key = PROFILE_KEYS[part]
    if part in DATA_VARIABLES and value is not None and not isinstance(value, Path):
        return key.removesuffix("_path") + "_data"
    return key


def _shown_source(source: DataSource | None) -> str | None:
    if source is None:
        return None
    return str(source) if isinstance(source, Path) else "inline PEM"


def _masked(key: str | None) -> str | None:
    """An API key as the settings report shows secrets: its last four characters at most."""
    if key is None:
        return None
    return f"****{key[-4:]}" if len(key) >= 16 else "set"
