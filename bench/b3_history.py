"""B3: history size per task against the length of the session, errands beside a peer.

A session is seeded with N prior messages (alternating user and assistant, about 100
characters each, written directly with ``store.append_once``), then one task runs in it: round
0 delegates 3 branches, round 1 replies. Its history is measured as exported JSON (bytes) and
events, for the task's workflow alone and with its 3 child workflows.

The peer runs the same conversation through temporalio's OpenAI Agents integration
(``temporalio-openai-agents``) against the same scripted server: the workflow takes the N
messages plus the new one as the agent's input; a main agent calls a sub-agent tool three times
and answers. Its history is its single workflow's.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from datetime import timedelta
from typing import Any

from bench._harness import Stack, history_of, task_tree
from bench._model import model_name
from errands.contracts import NewMessage

TITLE = "B3 · history growth with the session's length"
FULL = {"sizes": [10, 1000, 10000], "peer": True}
SMOKE = {"sizes": [2, 20], "peer": True}
TARGET = 0.10

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


async def errands_sizes(stack: Stack, sizes: list[int]) -> list[dict[str, Any]]:
    settings = stack.settings()
    await stack.worker(settings)
    out = []
    for n in sizes:
        session = f"b3-{n}-{uuid.uuid4().hex[:6]}"
        await asyncio.to_thread(seed, stack, session, n)
        _, wid = await stack.run_task(settings, MODEL, text=TEXT, session_id=session)
        tree = await task_tree(stack.client, wid)
        out.append(
            {
                "prior_messages": n,
                "task_bytes": tree["bytes"],
                "task_events": tree["events"],
                "with_children_bytes": tree["total_bytes"],
                "with_children_events": tree["total_events"],
            }
        )
    return out


async def peer_sizes(stack: Stack, sizes: list[int]) -> list[dict[str, Any]]:
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
    openai = AsyncOpenAI(
        base_url=stack.model.openai_base_url, api_key="sk-bench-not-a-real-key", max_retries=0
    )
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
            wid = f"peer-{n}-{uuid.uuid4().hex[:6]}"
            items = conversation(n)
            await client.execute_workflow(PeerTask.run, items, id=wid, task_queue=queue)
            events, size = await history_of(client, wid)
            out.append(
                {
                    "prior_messages": n,
                    "task_bytes": size,
                    "task_events": len(events),
                    "input_payload_bytes": len(json.dumps(items).encode()),
                }
            )
    finally:
        await openai.close()
    return out


def growth(rows: list[dict[str, Any]], key: str) -> float:
    return round(rows[-1][key] / rows[0][key] - 1, 4)


async def run(sizes: list[int], peer: bool) -> dict[str, Any]:
    async with Stack("b3") as stack:
        ours = await errands_sizes(stack, sizes)
        theirs: list[dict[str, Any]] | str = []
        if peer:
            theirs = await peer_sizes(stack, sizes)
    result: dict[str, Any] = {
        "shape": "round 0 delegates 3 branches, round 1 replies; peer: main agent, 3 sub-agent "
        "tool calls, reply",
        "message_chars": len(prior_text(1000)),
        "errands": ours,
        "errands_growth": {
            "task_bytes": growth(ours, "task_bytes"),
            "with_children_bytes": growth(ours, "with_children_bytes"),
            "task_events": growth(ours, "task_events"),
        },
        "target": f"errands grows <= {TARGET:.0%} from {sizes[0]} to {sizes[-1]} messages",
    }
    if theirs:
        result["peer"] = theirs
        result["peer_growth"] = {
            "task_bytes": growth(theirs, "task_bytes"),
            "task_events": growth(theirs, "task_events"),
        }
    return result


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Shape: {result['shape']}. Prior messages of about {result['message_chars']} "
        "characters each.",
        "",
        "| prior messages | errands task: bytes / events | errands with its 3 children: "
        "bytes / events | peer (OpenAI Agents integration): bytes / events |",
        "|---|---|---|---|",
    ]
    peer = {r["prior_messages"]: r for r in result.get("peer", [])}
    for r in result["errands"]:
        p = peer.get(r["prior_messages"])
        theirs = f"{p['task_bytes']:,} / {p['task_events']}" if p else "—"
        lines.append(
            f"| {r['prior_messages']:,} | {r['task_bytes']:,} / {r['task_events']} | "
            f"{r['with_children_bytes']:,} / {r['with_children_events']} | {theirs} |"
        )
    g = result["errands_growth"]
    lines += [
        "",
        f"**errands growth from the smallest to the largest session: task "
        f"{g['task_bytes']:+.1%} bytes, with children {g['with_children_bytes']:+.1%} bytes, "
        f"{g['task_events']:+.1%} events** (target ≤ +10%).",
    ]
    if "peer_growth" in result:
        pg = result["peer_growth"]
        largest = result["peer"][-1]
        lines.append(
            f"Peer growth: {pg['task_bytes']:+.0%} bytes, {pg['task_events']:+.0%} events; its "
            f"workflow input alone is {largest['input_payload_bytes']:,} bytes at "
            f"{largest['prior_messages']:,} messages (Temporal refuses a payload over 2 MB)."
        )
    return "\n".join(lines)
