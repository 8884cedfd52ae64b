"""Running the gateway: ``serve`` for ``errands serve``, ``serving`` to embed it (tests, dev)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from errands.adapters.connection import resolve
from errands.adapters.devserver import port_open
from errands.adapters.store import open_store
from errands.adapters.telemetry import configure_logging
from errands.client import Client, connect
from errands.errors import ConfigError
from errands.gateway._app import create_app
from errands.gateway._auth import is_loopback
from errands.gateway._listen import Server, config, listening_socket, run, url
from errands.settings import Settings

log = logging.getLogger("errands.gateway")


def check_binding(host: str, token: str | None, allowed_hosts: str | None = None) -> None:
    """Refuses a gateway that anyone, or any web page, could use without a token."""
    if not token and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve on {host} without a token: anyone who can reach it could run "
            "tasks. Set ERRANDS_API_TOKEN (clients send `Authorization: Bearer <token>`), or "
            "bind to 127.0.0.1",
            setting="ERRANDS_API_TOKEN",
        )
    if not token and "*" in (allowed_hosts or "").split(","):
        raise ConfigError(
            "refusing ERRANDS_ALLOWED_HOSTS=* without a token: any web page could reach the "
            "gateway through DNS rebinding and run tasks. Set ERRANDS_API_TOKEN, or list the "
            "names the gateway is reached by in ERRANDS_ALLOWED_HOSTS instead of *",
            setting="ERRANDS_ALLOWED_HOSTS",
        )


@asynccontextmanager
async def serving(
    app: FastAPI, host: str = "127.0.0.1", port: int = 0, *, proxies: str | None = None
) -> AsyncIterator[str]:
    """Run ``app`` on this event loop until the block ends; yields its base URL. Port 0 picks a
    free port; ``proxies``: as ERRANDS_FORWARDED_ALLOW_IPS."""
    server = Server(config(app, host, port, proxies))
    task = asyncio.create_task(server.serve(), name="errands gateway")
    while not server.started:
        if task.done():
            await task  # raises why it could not start
            raise ConfigError(f"the gateway could not listen on {host}:{port}")
        await asyncio.sleep(0.02)
    try:
        yield url(server.servers[0].sockets[0])
    finally:
        server.should_exit = True
        await task


async def serve(settings: Settings, host: str, port: int, token: str | None) -> None:
    """``errands serve``: the gateway against the configured Temporal (flags, ``TEMPORAL_*``, a
    ``temporal.toml`` profile) or a running `errands dev`, in the foreground until cancelled
    (the CLI cancels it on SIGTERM, SIGHUP and Ctrl-C), then shut down gracefully. Logs go to
    stderr as ``ERRANDS_LOG_*`` say."""
    check_binding(host, token, settings.allowed_hosts)
    configure_logging(settings.log_level, json=settings.log_json)
    connection = resolve(settings)
    address = connection.address or f"127.0.0.1:{settings.dev_port}"
    if not connection.configured and not port_open("127.0.0.1", settings.dev_port):
        raise ConfigError(
            "no Temporal server is configured or running; set TEMPORAL_ADDRESS (or a "
            "temporal.toml profile with TEMPORAL_PROFILE, or --address) or start the embedded "
            "stack with `errands dev`",
            setting="TEMPORAL_ADDRESS",
        )
    with listening_socket(host, port) as sock:
        temporal = await connect(settings)
        # The gateway and its workers share the store: open it (creating it) up front.
        store = open_store(settings.session_database_url())
        try:
            app = create_app(Client(temporal, settings, store=store), token=token)
            log.info("errands gateway on %s (Temporal at %s)", url(sock), address)
            proxies = settings.forwarded_allow_ips
            await run(Server(config(app, host, port, proxies)), sockets=[sock])
        finally:
            store.close()
