"""A worker on each store: the ``stack`` fixture runs a test module's tests once on a SQLite file
and once on a PostgreSQL schema of their own (dropped afterwards), each with its own task queue,
store and router. A test module imports ``stack`` (and ``database``) and passes ``mcp_servers``
by defining a module-level fixture of that name (``{}`` when it needs none)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from temporalio.client import Client

from errands.adapters.routing import ModelRouter
from errands.adapters.store import SessionStore, open_store
from errands.settings import Settings
from errands.workers import build_worker
from tests.test_store import pg_admin, pg_url_in


@dataclass
class Stack:
    """One worker's settings (its task queue, its database) and the store it writes."""

    settings: Settings
    store: SessionStore
    backend: str


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """The backend's name and a database URL of the module's own."""
    if request.param == "sqlite":
        yield "sqlite", f"sqlite:///{tmp_path_factory.mktemp('stack') / 'sessions.db'}"
        return
    schema = f"errands_stack_{uuid.uuid4().hex[:10]}"
    with pg_admin() as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        try:
            yield "postgres", pg_url_in(schema)
        finally:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(scope="module")
async def stack(
    client: Client,
    settings: Settings,
    database: tuple[str, str],
    mcp_servers: dict[str, Any],
) -> AsyncIterator[Stack]:
    backend, url = database
    own = settings.model_copy(
        update={
            "task_queue": f"stack-{backend}-{uuid.uuid4().hex[:6]}",
            "database_url": url,
            "mcp_servers": json.dumps(mcp_servers) if mcp_servers else None,
        }
    )
    store = open_store(url)
    router = ModelRouter(own)
    try:
        async with build_worker(client, own, store=store, router=router):
            yield Stack(own, store, backend)
    finally:
        await router.aclose()
        store.close()
