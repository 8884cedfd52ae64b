"""The benchmarks' model: a zero-latency, rule-driven responder for the scripted model server.

The task's shape travels in the model name, so one server answers every benchmark and every
task without per-task scripting: ``bench-d{D}-b{B}[-ask][-slow][-tool][-main-tool]`` delegates
``D`` rounds of ``B`` branches each, then replies; with ``-ask`` it asks the user one question
once its delegations are done (at once with ``d0``) and waits for the answer before replying;
with ``-slow`` every round after the first delegation takes ``SLOW_SECONDS`` to answer (a window
for a side question while a round is in flight); with ``-tool`` each branch calls the first MCP
tool its request offers (``mcp__…``) once, then answers in text; with ``-main-tool`` the main
agent does the same in its first round before it goes on (replies, with ``d0``). A side question
gets a short plain answer, a compaction's summary call a short summary.
The rules read only the request, so a retried or replayed call gets the same answer.

Model names beginning with ``peer-`` answer the OpenAI Agents peer of B3 (see ``bench._peer``).
"""

from __future__ import annotations

import re
from typing import Any

from errands.adapters.scripted import Call, RecordedRequest, Reply
from errands.agent.prompts import SUMMARY_INSTRUCTIONS

SIDE_MARKER = "Side question:"
"""Start of the line that errands puts in a side question's last user message."""

QUESTION = {
    "question": "Which database should the new service use?",
    "header": "Database",
    "options": [
        {"label": "PostgreSQL", "description": "Recommended: we already run it"},
        {"label": "SQLite"},
    ],
}
ANSWER_LABEL = "SQLite"
SLOW_SECONDS = 1.5

TOOL_ARGUMENT = "lisbon"
"""What a ``-tool`` branch passes for each required string argument of the tool it calls."""

_SHAPE = re.compile(
    r"^bench-d(?P<rounds>\d+)-b(?P<branches>\d+)(?P<ask>-ask)?(?P<slow>-slow)?(?P<tool>-tool)?"
    r"(?P<main_tool>-main-tool)?$"
)


def model_name(
    delegations: int,
    branches: int,
    *,
    ask: bool = False,
    slow: bool = False,
    tool: bool = False,
    main_tool: bool = False,
) -> str:
    """The errands ``provider:model`` spec for a task of this shape."""
    return (
        f"openai:bench-d{delegations}-b{branches}"
        + ("-ask" if ask else "")
        + ("-slow" if slow else "")
        + ("-tool" if tool else "")
        + ("-main-tool" if main_tool else "")
    )


def responder(request: RecordedRequest) -> Reply | None:
    body = request.body
    model = str(body.get("model", ""))
    messages: list[dict[str, Any]] = body.get("messages", [])
    if model.startswith("peer-"):
        return _peer(model, messages)
    shape = _SHAPE.match(model)
    if shape is None:
        return None  # unexpected: the server refuses it loudly
    if _is_side(messages):
        return Reply(text="So far: three findings, nothing blocking.")
    if messages and messages[0].get("content") == SUMMARY_INSTRUCTIONS:
        return Reply(text="Summary: the user planned a deployment; budget and timeline agreed.")
    offered: list[dict[str, Any]] = [t["function"] for t in body.get("tools", [])]
    tools = [t["name"] for t in offered]
    if "final_reply" not in tools:
        if shape["tool"] and not any(m.get("role") == "tool" for m in messages):
            call = _mcp_call(offered)
            if call is not None:
                return Reply(calls=[call])
        return _branch(messages)
    if shape["main_tool"] and not any(m.get("role") == "tool" for m in messages):
        call = _mcp_call(offered)
        if call is not None:
            return Reply(calls=[call])
    called = _called_tools(messages)
    delegations = called.count("delegate")
    if shape["ask"] and "ask_user" not in called and delegations >= int(shape["rounds"]):
        return Reply(calls=[Call("ask_user", {"questions": [QUESTION]})])
    delay = SLOW_SECONDS if shape["slow"] and "delegate" in called else 0.0
    if delegations < int(shape["rounds"]) and "delegate" in tools:
        branches = int(shape["branches"])
        subtasks = [
            {"type": "general", "prompt": f"Part {k} of the work: look into it.", "references": [1]}
            for k in range(1, branches + 1)
        ]
        return Reply(
            calls=[
                Call("delegate", {"reply": f"Splitting into {branches}.", "subtasks": subtasks})
            ],
            delay=delay,
        )
    return Reply(
        calls=[Call("final_reply", {"text": "Done: here is the combined answer."})], delay=delay
    )


def _is_side(messages: list[dict[str, Any]]) -> bool:
    last = messages[-1] if messages else {}
    return last.get("role") == "user" and SIDE_MARKER in str(last.get("content") or "")


def _branch(messages: list[dict[str, Any]]) -> Reply:
    first = next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")
    return Reply(text=f"Finding for {first.splitlines()[0][:60] if first else 'the part'}: fine.")


def _mcp_call(offered: list[dict[str, Any]]) -> Call | None:
    """A call of the first MCP tool offered, every required string argument ``TOOL_ARGUMENT``."""
    tool = next((t for t in offered if str(t["name"]).startswith("mcp__")), None)
    if tool is None:
        return None  # no server served the branch: it answers in text, and B1 says so
    schema = tool.get("parameters") or {}
    properties = schema.get("properties") or {}
    arguments = {
        name: TOOL_ARGUMENT
        for name in schema.get("required") or []
        if (properties.get(name) or {}).get("type") == "string"
    }
    return Call(tool["name"], arguments)


def _called_tools(messages: list[dict[str, Any]]) -> list[str]:
    return [
        call["function"]["name"]
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
    ]


def _peer(model: str, messages: list[dict[str, Any]]) -> Reply:
    """The same conversation through the Agents SDK: three sub-agent calls, then the reply."""
    if model == "peer-branch":
        return _branch(messages)
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    answered = any(m.get("role") == "tool" for m in messages[last_user + 1 :])
    if answered:
        return Reply(text="Done: here is the combined answer.")
    return Reply(
        calls=[
            Call("general", {"input": f"Part {k} of the work: look into it."}) for k in (1, 2, 3)
        ]
    )
