"""Binding a listening socket and running uvicorn on it, for the gateway and the codec server."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI

from errands.errors import ConfigError

GRACEFUL_SECONDS = 3
"""Open event streams are cut after this long at shutdown instead of holding it up."""


class Server(uvicorn.Server):
    """uvicorn's server, minus its signal handling: uvicorn would take SIGTERM and SIGINT from
    the process (the CLI's own handlers too) and raise them again once it has stopped, which
    cancelled the command in the middle of its shutdown and printed a traceback. Whoever runs
    the server stops it by cancelling ``run``."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def run(
    server: uvicorn.Server,
    sockets: list[socket.socket] | None = None,
    *,
    name: str = "errands gateway",
) -> None:
    """Serve until cancelled; then shut down gracefully (requests answered, event streams cut
    after ``GRACEFUL_SECONDS``, the app's lifespan ended) before the cancellation goes on."""
    task = asyncio.create_task(server.serve(sockets=sockets), name=name)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        server.should_exit = True
        await task  # a second cancellation (a second signal) cuts the shutdown short
        raise


def config(app: FastAPI, host: str, port: int, proxies: str | None) -> uvicorn.Config:
    """uvicorn's configuration of ``app``; ``proxies``: as ERRANDS_FORWARDED_ALLOW_IPS."""
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


def listening_socket(host: str, port: int, *, port_flag: str = "--port") -> socket.socket:
    """A socket bound to ``host:port``, here: uvicorn answers a port it cannot bind by logging
    an error and exiting the process, which leaves nothing to explain the problem with.
    ``port_flag``: the caller's flag that chooses the port, as the refusal names it."""
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
                f"choose another port with {port_flag}"
            ) from None
        raise ConfigError(
            f"cannot listen on {host}:{port} ({error.strerror or error}); check --host and "
            f"{port_flag}"
        ) from None
    return sock


def url(sock: socket.socket) -> str:
    """The base URL of what listens on ``sock``."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
