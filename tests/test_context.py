"""Context that fits (issue 15, SPEC §7): budgets, offline estimates, compaction summaries with
deterministic ids, and a provider's context-length refusal, on the real dev server with the
real OpenAI client and a scripted server that refuses, as providers do, any request longer
than its model's window."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from temporalio.client import Client

import errands
from activities._context import session_view
from errands.adapters.providers._errors import classify_provider_error
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import Call, Fail, Gate, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.agent import context, reading
from errands.agent.model_catalog import ModelInfo
from errands.agent.subtask_types import SubtaskType, WorkTool
from errands.contracts import ids
from errands.contracts.messages import NewMessage, StoredMessage
from errands.contracts.rounds import RoundView
from errands.contracts.workflows import RoundSettings
from errands.settings import Settings
from errands.workers import build_worker
from tests.conftest import ProcessWorkers, kill_worker, run_cli, spawn_worker, worker_process
from tests.helpers import (
    delegate,
    final,
    is_branch_request,
    is_summary_call,
    keep_history,
    start_task,
    tool_spec,
)

MODEL = "openai:ctx-16k"
WINDOW = 16_000


# -- pure parts ---------------------------------------------------------------------------------


@pytest.mark.fast
def test_the_input_budget_is_the_window_less_the_reserved_output_and_the_margin() -> None:
    info = ModelInfo(context_window=16_000, max_output=2_048)
    assert context.input_budget(info, 4_096) == 15_200 - 2_048  # output capped by the model
    assert context.input_budget(info, 1_000) == 15_200 - 1_000
    assert context.input_budget(ModelInfo(), 4_096) == 30_400 - 4_096  # unknown: 32,000


@pytest.mark.fast
def test_the_estimator_starts_conservative_and_calibrates_from_reported_tokens() -> None:
    estimator = context.TokenEstimator()
    assert estimator.tokens("m", 3_000) == 1_000  # 3 bytes a token before any report
    estimator.observe("m", 40_000, 10_000)  # the provider saw 4 bytes a token
    assert 3.5 <= estimator.ratio("m") <= 3.7  # 0.9 x 4: still on the high side
    assert estimator.ratio("other") == 3.0  # per model
    estimator.observe("m", 100, 90)  # too small to say anything
    assert 3.5 <= estimator.ratio("m") <= 3.7
    estimator.shrink("m", 40_000, 8_000)  # refused as longer than 8,000 tokens
    assert estimator.tokens("m", 40_000) >= 8_800
    estimator.shrink("m", 40_000, 8_000, counted=20_000)  # the provider counted 20,000
    assert estimator.tokens("m", 40_000) >= 20_000


@pytest.mark.fast
def test_the_tokens_a_refusal_counted_are_read_from_its_words() -> None:
    assert (
        context.counted_tokens(
            "This model's maximum context length is 16000 tokens. However, your messages resulted "
            "in 17,020 tokens. Please reduce the length of the messages."
        )
        == 17_020
    )
    assert context.counted_tokens("prompt is too long: 210000 tokens > 200000 maximum") == 210_000
    assert context.counted_tokens("the request exceeds the available context size") is None


def rows(*kinds: str, size: int = 100) -> list[StoredMessage]:
    return [
        StoredMessage(
            id=f"r{seq}",
            session_id="s",
            role="user" if kind == "user" else "assistant",
            kind=kind,  # type: ignore[arg-type]
            text="x" * size,
            seq=seq,
            created_at="",
        )
        for seq, kind in enumerate(kinds, start=1)
    ]


@pytest.mark.fast
def test_a_compaction_cuts_only_before_a_task_or_a_rounds_exchange() -> None:
    session = rows("user", "reply", "user", "ack", "branch", "branch", "reply", "user", "reply")
    weight = context.row_bytes(session[0])
    # Room for the last two rows: fold up to the last user message.
    assert context.compaction_cut(session, 2 * weight) == 7
    # Room for six: the acknowledgement and its branches stay together, whole; for five, the
    # exchange does not fit, and is folded with what came before it.
    assert context.compaction_cut(session, 6 * weight) == 3
    assert context.compaction_cut(session, 5 * weight) == 7
    # Room for less than the newest task: fold up to it anyway.
    assert context.compaction_cut(session, weight // 2) == 7
    assert context.compaction_cut(rows("user", "reply", "reply"), 10) == 0  # nowhere to cut


@pytest.mark.fast
def test_pieces_keep_the_order_and_end_before_a_cut_point_where_they_can() -> None:
    session = rows(*["user", "reply"] * 10)
    weight = context.row_bytes(session[0])
    parts = context.pieces(session, 3 * weight)
    assert [r for part in parts for r in part] == session
    assert all(part[0].kind == "user" for part in parts)  # never a reply without its question
    assert all(sum(context.row_bytes(r) for r in part) <= 2 * 3 * weight for part in parts)
    # A step and its results stay together; a stretch with no cut point is parted at 2x.
    thread = rows("step", "tool_result", "tool_result", "step", "tool_result", "tool_result")
    assert [len(p) for p in context.pieces(thread, 2 * weight)] == [3, 3]
    assert [len(p) for p in context.pieces(rows(*["tool_result"] * 6), 2 * weight)] == [4, 2]


@pytest.mark.fast
def test_the_window_a_refusal_states_is_read_from_its_words() -> None:
    assert (
        context.stated_window(
            "This model's maximum context length is 8192 tokens. However, you requested 9000"
        )
        == 8_192
    )
    assert context.stated_window("prompt is too long: 210000 tokens > 200,000 maximum") == 200_000
    assert context.stated_window("the request exceeds the available context size") is None


def test_a_pinned_view_renders_from_its_own_summary_whatever_came_later(
    store: SessionStore,
) -> None:
    session = f"pinned-{uuid.uuid4().hex[:8]}"
    seed(store, session, 6, size=100)
    later = store.append_once(
        NewMessage(
            id=ids.summary_id(session, 4),
            session_id=session,
            role="system",
            kind="summary",
            text="a later task's summary",
            meta={"covers": [1, 4]},
        )
    )
    latest = session_view(store, session, 6)
    assert latest.summary == later and [r.seq for r in latest.rows] == [5, 6]
    before = session_view(store, session, 6, RoundView(summary_id=None))
    assert before.summary is None and [r.seq for r in before.rows] == [1, 2, 3, 4, 5, 6]
    assert all(r.kind != "summary" for r in session_view(store, session, None).rows)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (
            400,
            {
                "error": {
                    "message": "too long",
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                }
            },
        ),
        (
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 210000 tokens > 200000 maximum",
                },
            },
        ),
        (
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 8192 tokens. However,"
                    " you requested 9000 tokens",
                    "type": "BadRequestError",
                }
            },
        ),
        (
            400,
            {
                "error": {
                    "code": 400,
                    "message": "the request exceeds the available context size, try increasing it",
                    "type": "exceed_context_size_error",
                }
            },
        ),
    ],
    ids=["openai", "anthropic", "vllm", "llama.cpp"],
)
@pytest.mark.fast
def test_every_common_context_length_refusal_is_classified_as_context(
    status: int, body: dict[str, Any]
) -> None:
    import httpx
    import openai

    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(status, json=body, request=request)
    error = openai.BadRequestError("refused", response=response, body=body.get("error", body))
    classified = classify_provider_error(error, "openai")
    assert (classified.type, classified.non_retryable) == ("context", True)
    assert "compacts the conversation" in classified.message
    assert "context_window in ERRANDS_MODELS" in classified.message


# -- against the dev server -------------------------------------------------------------------


class Responder:
    """The scripted model for these tests: summary calls (no tools) get a short summary naming
    what they were shown; rounds and branches play what the test gives them."""

    def __init__(self, main: list[Any], branch: str = "branch done") -> None:
        self.main = list(main)
        self.branch = branch
        self.summaries: list[RecordedRequest] = []
        self.rounds: list[RecordedRequest] = []
        self.summary_steps: list[Any] = []
        """Scripted answers to summary calls, in order; a plain summary once they run out."""

    def __call__(self, request: RecordedRequest) -> Any:
        if is_summary_call(request):
            self.summaries.append(request)
            if self.summary_steps:
                return self.summary_steps.pop(0)
            shown = request.body["messages"][-1]["content"]
            return Reply(
                text=f"Summary {len(self.summaries)}: the user seeded {shown.count('seed')} "
                "messages; decision d-1 stands."
            )
        if is_branch_request(request):
            return Reply(text=self.branch)
        self.rounds.append(request)
        return self.main.pop(0)


@pytest.fixture
def windowed() -> Iterator[ScriptedModelServer]:
    """A scripted server of its own, whose `ctx-16k` refuses what passes 16,000 tokens."""
    server = ScriptedModelServer().start()
    server.limit_context("ctx-16k", WINDOW)
    yield server
    server.stop()


@pytest.fixture
async def context_worker(
    client: Client, settings: Settings, store: SessionStore, windowed: ScriptedModelServer
) -> AsyncIterator[Settings]:
    async with worker_for(client, settings, store, windowed, {MODEL: WINDOW}) as own:
        yield own


@asynccontextmanager
async def worker_for(
    client: Client,
    settings: Settings,
    store: SessionStore,
    windowed: ScriptedModelServer,
    windows: dict[str, int],
    **changes: Any,
) -> AsyncIterator[Settings]:
    """A worker of its own on ``windowed``, the catalog giving each model its window."""
    own = settings.model_copy(
        update={
            "task_queue": f"context-{uuid.uuid4().hex[:6]}",
            "openai_base_url": windowed.openai_base_url,
            "models": json.dumps({m: {"context_window": w} for m, w in windows.items()}),
            **changes,
        }
    )
    router = ModelRouter(own)
    async with build_worker(client, own, store=store, router=router):
        yield own
    await router.aclose()


def seed(store: SessionStore, session: str, count: int, size: int = 2_000) -> None:
    """``count`` earlier messages of ``size`` bytes, as earlier tasks of the session left them."""
    for n in range(count):
        task = f"seeded-{session}-{n // 2}"
        text = f"seed {n}: " + ("lorem ipsum dolor sit amet " * (size // 27 + 1))[: size - 12]
        store.append_once(
            NewMessage(
                id=ids.user_message_id(task) if n % 2 == 0 else ids.reply_message_id(task),
                session_id=session,
                role="user" if n % 2 == 0 else "assistant",
                kind="user" if n % 2 == 0 else "reply",
                text=text,
                task_id=task,
            )
        )


def parts(count: int) -> Reply:
    """A round that delegates ``count`` subtasks citing nothing."""
    return delegate(*(f"part {k}" for k in range(count)))


def summaries(store: SessionStore, session: str) -> list[StoredMessage]:
    return store.list_kind(session, "summary")


async def test_a_session_far_beyond_the_window_is_compacted_and_its_summary_reused(
    client: Client, context_worker: Settings, windowed: ScriptedModelServer, store: SessionStore
) -> None:
    session = f"big-{uuid.uuid4().hex[:8]}"
    seed(store, session, 10_000)  # 20 MB: about 5 M tokens
    first = Responder([parts(3), final("all three done")])
    windowed.responder = first
    handle = await start_task(
        client, context_worker.task_queue, "Do three things.", model=MODEL, session=session
    )
    result = await handle.result()
    assert result.status == "replied", result.error
    assert result.reply == "all three done"
    assert windowed.too_long == []  # no request passed the window
    assert windowed.unexpected == []
    made = summaries(store, session)
    # Folded oldest first, in window-sized pieces, each stored under its position.
    assert len(made) == len(first.summaries) > 100
    assert [s.id for s in made] == [ids.summary_id(session, s.meta["covers"][1]) for s in made]
    assert all(s.meta["covers"][0] == 1 for s in made)
    covers = [s.meta["covers"][1] for s in made]
    assert covers == sorted(covers) and covers[-1] >= 9_000
    # No summary call passed the window either, and the biggest was near it: pieces, not rows.
    largest = max(len(r.raw) // 4 + r.body["max_completion_tokens"] for r in first.summaries)
    assert WINDOW * 0.5 < largest <= WINDOW
    # Every round started from the latest summary.
    for request in first.rounds:
        opening = request.body["messages"][1]["content"]
        assert opening.startswith("(Summary of the earlier conversation")
        assert f"Summary {len(first.summaries)}:" in opening
    compaction = result.usage.parts["compaction"][MODEL]
    assert compaction.calls == len(first.summaries)
    # Each summary row is in the task's event log once, with the stretch it covers.
    logged = [e for e in store.list_events(handle.id, limit=10_000) if e.type == "compaction"]
    assert [(e.cause, e.data["covers"], e.data["where"]) for e in logged] == [
        (s.id, s.meta["covers"], "main") for s in made
    ]

    second = Responder([final("again")])
    windowed.responder = second
    again = await start_task(
        client, context_worker.task_queue, "Once more.", model=MODEL, session=session
    )
    result = await again.result()
    assert result.status == "replied", result.error
    assert second.summaries == []  # the summary is reused, not made again
    assert "compaction" not in result.usage.parts
    assert f"Summary {len(first.summaries)}:" in second.rounds[0].body["messages"][1]["content"]


async def test_a_context_length_refusal_compacts_once_and_the_task_replies(
    client: Client,
    context_worker: Settings,
    windowed: ScriptedModelServer,
    store: SessionStore,
    cli_env: dict[str, str],
) -> None:
    session = f"refused-{uuid.uuid4().hex[:8]}"
    seed(store, session, 6)  # well under the window: no compaction before the refusal
    refusal = Fail(
        400,
        "This model's maximum context length is 16000 tokens. However, your "
        "messages resulted in 17020 tokens.",
    )
    responder = Responder([refusal, final("fits now")])
    windowed.responder = responder
    handle = await start_task(
        client, context_worker.task_queue, "Go on.", model=MODEL, session=session
    )
    result = await handle.result()
    assert result.status == "replied", result.error
    assert result.reply == "fits now"
    await keep_history(client, handle.id, "context_refusal_compacted")
    # One compaction (its stretch folded in as many calls as it took), then the round again.
    assert len(responder.rounds) == 2  # the refused request and the compacted one
    made = summaries(store, session)
    assert len(made) == len(responder.summaries) >= 1
    assert made[-1].meta["covers"] == [1, 6]  # every earlier task, and not the current one
    assert result.usage.parts["compaction"][MODEL].calls == len(responder.summaries)
    opening = responder.rounds[1].body["messages"][1]["content"]
    assert opening.startswith("(Summary of the earlier conversation") and made[-1].text in opening
    assert responder.rounds[1].body["messages"][2]["content"].endswith("Go on.")
    # The history shows the summary for what it is, with the stretch it covers.
    shown = await run_cli(cli_env, "history", session, "--json")
    assert shown.code == 0, shown.stderr
    compactions = [m for m in shown.json()["messages"] if m["kind"] == "compaction"]
    assert [(m["text"], m["covers"]) for m in compactions] == [
        (s.text, s.meta["covers"]) for s in made
    ]
    assert len(shown.json()["messages"]) == 6 + 2 + len(made)  # nothing rewritten or dropped


async def test_a_summarizer_that_keeps_failing_fails_the_task_as_context(
    client: Client, context_worker: Settings, windowed: ScriptedModelServer, store: SessionStore
) -> None:
    session = f"stuck-{uuid.uuid4().hex[:8]}"
    seed(store, session, 6)
    too_long = Fail(400, "prompt is too long: 17000 tokens > 16000 maximum")
    responder = Responder([too_long])
    responder.summary_steps = [too_long] * 3
    windowed.responder = responder
    handle = await start_task(
        client, context_worker.task_queue, "Go on.", model=MODEL, session=session
    )
    result = await handle.result()
    assert result.status == "failed"
    assert result.error is not None and result.error.kind == "context"
    await keep_history(client, handle.id, "context_compactions_failed")
    assert "3 compactions did not make it fit" in result.error.message
    assert "ERRANDS_MODELS" in result.error.message  # what to do about it
    assert len(responder.summaries) == 3
    assert summaries(store, session) == []


SIDE_QUESTION = "btw, how far along are you?"


async def test_a_side_question_on_a_compacted_session_replays_the_rounds_exact_prefix(
    client: Client, context_worker: Settings, windowed: ScriptedModelServer, store: SessionStore
) -> None:
    session = f"side-{uuid.uuid4().hex[:8]}"
    seed(store, session, 40)  # 80 KB: past the trigger, so round 0 compacts first
    # Round 0 delegates; round 1 is held at the server while the side question is asked, so the
    # round's request has a completed assistant turn for the side question to replay up to.
    held = Gate("round 1's model call")
    responder = Responder([parts(1), final("done", hold=held)])
    side_requests: list[RecordedRequest] = []

    def route(request: RecordedRequest) -> Any:
        if any(SIDE_QUESTION in (m.get("content") or "") for m in request.body["messages"]):
            side_requests.append(request)
            return Reply(text="Halfway.")
        return responder(request)

    windowed.responder = route
    handle = await start_task(
        client, context_worker.task_queue, "Take your time.", model=MODEL, session=session
    )
    await held.reached()
    tasks = errands.Client(client, context_worker, store=store)
    answer = await tasks.task(handle.id).btw(SIDE_QUESTION)
    assert answer.answer == "Halfway." and answer.path == "preferred"
    held.release()
    assert (await handle.result()).reply == "done"

    round_body, side = responder.rounds[1].body, side_requests[0].body
    assert side["tools"] == round_body["tools"]
    shared = side["messages"][:-1]  # all but the side question's own message
    assert shared == round_body["messages"][: len(shared)]
    assert shared[1]["content"].startswith("(Summary of the earlier conversation")
    assert len(responder.summaries) >= 1  # made once, by the round; the side question reused it


# -- previews and read_message ----------------------------------------------------------------


@pytest.mark.fast
def test_a_preview_keeps_the_start_and_names_the_tool_and_the_ref() -> None:
    text = "a" * 50_000
    shown = reading.preview(text, 12)
    assert shown.startswith("a" * reading.PREVIEW_KEEP)
    assert shown.endswith("… 48,800 characters omitted; read_message(ref 12) shows all")
    assert reading.preview("short", 3) == "short"


@pytest.mark.fast
def test_read_message_pages_a_long_text_and_refuses_a_bad_call() -> None:
    row = rows("branch", size=40_000)[0]
    first, error = reading.read_page(row, reading.Read(1))
    assert not error and first.startswith("(ref 1, page 1 of 3: characters 1-16,000 of 40,000")
    last, _ = reading.read_page(row, reading.Read(1, 3))
    assert last.endswith("x" * 8_000) and "the last page" in last
    assert reading.read_page(row, reading.Read(1, 4)) == (
        "ref 1 has 3 page(s) of 16,000 characters: ask for 1-3.",
        True,
    )
    assert reading.read_page(None, reading.Read(9))[1]
    assert reading.parse_read('{"ref": 0}') == (
        "`ref` must be the number a 'read_message(ref N)' marker names, such as 12."
    )
    assert reading.parse_read('{"ref": 4, "page": 2}') == reading.Read(4, 2)
    assert reading.parse_read('{"result": 4}') == reading.Read(4, 1, result=True)
    assert reading.parse_read('{"result": 4}') != reading.Read(4, 1), "a result is not a ref"


WIDE = "openai:ctx-64k"


@pytest.fixture
async def wide_worker(
    client: Client, settings: Settings, store: SessionStore, windowed: ScriptedModelServer
) -> AsyncIterator[Settings]:
    windowed.limit_context("ctx-64k", 64_000)
    async with worker_for(client, settings, store, windowed, {WIDE: 64_000}) as own:
        yield own


MARKER = re.compile(r"read_message\(ref (\d+)\) shows all")


async def test_a_bulky_branch_output_renders_as_a_preview_and_read_message_shows_it_all(
    client: Client, wide_worker: Settings, windowed: ScriptedModelServer, store: SessionStore
) -> None:
    session = f"preview-{uuid.uuid4().hex[:8]}"
    seed(store, session, 60)  # 120 KB before the task: with the output below, past the trigger
    output = "".join(f"finding {n:05d}; " for n in range(3_200))  # 51,200 characters
    pages = -(-len(output) // reading.PAGE_CHARS)

    def read(page: int) -> Any:
        def step(request: RecordedRequest) -> Reply:
            refs = MARKER.findall(json.dumps(responder.rounds[1].body["messages"]))
            return Reply(calls=[Call("read_message", {"ref": int(refs[0]), "page": page})])

        return step

    responder = Responder(
        [parts(1)] + [read(page) for page in range(1, pages + 1)] + [final("surveyed")],
        branch=output,
    )
    windowed.responder = responder
    handle = await start_task(
        client, wide_worker.task_queue, "Survey it all.", model=WIDE, session=session
    )
    result = await handle.result()
    assert result.status == "replied", result.error
    await keep_history(client, handle.id, "read_message_pages")
    assert windowed.too_long == []
    (branch,) = store.list_by_prefix(session, ids.branch_rows_prefix(handle.id, 0))
    ref = branch.seq
    # Round 1 shows the output as a preview naming the tool and its ref, and offers the tool.
    round1 = responder.rounds[1].body
    assert "read_message" in [t["function"]["name"] for t in round1["tools"]]
    results = json.loads(round1["messages"][-1]["content"])
    assert results[0]["output"].endswith(f"read_message(ref {ref}) shows all")
    assert len(results[0]["output"]) < 2_000
    # Each page reached the next step; together they are the output, character for character.
    shown = [r.body["messages"][-1]["content"] for r in responder.rounds[2:]]
    assert len(shown) == pages
    assert "".join(page.split(")\n", 1)[1] for page in shown) == output


def _fetch(arguments: dict[str, Any]) -> str:
    return f"page {arguments.get('n')}: " + "lorem ipsum " * 340  # about 4 KB


TYPES = [
    SubtaskType(
        key="fetch",
        description="Fetch numbered pages with the `fetch` tool and report on them.",
        guidance="`fetch` subtasks read pages one at a time.",
        instructions="Fetch the pages you are asked for, one call at a time, then answer.",
        tools=[
            WorkTool(
                spec=tool_spec("fetch", "Fetch page n.", n="integer"),
                run=_fetch,
            )
        ],
    )
]


@pytest.fixture
async def fetch_worker(
    client: Client, settings: Settings, store: SessionStore, windowed: ScriptedModelServer
) -> AsyncIterator[Settings]:
    async with worker_for(
        client, settings, store, windowed, {MODEL: WINDOW}, subtask_types="tests.test_context:TYPES"
    ) as own:
        yield own


async def test_a_branch_of_forty_steps_of_4_kb_results_compacts_its_thread_and_completes(
    client: Client, fetch_worker: Settings, windowed: ScriptedModelServer, store: SessionStore
) -> None:
    fetched: list[RecordedRequest] = []

    def branch(request: RecordedRequest) -> Reply:
        fetched.append(request)
        if len(fetched) <= 40:
            return Reply(calls=[Call("fetch", {"n": len(fetched)})])
        return Reply(text="read all forty pages")

    fetch = {"type": "fetch", "prompt": "read pages 1 to 40", "references": []}
    responder = Responder(
        [
            Reply(calls=[Call("delegate", {"reply": "Reading.", "subtasks": [fetch]})]),
            final("read"),
        ],
    )
    windowed.responder = lambda r: (
        responder(r) if is_summary_call(r) or not is_branch_request(r) else branch(r)
    )
    handle = await start_task(
        client,
        fetch_worker.task_queue,
        "Read the forty pages.",
        model=MODEL,
        settings=RoundSettings(branch_step_limit=45),
    )
    result = await handle.result()
    assert result.status == "replied", result.error
    assert windowed.too_long == []  # no request of the branch passed the window
    (row,) = store.list_by_prefix(result.session_id, ids.branch_rows_prefix(handle.id, 0))
    assert row.meta["status"] == "completed" and row.text == "read all forty pages"
    thread = row.meta["thread_id"]
    await keep_history(client, thread, "branch_thread_compacted")
    assert summaries(store, thread)  # the thread was compacted, and kept its opening
    logged = [e for e in store.list_events(handle.id) if e.type == "compaction"]
    assert [e.cause for e in logged] == [s.id for s in summaries(store, thread)]
    assert {e.data["where"] for e in logged} == {"r0/b1"}
    assert all("read pages 1 to 40" in r.body["messages"][1]["content"] for r in fetched)
    assert len(fetched) == 41
    for request in fetched:  # one summary at most, right after the opening; no stray system turn
        messages = request.body["messages"]
        assert [m["role"] for m in messages[1:]].count("system") == 0
        summaries_shown = [
            m for m in messages if (m.get("content") or "").startswith("(Summary of the earlier")
        ]
        assert len(summaries_shown) <= 1
        assert not summaries_shown or messages[2] is summaries_shown[0]
        assert messages[3]["role"] != "tool" if summaries_shown else True
    assert result.usage.parts["compaction"][MODEL].calls == len(responder.summaries) > 0


async def test_kill_9_of_the_worker_during_the_summary_call_leaves_one_summary_it_returned(
    client: Client,
    store: SessionStore,
    model_server: ScriptedModelServer,
    process_workers: ProcessWorkers,
) -> None:
    queue, env = process_workers.queue, process_workers.env
    env["ERRANDS_MODELS"] = json.dumps({"openai:ctx-kill": {"context_window": WINDOW}})
    model_server.limit_context("ctx-kill", WINDOW)
    session = f"crash-{uuid.uuid4().hex[:8]}"
    seed(store, session, 28, size=1_000)  # 28 KB: past the trigger of a 16,000-token window
    returned: list[str] = []
    summary_calls: list[RecordedRequest] = []
    dies_first = Gate("the first summary call, whose worker is killed")

    def answer(request: RecordedRequest) -> Reply:
        if not is_summary_call(request):
            return final("survived")
        summary_calls.append(request)
        if len(summary_calls) == 1:
            return Reply(text="the summary nobody received", hold=dies_first)
        returned.append(f"summary {len(summary_calls)}, made after the restart")
        return Reply(text=returned[-1])

    model_server.responder = answer
    first = spawn_worker(env)
    try:
        handle = await start_task(
            client,
            queue,
            "Go on.",
            model="openai:ctx-kill",
            session=session,
            settings=RoundSettings(model_timeout_seconds=20, heartbeat_timeout_seconds=2),
        )
        await dies_first.reached()
        kill_worker(first)
        with worker_process(env):
            result = await asyncio.wait_for(handle.result(), 120)
    finally:
        model_server.responder = None
    assert result.reply == "survived"
    made = summaries(store, session)
    assert [s.text for s in made] == returned  # once each, exactly as the model wrote them
    assert len({s.id for s in made}) == len(made) >= 1
    assert model_server.too_long == []


async def test_a_server_with_a_smaller_window_than_the_catalog_says_is_compacted_to_it(
    client: Client, context_worker: Settings, windowed: ScriptedModelServer, store: SessionStore
) -> None:
    # The catalog knows nothing of `ctx-small` (32,000 tokens by default); the server has 8,192.
    windowed.limit_context("ctx-small", 8_192)
    session = f"small-{uuid.uuid4().hex[:8]}"
    seed(store, session, 10)  # 20 KB: fits 32,000 tokens, not 8,192
    responder = Responder([final("fits the real window")])
    windowed.responder = responder
    handle = await start_task(
        client, context_worker.task_queue, "Go on.", model="openai:ctx-small", session=session
    )
    result = await handle.result()
    assert result.status == "replied", result.error
    assert len(windowed.too_long) == 1  # refused once, then compacted to the window it stated
    assert responder.summaries and all(
        len(r.raw) // 4 + r.body["max_completion_tokens"] <= 8_192 for r in responder.summaries
    )
