"""B3: history size and time per task against the length of the session, errands beside a peer.

A session is seeded with N prior messages (alternating user and assistant, about 100
characters each, written directly with ``store.append_once``), then tasks run in it: round 0
delegates 3 branches, round 1 replies. The first task of a session longer than the model's
window compacts it (its time is reported apart); the tasks after it are measured: their
history as exported JSON (bytes) and events, for the task's workflow alone and with its 3
child workflows, and their time. Each figure is the median over those tasks.

The peer runs the same conversation through temporalio's OpenAI Agents integration
(``temporalio-openai-agents``) against the same scripted server: the workflow takes the N
messages plus the new one as the agent's input; a main agent calls a sub-agent tool three times
and answers. Its history is its single workflow's.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
import uuid
from datetime import timedelta
from typing import Any

from bench._harness import FAKE_KEY, Stack, stack_for
from bench._measure import history_of, task_tree
from bench._model import model_name
from errands.contracts.messages import NewMessage

TITLE = "B3 · history growth with the session's length"
FULL = {"sizes": [10, 1000, 10000], "peer": True, "repeats": 9}
SMOKE = {"sizes": [3], "peer": True}
TARGET = 0.10
TIME_TARGET = 0.25

MODEL = model_name(1, 3)
TEXT = "Compare three ways to run this service and recommend one."


def prior_text(i: int) -> str:
    role = "user asks" if i % 2 == 0 else "assistant answers"
    return f"Message {i}: the {role} about the deployment plan, its budget and its timeline."


def conversation(n: int) -> list[dict[str, str]]:
    items = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": prior_text(i)} for i in range(n)
    ]
    return [*items, {"role": "user", "content": TEXT}]


def seed(stack: Stack, session_id: str, n: int) -> None:
    for i in range(n):
        user = i % 2 == 0
        stack.store.append_once(
            NewMessage(
                id=f"seed:{session_id}:{i}",
                session_id=session_id,
                role="user" if user else "assistant",
                kind="user" if user else "reply",
                text=prior_text(i),
            )
        )


def medians(n: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the runs of one size (each figure on its own)."""
    return {"prior_messages": n, "runs": len(runs)} | {
        key: round(statistics.median(r[key] for r in runs), 2) for key in runs[0]
    }


async def errands_sizes(stack: Stack, sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    settings = stack.settings()
    await stack.worker(settings)
    out = []
    for n in sizes:
        runs = []
        session = f"b3-{n}-{uuid.uuid4().hex[:6]}"
        await asyncio.to_thread(seed, stack, session, n)
        # The session's first task: the one that compacts a session longer than the window.
        first, _ = await stack.run_task(settings, MODEL, text=TEXT, session_id=session)
        made = len(await asyncio.to_thread(stack.store.list_kind, session, "summary"))
        for _ in range(repeats):
            elapsed, wid = await stack.run_task(settings, MODEL, text=TEXT, session_id=session)
            tree = await task_tree(stack.client, wid)
            runs.append(
                {
                    "seconds": elapsed,
                    "task_bytes": tree["bytes"],
                    "task_events": tree["events"],
                    "with_children_bytes": tree["total_bytes"],
                    "with_children_events": tree["total_events"],
                }
            )
        out.append(medians(n, runs) | {"first_task_seconds": round(first, 2), "summaries": made})
    return out


async def peer_sizes(stack: Stack, sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    # Imported here: the peer is an optional install, and errands' figures stand without it.
    # The Agents SDK exports traces to OpenAI unless told not to; nothing may leave loopback.
    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    from agents import set_tracing_disabled
    from agents.models.openai_provider import OpenAIProvider
    from openai import AsyncOpenAI
    from temporalio.client import Client
    from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
    from temporalio.worker import Worker

    from bench._peer import PeerTask

    set_tracing_disabled(True)
    openai = AsyncOpenAI(base_url=stack.model.openai_base_url, api_key=FAKE_KEY, max_retries=0)
    plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=120)),
        model_provider=OpenAIProvider(openai_client=openai, use_responses=False),
    )
    client = await Client.connect(stack.server.address, plugins=[plugin])
    queue = f"peer-{uuid.uuid4().hex[:8]}"
    await stack.run_worker(Worker(client, task_queue=queue, workflows=[PeerTask]))
    out = []
    try:
        for n in sizes:
            items = conversation(n)
            runs = []
            for _ in range(repeats):
                wid = f"peer-{n}-{uuid.uuid4().hex[:6]}"
                began = time.perf_counter()
                await client.execute_workflow(PeerTask.run, items, id=wid, task_queue=queue)
                elapsed = time.perf_counter() - began
                events, size = await history_of(client, wid)
                runs.append(
                    {
                        "seconds": elapsed,
                        "task_bytes": size,
                        "task_events": len(events),
                        "input_payload_bytes": len(json.dumps(items).encode()),
                    }
                )
            out.append(medians(n, runs))
    finally:
        await openai.close()
    return out


def growth(rows: list[dict[str, Any]], key: str) -> float:
    return round(rows[-1][key] / rows[0][key] - 1, 4)


async def run(
    sizes: list[int], peer: bool, repeats: int = 1, stack: Stack | None = None
) -> dict[str, Any]:
    async with stack_for("b3", stack) as stack:
        ours = await errands_sizes(stack, sizes, repeats)
        theirs: list[dict[str, Any]] = []
        missing = None
        if peer:
            try:
                theirs = await peer_sizes(stack, sizes, repeats)
            except ImportError as error:
                missing = (
                    f"the peer was not run: {error.name} is not installed "
                    "(`make bench` installs it: pip install -e '.[bench]')"
                )
    result: dict[str, Any] = {
        "shape": "round 0 delegates 3 branches, round 1 replies; peer: main agent, 3 sub-agent "
        "tool calls, reply",
        "message_chars": len(prior_text(1000)),
        "errands": ours,
        "errands_growth": {
            "task_bytes": growth(ours, "task_bytes"),
            "with_children_bytes": growth(ours, "with_children_bytes"),
            "task_events": growth(ours, "task_events"),
            "seconds": growth(ours, "seconds"),
        },
        "target": f"errands grows <= {TARGET:.0%} in history and <= {TIME_TARGET:.0%} in time "
        f"per task from {sizes[0]} to {sizes[-1]} messages",
    }
    if missing:
        result["peer_missing"] = missing
    if theirs:
        result["peer"] = theirs
        result["peer_growth"] = {
            "task_bytes": growth(theirs, "task_bytes"),
            "task_events": growth(theirs, "task_events"),
        }
    return result


def worst_growth(result: dict[str, Any]) -> float:
    g = result["errands_growth"]
    return max(g["task_bytes"], g["with_children_bytes"])


def verdict(result: dict[str, Any]) -> tuple[str, str, bool]:
    first, last = result["errands"][0], result["errands"][-1]
    time_growth = result["errands_growth"].get("seconds")
    figure = (
        f"errands {worst_growth(result):+.1%} bytes from {first['prior_messages']:,} to "
        f"{last['prior_messages']:,} messages"
    )
    if time_growth is not None:
        figure += f", {time_growth:+.1%} time per task"
    if "peer_growth" in result:
        figure += f"; peer {result['peer_growth']['task_bytes']:+.0%}"
    ok = worst_growth(result) <= TARGET and (time_growth is None or time_growth <= TIME_TARGET)
    return figure, f"≤ {TARGET:+.0%} bytes, ≤ {TIME_TARGET:+.0%} time", ok


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Shape: {result['shape']}. Prior messages of about {result['message_chars']} "
        "characters each.",
        "",
        "| prior messages | errands task: bytes / events | errands with its 3 children: "
        "bytes / events | errands task s | session's first task s (summaries) "
        "| peer (OpenAI Agents integration): bytes / events | peer s |",
        "|---|---|---|---|---|---|---|",
    ]
    peer = {r["prior_messages"]: r for r in result.get("peer", [])}
    for r in result["errands"]:
        p = peer.get(r["prior_messages"])
        theirs = f"{p['task_bytes']:,} / {p['task_events']} | {p['seconds']}" if p else "— | —"
        lines.append(
            f"| {r['prior_messages']:,} | {r['task_bytes']:,} / {r['task_events']} | "
            f"{r['with_children_bytes']:,} / {r['with_children_events']} | {r['seconds']} | "
            f"{r.get('first_task_seconds', '—')} ({r.get('summaries', '—')}) | {theirs} |"
        )
    g = result["errands_growth"]
    lines += [
        "",
        f"**errands growth from the smallest to the largest session: task "
        f"{g['task_bytes']:+.1%} bytes, with children {g['with_children_bytes']:+.1%} bytes, "
        f"{g['task_events']:+.1%} events; time per task {g.get('seconds', 0):+.1%}** (targets "
        "≤ +10% and ≤ +25%).",
    ]
    if "peer_missing" in result:
        lines.append(result["peer_missing"] + ".")
    if "peer_growth" in result:
        pg = result["peer_growth"]
        largest = result["peer"][-1]
        lines.append(
            f"Peer growth: {pg['task_bytes']:+.0%} bytes, {pg['task_events']:+.0%} events; its "
            f"workflow input alone is {largest['input_payload_bytes']:,} bytes at "
            f"{largest['prior_messages']:,} messages (Temporal refuses a payload over 2 MB), and "
            "each of its main agent's model activities carries the transcript again."
        )
    lines.append(
        "Single runs can differ by a workflow task (3 events, about 1.5 kB) either way: how "
        "many child completions one workflow task takes in depends on timing; hence medians. "
        "A session longer than the model's window is compacted by its first task (the "
        "summaries column: calls of the default 32,000-token window); later tasks read and "
        "render only the latest summary and what follows it."
    )
    return "\n".join(lines)
