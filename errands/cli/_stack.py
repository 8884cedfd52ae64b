"""The CLI's configuration and stack: settings, the session store and Temporal, checked so a
mistake is one line naming what to fix (exit code 2), and the embedded dev server and worker
when nothing else is configured."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pydantic import ValidationError
from temporalio.client import Client

from errands.cli._output import note
from errands.client import TemporalUnreachable, connect
from errands.devserver import DevServer, DevServerError, port_open
from errands.pricing import price_table
from errands.settings import Settings, load_settings
from errands.store import SessionStore, StoreUnavailable, open_store


class UsageError(Exception):
    """A mistake in how the command was called or configured; printed, exit code 2."""


def configured_settings(**overrides: object) -> Settings:
    """The settings from the environment (and flags); a bad value is a UsageError naming it."""
    try:
        settings = load_settings(**overrides)
    except ValidationError as error:
        raise UsageError(f"bad configuration: {_problems(error)}; fix or unset it") from None
    try:
        price_table(settings.prices)  # read per task; a typo should not wait for the first one
    except ValidationError as error:
        raise UsageError(f"ERRANDS_PRICES has a bad price: {_problems(error)}") from None
    except ValueError as error:
        raise UsageError(str(error)) from None
    return settings


def _problems(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in e['loc'])}: {e['msg'].lower()}" for e in error.errors()
    )


def open_session_store(settings: Settings) -> SessionStore:
    try:
        return open_store(settings.session_database_url())
    except ValueError as error:
        raise UsageError(f"{error}; check ERRANDS_DATABASE_URL") from None
    except StoreUnavailable as error:
        raise UsageError(str(error)) from None


async def connect_temporal(address: str, namespace: str) -> Client:
    try:
        return await connect(address, namespace)
    except TemporalUnreachable as error:
        raise UsageError(str(error)) from None


@asynccontextmanager
async def stack(settings: Settings, *, need_worker_here: bool) -> AsyncIterator[Client]:
    """A client, starting the embedded dev server and a worker when nothing is configured."""
    if settings.temporal_address:
        yield await connect_temporal(settings.temporal_address, settings.temporal_namespace)
        return
    if port_open("127.0.0.1", settings.dev_port):
        # Someone's `errands dev` is running: it has the worker.
        yield await connect_temporal(f"127.0.0.1:{settings.dev_port}", settings.temporal_namespace)
        return
    if not need_worker_here:
        raise UsageError(
            "no Temporal server is configured or running; set TEMPORAL_ADDRESS or start the "
            "embedded stack with `errands dev`"
        )
    from worker import build_worker

    store = open_session_store(settings)
    try:
        note(f"errands: starting the embedded Temporal dev server (data in {settings.data_dir}/)")
        async with dev_server(settings) as server:
            client = await connect_temporal(server.address, settings.temporal_namespace)
            async with build_worker(client, settings, store=store):
                yield client
    finally:
        store.close()


@asynccontextmanager
async def dev_server(settings: Settings) -> AsyncIterator[DevServer]:
    """The embedded dev server for the block. It is stopped at the end, also when the command
    is stopped while the server is still starting (in a thread that cancelling cannot stop)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    server = DevServer(
        port=settings.dev_port,
        ui_port=settings.dev_ui_port,
        db_file=str((settings.data_dir / "temporal.db").resolve()),
        log_file=str((settings.data_dir / "temporal.log").resolve()),
    )
    starting = asyncio.ensure_future(asyncio.to_thread(server.start))
    try:
        await asyncio.shield(starting)
    except (DevServerError, FileNotFoundError) as error:
        hint = ""
        if isinstance(error, DevServerError) and error.port is not None:
            hint = " (ERRANDS_DEV_PORT and ERRANDS_DEV_UI_PORT, or `errands dev --port --ui-port`)"
        raise UsageError(f"cannot start the embedded Temporal dev server: {error}{hint}") from None
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
