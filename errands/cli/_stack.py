"""The CLI's configuration and stack: the settings, and an ``errands.Client`` on the configured
Temporal, or on the embedded dev server and worker when nothing else is configured."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from errands.adapters.connection import check_unconfigured, resolve
from errands.adapters.devserver import DevServer, port_open
from errands.adapters.store import open_store
from errands.cli._codec import dev_keys
from errands.cli._connection import default_profile_note
from errands.cli._output import note
from errands.client import Client, connect
from errands.errors import ConfigError, DevServerError
from errands.settings import Settings


@asynccontextmanager
async def stack(settings: Settings, *, need_worker_here: bool) -> AsyncIterator[Client]:
    """A client on the configured Temporal (flags, ``TEMPORAL_*``, a ``temporal.toml``
    profile), else on a running `errands dev`, else on the embedded dev server and a worker
    started here when nothing else is configured."""
    connection = resolve(settings)
    if connection.configured:
        if (line := default_profile_note(settings, connection)) is not None:
            note(line)
        temporal = await connect(settings)
        async with Client(temporal, settings) as client:
            yield client
        return
    settings = dev_keys(settings)  # the embedded stack's key, if `errands dev --encrypt` made one
    local = f"127.0.0.1:{settings.dev_port}"
    if port_open("127.0.0.1", settings.dev_port):
        # Someone's `errands dev` is running: it has the worker.
        temporal = await connect(settings)  # checks no TLS material is set without an address
        async with Client(temporal, settings) as client:
            yield client
        return
    if not need_worker_here:
        raise ConfigError(
            "no Temporal server is configured or running; set TEMPORAL_ADDRESS (or a "
            "temporal.toml profile with TEMPORAL_PROFILE, or --address) or start the embedded "
            f"stack with `errands dev` (it listens on {local})",
            setting="TEMPORAL_ADDRESS",
        )
    check_unconfigured(connection)
    from errands.workers import running_workers

    store = open_store(settings.session_database_url())
    try:
        note(f"errands: starting the embedded Temporal dev server (data in {settings.data_dir}/)")
        async with dev_server(settings) as server:
            temporal = await connect(settings, address=server.address, embedded=True)
            async with running_workers(temporal, settings, store=store):
                yield Client(temporal, settings, store=store)
    finally:
        store.close()


@asynccontextmanager
async def dev_server(
    settings: Settings, *, codec_endpoint: str | None = None
) -> AsyncIterator[DevServer]:
    """The embedded dev server for the block. It is stopped at the end, also when the command
    is stopped while the server is still starting (in a thread that cancelling cannot stop).
    ``codec_endpoint``: the codec server its UI decodes payloads with."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    server = DevServer(
        port=settings.dev_port,
        ui_port=settings.dev_ui_port,
        db_file=str((settings.data_dir / "temporal.db").resolve()),
        log_file=str((settings.data_dir / "temporal.log").resolve()),
        ui_codec_endpoint=codec_endpoint,
    )
    starting = asyncio.ensure_future(asyncio.to_thread(server.start))
    try:
        await asyncio.shield(starting)
    except DevServerError as error:
        hint = ""
        if error.port is not None:
            hint = " (ERRANDS_DEV_PORT and ERRANDS_DEV_UI_PORT, or `errands dev --port --ui-port`)"
        raise DevServerError(
            f"cannot start the embedded Temporal dev server: {error}{hint}", port=error.port
        ) from None
    except FileNotFoundError as error:
        raise ConfigError(f"cannot start the embedded Temporal dev server: {error}") from None
    except asyncio.CancelledError:
        await asyncio.wait([starting])
        await asyncio.to_thread(server.stop)
        raise
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)


def ui_url(settings: Settings, task_id: str) -> str:
    return (
        f"http://127.0.0.1:{settings.dev_ui_port}/namespaces/{settings.temporal_namespace}"
        f"/workflows/{task_id}"
    )
