"""The ``demo`` model's server keeps a fixed window of recent requests (issue 23, item 8): it lives
as long as its worker, and a request it keeps holds the whole conversation it was sent, so
keeping each one grew a worker from 179 to 441 MB over 1,000 tasks.

Requests go through the real ``openai`` client to the server ``start_demo_server`` starts, as
the worker's ``demo`` route does; what the server holds is counted as objects, not as memory.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import httpx
import openai
import pytest

from errands.adapters.demo import DEMO_KEPT_REQUESTS, start_demo_server
from errands.adapters.scripted import RecordedRequest, ScriptedModelServer

MODEL = "demo-memory"
REQUESTS = 10 * DEMO_KEPT_REQUESTS


@pytest.fixture
def demo() -> Iterator[ScriptedModelServer]:
    server = start_demo_server()
    try:
        yield server
    finally:
        server.stop()


def branch_request(client: openai.OpenAI, k: int) -> str:
    """A branch's call as a worker sends it: instructions and a long quoted message."""
    instructions = (
        "List the key facts and assumptions in the request below.\n"
        f"--- message ---\nrequest {k}: " + "a long conversation " * 200
    )
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": instructions}]
    )
    return reply.choices[0].message.content or ""


def alive(model: str) -> int:
    """RecordedRequest objects of ``model`` anywhere in this process."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, RecordedRequest) and o.model == model)


def test_the_demo_server_keeps_only_its_latest_requests(demo: ScriptedModelServer) -> None:
    client = openai.OpenAI(base_url=demo.openai_base_url, api_key="demo", max_retries=0)
    answers = [branch_request(client, k) for k in range(REQUESTS)]
    client.close()

    assert answers[0].startswith("[facts] Considered 'request 0: a long conversation")
    assert demo.received == REQUESTS
    assert len(demo.requests) == DEMO_KEPT_REQUESTS
    kept = [r.body["messages"][0]["content"].split("\n")[2].split(":")[0] for r in demo.requests]
    assert kept == [f"request {k}" for k in range(REQUESTS - DEMO_KEPT_REQUESTS, REQUESTS)]
    # Nothing else (the HTTP server, the responder) holds on to the ones it dropped.
    assert alive(MODEL) == DEMO_KEPT_REQUESTS


def test_refused_requests_are_kept_to_the_same_window(demo: ScriptedModelServer) -> None:
    with httpx.Client(base_url=demo.openai_base_url) as http:
        for _ in range(3 * DEMO_KEPT_REQUESTS):
            refused = http.post("/chat/completions", content=b"not json")
            assert refused.status_code == 400
    assert demo.received == 3 * DEMO_KEPT_REQUESTS
    assert len(demo.unexpected) == len(demo.requests) == DEMO_KEPT_REQUESTS


def test_a_test_server_keeps_every_request_as_before() -> None:
    with ScriptedModelServer(responder=lambda request: None) as server:
        with httpx.Client(base_url=server.openai_base_url) as http:
            for _ in range(3 * DEMO_KEPT_REQUESTS):
                http.post("/chat/completions", json={"model": "x", "messages": []})
        assert len(server.requests) == len(server.unexpected) == 3 * DEMO_KEPT_REQUESTS
