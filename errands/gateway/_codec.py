"""``errands codec-server``: the remote codec the Temporal UI and the ``temporal`` CLI call to
show encrypted payloads decrypted (and to encrypt what an operator sends from the UI)::

    POST /encode   {"payloads": [{"metadata": {"encoding": "<base64>"}, "data": "<base64>"}]}
    POST /decode   the same shape (temporal.api.common.v1.Payloads as protobuf JSON), answered
                   in the same shape

It holds the keys and nothing else: no Temporal connection, no store. Who may decode is who
holds ``ERRANDS_API_TOKEN`` (``Authorization: Bearer <token>``, as the gateway checks it);
without a token it serves loopback only. Browsers may call it only from the configured UI
origins (``ERRANDS_CODEC_CORS_ORIGINS``, else the UI errands links): the preflight is answered
for them alone, and a request from any other page is refused, so a page cannot use a
browser on the operator's machine to decode.

A payload that none of the keys decrypts (a key id that was dropped from the keys, an altered
payload) is answered as it came, still encrypted, and the rest of the batch is decoded: the UI
sends a page of history at once, and one old payload must not hide every other one.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from google.protobuf import json_format
from starlette.middleware.cors import CORSMiddleware
from temporalio.api.common.v1 import Payload, Payloads

from errands.adapters.encryption import AesGcmCodec, configured_keys
from errands.errors import ConfigError, InvalidRequest
from errands.gateway._auth import LOOPBACK_NAMES, BearerGuard, is_loopback
from errands.gateway._errors import SEND_JSON, install_handlers
from errands.gateway._listen import Server, config, listening_socket, run, url
from errands.settings import Settings

log = logging.getLogger("errands.codec")

ALLOWED_HEADERS = ("Authorization", "Content-Type", "X-Namespace")
"""What the Temporal UI sends with a codec call (the namespace in ``X-Namespace``)."""
LOOPBACK_ALIASES = ("127.0.0.1", "localhost")
"""One browser opens the embedded UI as 127.0.0.1, another as localhost: both are its origin."""
DEFAULT_PORTS = {"http": 80, "https": 443}
"""A browser's ``Origin`` leaves these out, so an origin is compared without them."""


def codec_origins(settings: Settings, *, ui: str | None = None) -> list[str]:
    """The origins whose pages may call the codec server: ERRANDS_CODEC_CORS_ORIGINS, else the
    UI at ``ui`` (``errands dev``: its embedded one, whatever connection is configured), else
    the Temporal UI errands links; a UI on loopback under both of its names."""
    if settings.codec_cors_origins:
        return [_origin(o) for o in settings.codec_cors_origins.split(",") if o.strip()]
    ui = ui or settings.temporal_ui()
    if ui is None:
        return []
    origin = _origin(ui)
    parts = urlsplit(origin)
    if (parts.hostname or "") in (*LOOPBACK_NAMES, "127.0.0.1"):
        port = f":{parts.port}" if parts.port else ""
        return [f"{parts.scheme}://{name}{port}" for name in LOOPBACK_ALIASES]
    return [origin]


def _origin(address: str) -> str:
    """``scheme://host[:port]`` of ``address``, as a browser sends it in ``Origin``."""
    origin = normal_origin(address)
    if origin is None:
        raise ConfigError(
            f"ERRANDS_CODEC_CORS_ORIGINS holds {address.strip()!r}, which is not an origin; "
            "give the Temporal UI's address as https://host[:port], comma-separated",
            setting="ERRANDS_CODEC_CORS_ORIGINS",
        )
    return origin


def normal_origin(address: str) -> str | None:
    """``scheme://host[:port]`` of ``address``, lowercase and without the scheme's default port
    (as a browser writes ``Origin``); None if it is no http(s) address."""
    parts = urlsplit(address.strip())
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range
        return None
    host = parts.hostname
    if parts.scheme not in DEFAULT_PORTS or not host:
        return None
    if ":" in host:
        host = f"[{host}]"
    if port is None or port == DEFAULT_PORTS[parts.scheme]:
        return f"{parts.scheme}://{host}"
    return f"{parts.scheme}://{host}:{port}"


def create_codec_app(
    codec: AesGcmCodec, *, token: str | None, origins: Sequence[str] = ()
) -> FastAPI:
    """The codec server's app: ``/encode`` and ``/decode`` behind ``token`` (None: no token,
    for loopback), callable from browsers on ``origins`` only."""
    guard = BearerGuard(token, guarding="codec server")
    allowed = frozenset(origins)
    app = FastAPI(
        title="errands codec server",
        version="1",
        description="Encrypts and decrypts errands' payloads for the Temporal UI and CLI.",
        docs_url=None,
        redoc_url=None,
    )
    install_handlers(app)

    async def from_allowed_page(request: Request) -> None:
        # Browsers send an Origin with every POST: a page of another site (or one rebound to
        # this address by DNS) is refused before its token, or its lack of one, counts.
        origin = request.headers.get("origin")
        if origin is not None and (normal_origin(origin) or origin.lower()) not in allowed:
            raise HTTPException(
                403,
                f"refused a request from the page at {origin[:80]!r}: the codec server answers "
                "only the Temporal UI's origins; add this one to ERRANDS_CODEC_CORS_ORIGINS if "
                "it is your UI",
            )
        if request.headers.get("content-type", "").partition(";")[0].strip() != (
            "application/json"
        ):
            raise InvalidRequest(f"the codec server takes JSON only; {SEND_JSON}")

    checks = [Depends(from_allowed_page), Depends(guard)]

    @app.post("/encode", dependencies=checks, summary="Encrypt payloads")
    async def encode(request: Request) -> JSONResponse:
        payloads = _payloads(await request.body())
        return _answer([codec.encrypt(p) for p in payloads])

    @app.post("/decode", dependencies=checks, summary="Decrypt payloads")
    async def decode(request: Request) -> JSONResponse:
        payloads = _payloads(await request.body())
        return _answer([_decrypted(codec, p) for p in payloads])

    # Outermost: answers the preflight (no token in it) and marks the answers, refusals too,
    # readable by the allowed origins only.
    app.add_middleware(
        CORSMiddleware,
        allow_origins=sorted(allowed),
        allow_methods=["POST"],
        allow_headers=list(ALLOWED_HEADERS),
        allow_credentials=True,
        # A UI served from a public site may call a codec server on the operator's own
        # machine: browsers ask first (Private Network Access), and the UI's origins may.
        allow_private_network=True,
        max_age=600,
    )
    return app


def _payloads(body: bytes) -> list[Payload]:
    try:
        message = json_format.Parse(body or b"{}", Payloads())
    except (json_format.ParseError, UnicodeDecodeError) as error:
        raise InvalidRequest(
            "the body is not a Payloads object; send "
            '{"payloads": [{"metadata": {"encoding": "<base64>"}, "data": "<base64>"}]} '
            f"({str(error)[:200]})"
        ) from None
    return list(message.payloads)


def _answer(payloads: list[Payload]) -> JSONResponse:
    return JSONResponse({"payloads": [json_format.MessageToDict(p) for p in payloads]})


def _decrypted(codec: AesGcmCodec, payload: Payload) -> Payload:
    try:
        return codec.decrypt(payload)
    except ValueError as error:
        log.warning("a payload was left encrypted: %s", error)
        return payload


def codec_for(settings: Settings) -> AesGcmCodec:
    """The codec of the configured keys; refuses to serve without any."""
    keys = configured_keys(settings)
    if not keys:
        raise ConfigError(
            "the codec server has no keys to decrypt with; set ERRANDS_ENCRYPTION_KEYS (or "
            "ERRANDS_ENCRYPTION_KEYS_FILE) to the keys the workers use",
            setting="ERRANDS_ENCRYPTION_KEYS",
        )
    return AesGcmCodec(keys)


def check_codec_binding(host: str, token: str | None) -> None:
    """Refuses a codec server that anyone who reaches it could decrypt with."""
    if not token and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve the codec on {host} without a token: anyone who can reach it "
            "could read every task's text. Set ERRANDS_API_TOKEN (the UI and the CLI send "
            "`Authorization: Bearer <token>`), or bind to 127.0.0.1",
            setting="ERRANDS_API_TOKEN",
        )


@asynccontextmanager
async def codec_serving(
    settings: Settings,
    host: str,
    port: int,
    token: str | None,
    *,
    origins: Sequence[str] | None = None,
    port_flag: str = "--port",
) -> AsyncIterator[str]:
    """The codec server for the block, on this event loop; yields its base URL (port 0: a free
    one). Refusals (no keys, no token beyond loopback, a taken port) come before it listens.
    ``origins``: the pages that may call it (default: ``codec_origins``); ``port_flag``: the
    flag that chooses ``port``, as a refusal names it."""
    check_codec_binding(host, token)
    allowed = codec_origins(settings) if origins is None else origins
    app = create_codec_app(codec_for(settings), token=token, origins=allowed)
    sock: socket.socket = listening_socket(host, port, port_flag=port_flag)
    with sock:
        server = Server(config(app, host, port, settings.forwarded_allow_ips))
        task = asyncio.create_task(
            run(server, sockets=[sock], name="errands codec server"), name="errands codec server"
        )
        try:
            while not server.started:
                if task.done():
                    await task
                    raise ConfigError(f"the codec server could not listen on {host}:{port}")
                await asyncio.sleep(0.02)
            yield url(sock)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
