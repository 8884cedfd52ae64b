"""Running the gateway: ``serve`` for ``errands serve``, ``serving`` to embed it (tests, dev)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import uvicorn
from fastapi import FastAPI

from errands.adapters.connection import resolve
from errands.adapters.devserver import port_open
from errands.adapters.store import open_store
from errands.adapters.telemetry import configure_logging
from errands.client import Client, connect
from errands.errors import ConfigError
from errands.gateway._app import create_app
from errands.gateway._auth import is_loopback
from errands.settings import Settings

log = logging.getLogger("errands.gateway")

GRACEFUL_SECONDS = 3
"""Open event streams are cut after this long at shutdown instead of holding it up."""


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


class _Server(uvicorn.Server):
    """uvicorn's server, minus its signal handling: uvicorn would take SIGTERM and SIGINT from
    the process (the CLI's own handlers too) and raise them again once it has stopped, which
    cancelled the command in the middle of its shutdown and printed a traceback. Whoever runs
    the server stops it by cancelling ``_run``."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _run(server: uvicorn.Server, sockets: list[socket.socket] | None = None) -> None:
    """Serve until cancelled; then shut down gracefully (requests answered, event streams cut
    after ``GRACEFUL_SECONDS``, the app's lifespan ended) before the cancellation goes on."""
    task = asyncio.create_task(server.serve(sockets=sockets), name="errands gateway")
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        server.should_exit = True
        await task  # a second cancellation (a second signal) cuts the shutdown short
        raise


def _config(app: FastAPI, host: str, port: int, proxies: str | None) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        # Only the proxies ERRANDS_FORWARDED_ALLOW_IPS names may say who the client is (the
        # throttle of wrong tokens keys on it); uvicorn's own default trusts 127.0.0.1.
        proxy_headers=proxies is not None,
        forwarded_allow_ips=proxies or "",
        lifespan="on",
        ws="none",  # no websockets are served; don't load a websockets library
        log_level="warning",
        timeout_graceful_shutdown=GRACEFUL_SECONDS,
    )


@asynccontextmanager
async def serving(
    app: FastAPI, host: str = "127.0.0.1", port: int = 0, *, proxies: str | None = None
) -> AsyncIterator[str]:
    """Run ``app`` on this event loop until the block ends; yields its base URL. Port 0 picks a
    free port; ``proxies``: as ERRANDS_FORWARDED_ALLOW_IPS."""
    server = _Server(_config(app, host, port, proxies))
    task = asyncio.create_task(server.serve(), name="errands gateway")
    while not server.started:
        if task.done():
            await task  # raises why it could not start
            raise ConfigError(f"the gateway could not listen on {host}:{port}")
        await asyncio.sleep(0.02)
    try:
        yield _url(server.servers[0].sockets[0])
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
    with _listening_socket(host, port) as sock:
        temporal = await connect(settings)
        # The gateway and its workers share the store: open it (creating it) up front.
        store = open_store(settings.session_database_url())
        try:
            app = create_app(Client(temporal, settings, store=store), token=token)
            log.info("errands gateway on %s (Temporal at %s)", _url(sock), address)
            proxies = settings.forwarded_allow_ips
            await _run(_Server(_config(app, host, port, proxies)), sockets=[sock])
        finally:
            store.close()


def _listening_socket(host: str, port: int) -> socket.socket:
    """The gateway's socket, bound here: uvicorn answers a port it cannot bind by logging an
    error and exiting the process, which leaves nothing to explain the problem with."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} on {host} is already in use; stop whatever listens there or "
                "choose another port with --port"
            ) from None
        raise ConfigError(
            f"cannot listen on {host}:{port} ({error.strerror or error}); check --host and --port"
        ) from None
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
