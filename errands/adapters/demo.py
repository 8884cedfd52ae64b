"""The offline ``demo`` model: deterministic rules served on loopback, so the real OpenAI client
path, the round loop, branches and the reply all run with no API key.

Rules: a round that may delegate and has not yet done so splits the latest user message into
three subtasks citing it; a branch answers its instructions in a short paragraph; a round that
has branch results replies with them. Offered the almanac's ``lookup`` tool (``make demo`` serves
``errands.adapters.demo_tools``), the ``facts`` branch first looks its subject up and quotes
the answer.
"""

from __future__ import annotations

import json
import re
from typing import Any

from errands.adapters.scripted import Call, RecordedRequest, Reply, ScriptedModelServer

_ASPECTS = (
    ("facts", "List the key facts and assumptions in the request below."),
    ("risks", "Name the main risks and open questions in the request below."),
    ("steps", "Propose three concrete next steps for the request below."),
)


ALMANAC_LOOKUP = "mcp__almanac__lookup"
"""The demo MCP server's tool, as the model sees it (``errands.adapters.demo_tools``)."""


def demo_responder(request: RecordedRequest) -> Reply:
    body = request.body
    tools = [t["function"]["name"] for t in body.get("tools", [])]
    messages: list[dict[str, Any]] = body.get("messages", [])
    if not tools or "final_reply" not in tools:
        return _branch_answer(messages, tools)
    results = _delegate_results(messages)
    if results is None and "delegate" in tools:
        ref = _latest_ref(messages)
        subtasks = [
            {"type": "general", "prompt": prompt, "references": [ref] if ref else []}
            for _, prompt in _ASPECTS
        ]
        return Reply(
            calls=[
                Call(
                    "delegate",
                    {
                        "reply": "On it: I split this into three parallel subtasks.",
                        "subtasks": subtasks,
                    },
                )
            ]
        )
    lines = ["Here is what the parallel subtasks found:"]
    for item in results or []:
        status = item.get("status")
        output = (
            item.get("output", "").strip()
            if status == "completed"
            else f"(failed: {item.get('output')})"
        )
        lines.append(f"- {item.get('subtask_id')}: {output}")
    if results is None:
        lines = ["(demo) I can answer directly: " + _latest_user_text(messages)[:200]]
    return Reply(calls=[Call("final_reply", {"text": "\n".join(lines)})])


def _branch_answer(messages: list[dict[str, Any]], tools: list[str]) -> Reply:
    instructions = _latest_user_text(messages)
    first_line = instructions.splitlines()[0] if instructions else ""
    quoted = (
        instructions.split("message ---\n", 1)[-1].strip() if "message ---" in instructions else ""
    )
    subject = quoted[:120] or "the request"
    aspect = next((key for key, prompt in _ASPECTS if prompt == first_line), "notes")
    looked_up = [m for m in messages if m.get("role") == "tool"]
    if aspect == "facts" and ALMANAC_LOOKUP in tools and not looked_up:
        return Reply(calls=[Call(ALMANAC_LOOKUP, {"topic": subject})])
    if looked_up:
        found = str(looked_up[-1].get("content") or "").strip()
        return Reply(text=f"[{aspect}] The almanac ({ALMANAC_LOOKUP}) says: {found}")
    return Reply(
        text=f"[{aspect}] Considered {subject!r}: this is the demo model's {aspect} for it."
    )


def _delegate_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    for message in reversed(messages):
        if message.get("role") == "tool":
            try:
                parsed = json.loads(message.get("content") or "")
            except json.JSONDecodeError:
                continue
            if isinstance(parsed, list):
                return parsed
    return None


def _latest_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


def _latest_ref(messages: list[dict[str, Any]]) -> int | None:
    match = re.match(r"\[ref (\d+)\]", _latest_user_text(messages))
    return int(match.group(1)) if match else None


DEMO_KEPT_REQUESTS = 20
"""The demo server lives as long as its worker: it keeps only its latest requests, never one
per request it ever answered (each holds the whole conversation it was sent)."""


def start_demo_server() -> ScriptedModelServer:
    return ScriptedModelServer(responder=demo_responder, keep_requests=DEMO_KEPT_REQUESTS).start()
