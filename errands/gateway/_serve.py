"""Running the gateway: ``serve`` for ``errands serve``, ``serving`` to embed it (tests, dev)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from errands.adapters.connection import resolve
from errands.adapters.devserver import port_open
from errands.adapters.store import SessionStore, open_store, sqlite_path
from errands.adapters.telemetry import configure_logging
from errands.client import Authenticator, Client, connect
from errands.errors import ConfigError
from errands.gateway._app import create_app
from errands.gateway._auth import is_loopback
from errands.gateway._listen import Server, config, listening_socket, run, url
from errands.settings import Settings

log = logging.getLogger("errands.gateway")


HOW_TO_AUTH = (
    "Add an API key (errands principals add; clients send `Authorization: Bearer <key>`), set "
    "ERRANDS_OIDC_ISSUER and ERRANDS_OIDC_AUDIENCE, or set ERRANDS_API_TOKEN"
)


def check_binding(host: str, auth: str | bool | None, allowed_hosts: str | None = None) -> None:
    """Refuses a gateway that anyone, or any web page, could use without saying who they are.
    ``auth``: what tells callers apart (ERRANDS_API_TOKEN's value, or True for API keys or
    OIDC); falsy: nothing, so only loopback, where the one user is the machine's."""
    if not auth and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve on {host} with no way to tell who calls: anyone who can reach "
            f"it could run tasks. {HOW_TO_AUTH}; or bind to 127.0.0.1",
            setting="ERRANDS_API_TOKEN",
        )
    if not auth and "*" in (allowed_hosts or "").split(","):
        raise ConfigError(
            "refusing ERRANDS_ALLOWED_HOSTS=* without a token or another way to tell who calls: "
            f"any web page could reach the gateway through DNS rebinding and run tasks. "
            f"{HOW_TO_AUTH}; or list the names the gateway is reached by in "
            "ERRANDS_ALLOWED_HOSTS instead of *",
            setting="ERRANDS_ALLOWED_HOSTS",
        )


def loopback_only(host: str, allowed_hosts: str | None) -> bool:
    """Whether a gateway bound to ``host`` is reachable from this machine alone (an
    ERRANDS_ALLOWED_HOSTS of * lets any name reach it, so it counts as reachable)."""
    return is_loopback(host) and "*" not in (allowed_hosts or "").split(",")


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
    stderr as ``ERRANDS_LOG_*`` say.

    Beyond loopback it needs a way to tell callers apart (``check_binding``): ``token``, OIDC,
    or an API key in the store when it starts."""
    auth = token or settings.oidc_issuer is not None or await _keys_in_store(settings)
    check_binding(host, auth, settings.allowed_hosts)
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
            authenticator = Authenticator.from_settings(settings, store, token=token)
            app = create_app(
                Client(temporal, settings, store=store),
                token=token,
                authenticator=authenticator,
                loopback_only=loopback_only(host, settings.allowed_hosts),
            )
            log.info("errands gateway on %s (Temporal at %s)", url(sock), address)
            proxies = settings.forwarded_allow_ips
            await run(Server(config(app, host, port, proxies)), sockets=[sock])
        finally:
            store.close()


async def _keys_in_store(settings: Settings) -> bool:
    """Whether the configured session store holds an API key; a SQLite file that does not
    exist holds none (and is not created for asking)."""
    url = settings.session_database_url()
    path = sqlite_path(url)
    if path is not None and not Path(path).exists():
        return False

    def read() -> bool:
        store: SessionStore = open_store(url)
        try:
            return bool(store.list_principals())
        finally:
            store.close()

    return await asyncio.to_thread(read)
