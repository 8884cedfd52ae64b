"""A webhook receiver on loopback for the notification tests: it records each request (headers
lower-cased, body) and answers the statuses it is given in turn; and the Standard Webhooks
check a receiver makes, written from the specification, not with errands' own code."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

LOOPBACK = "127.0.0.1"


def verifies(secret: str, sent: dict[str, str], body: bytes) -> bool:
    """The Standard Webhooks check a receiver makes, written from the specification."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{sent['webhook-id']}.{sent['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(
        version == "v1" and hmac.compare_digest(value, expected)
        for version, _, value in (item.partition(",") for item in sent["webhook-signature"].split())
    )


@dataclass
class Hit:
    headers: dict[str, str]
    body: bytes
    status: int
    at: float = field(default_factory=time.monotonic)

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A webhook receiver on 127.0.0.1 answering ``statuses`` in turn (the last one from then
    on), or what ``answer`` says when it is set."""

    statuses: list[int] = field(default_factory=lambda: [200])
    location: str = ""
    answer: Any = None
    port: int = 0
    hits: list[Hit] = field(default_factory=list)

    def url(self, path: str = "/hook", host: str = LOOPBACK) -> str:
        return f"http://{host}:{self.port}{path}"

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.answer is not None:
            status = self.answer()
        else:
            status = self.statuses[min(len(self.hits), len(self.statuses) - 1)]
        self.hits.append(Hit({k.lower(): v for k, v in request.headers.items()}, body, status))
        said = {302: {"Location": self.location}, 429: {"Retry-After": "3"}}
        return web.Response(status=status, headers=said.get(status, {}))


@asynccontextmanager
async def receiving(*statuses: int, location: str = "") -> AsyncIterator[Receiver]:
    receiver = Receiver(list(statuses or (200,)), location)
    app = web.Application()
    app.router.add_post("/{tail:.*}", receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, LOOPBACK, 0)
    await site.start()
    receiver.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield receiver
    finally:
        await runner.cleanup()
