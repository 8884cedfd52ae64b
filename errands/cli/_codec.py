"""``errands codec-server``, and the embedded stack's own key (``errands dev --encrypt``).

The embedded stack keeps its key in the data directory (``encryption.keys``, readable by its
owner only), made on the first ``errands dev --encrypt`` and used from then on by every command
on that stack (the dev worker, ``errands run``, the codec server), so its tasks stay readable
across runs. Keys the user configures (ERRANDS_ENCRYPTION_KEYS or _FILE) always win.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from errands.adapters.devserver import port_open
from errands.adapters.encryption import configured_keys, new_key
from errands.adapters.telemetry import configure_logging
from errands.adapters.temporal_profile import resolve
from errands.cli._output import note
from errands.errors import ConfigError, ErrandsError
from errands.settings import Settings, load_settings

DEV_KEY_FILE = "encryption.keys"
DEV_KEY_ID = "dev"
DEV_CODEC_PORT = 8081


def dev_key_path(settings: Settings) -> Path:
    return settings.data_dir / DEV_KEY_FILE


def dev_keys(settings: Settings, *, create: bool = False) -> Settings:
    """``settings`` with the embedded stack's key file as ERRANDS_ENCRYPTION_KEYS_FILE when it
    exists (``create``: make it first), unless keys are configured. Only for the embedded
    stack: a configured Temporal has keys of its own."""
    if settings.encryption_keys is not None or settings.encryption_keys_file is not None:
        return settings
    path = dev_key_path(settings)
    if create and not path.exists():
        _write_key(path)
    if not path.exists():
        return settings
    return settings.model_copy(update={"encryption_keys_file": path.resolve()})


def _write_key(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # Created readable by its owner only, in one step: never a moment with wider rights.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return  # another `errands dev` made it meanwhile: use theirs
    except OSError as error:
        raise ConfigError(
            f"cannot write the embedded stack's key to {path} ({error.strerror}); check "
            "ERRANDS_DATA_DIR (or --data-dir) is a writable directory"
        ) from None
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(f"{DEV_KEY_ID}={new_key()}\n")
    note(f"errands dev: made an encryption key in {path} (keep it: tasks need it to be read)")


@asynccontextmanager
async def dev_codec_server(settings: Settings, port: int) -> AsyncIterator[str | None]:
    """With encryption on, the embedded stack's codec server on loopback for the block (its
    URL, for the UI); else nothing (None). It takes no token: the UI a browser opens sends
    none, and the embedded UI itself is served to this machine alone. It answers the embedded
    UI's pages (or ERRANDS_CODEC_CORS_ORIGINS), whatever Temporal the settings name: `errands
    dev` runs its own."""
    if configured_keys(settings) is None:
        yield None
        return
    if port and port_open("127.0.0.1", port):
        raise ConfigError(
            f"port {port} is already taken, so the codec server of `errands dev` cannot listen "
            f"at 127.0.0.1:{port}; stop whatever listens there (an `errands codec-server`?) or "
            "choose another port with --codec-port"
        )
    from errands.gateway import codec_origins, codec_serving

    origins = codec_origins(settings, ui=f"http://127.0.0.1:{settings.dev_ui_port}")
    async with codec_serving(
        settings, "127.0.0.1", port, None, origins=origins, port_flag="--codec-port"
    ) as url:
        yield url


async def codec_server(args: argparse.Namespace) -> int:
    from errands.gateway import codec_serving

    settings = load_settings()
    if not _configures_temporal(settings):
        settings = dev_keys(settings)  # beside `errands dev --encrypt`: its key
    token = settings.api_token.get_secret_value() if settings.api_token else None
    configure_logging(settings.log_level, json=settings.log_json)
    async with codec_serving(settings, args.host, args.port, token) as url:
        who = "callers with ERRANDS_API_TOKEN" if token else "this machine only (no token)"
        note(f"errands codec-server: decoding on {url} for {who}")
        await asyncio.Event().wait()  # until the command is stopped
    return 0


def _configures_temporal(settings: Settings) -> bool:
    """Whether a variable or a ``temporal.toml`` profile names a Temporal server (then its keys
    are its own, never the embedded stack's). A profile that cannot be read counts as one: the
    embedded stack's key is used only when nothing else can be meant."""
    try:
        return resolve(settings).configured
    except ErrandsError:
        return True


def key_source(settings: Settings) -> str:
    """Where the keys come from, as a note names it (never a key)."""
    if settings.encryption_keys is not None:
        return "keys from ERRANDS_ENCRYPTION_KEYS"
    return f"keys in {settings.encryption_keys_file}"
