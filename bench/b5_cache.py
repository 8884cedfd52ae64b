"""B5: prompt-cache friendliness, read from the raw requests the scripted server received.

Providers cache a request's prefix: the tools, then the system prompt and the messages in order
(on the Chat Completions wire the system prompt is the first message). For two requests A and B,
the reused fraction is the length of the longest byte-identical common prefix of A and B divided
by A's length, over this serialization of each request body as received: the ``tools`` array,
the ``system`` blocks (Anthropic), then each element of the ``messages`` array, each as compact
JSON in the order and key order the client sent, newline-separated, with ``cache_control``
markers left out (they say where to cache, not what). Beside it: how many of A's messages
reappear unchanged at the same positions in B, whether the tools are byte-identical, and the
cached input tokens B's response reported, as the provider reports them (OpenAI
``prompt_tokens_details.cached_tokens``, Anthropic ``cache_read_input_tokens``), out of all of
B's input tokens; the scripted server runs its prompt cache, which counts a prefix it has seen
(on Anthropic: written at a breakpoint) as read. (The JSON results also hold the prefix over the
whole raw body, which ends early by construction, and the cache writes B reported.)

Scenarios (one task at a time, zero-latency model unless stated), on the OpenAI wire and again
on the Anthropic wire:

- rounds: a 3-round task (two delegating rounds of 3 branches, then the reply); each round's
  request against the next round's;
- side question while a round is in flight: round 1's model call answers after 1.5 s, and the
  side question (update ``ask_side_question``) goes in meanwhile; against round 1's request;
- side question while the task waits on the user (asked after one delegating round);
  against that round's latest request;
- side question after the task finished (``SideQuestionWorkflow`` from the result's
  ``last_round``, as ``errands btw`` does); against the last round's request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from typing import Any

from pydantic import SecretStr

from bench._harness import FAKE_KEY, Stack, stack_for, wait_for
from bench._model import ANSWER_LABEL, SIDE_MARKER, model_name
from errands.adapters.scripted import RecordedRequest, Responder
from errands.contracts.activities import SideAnswer, SideQuestionInput
from errands.contracts.messages import Usage
from errands.contracts.workflows import SideQuestion, TaskResult
from errands.settings import Settings

TITLE = "B5 · prompt-cache friendliness"
FULL: dict[str, Any] = {}
SMOKE: dict[str, Any] = {}

QUESTION = "btw, what have you found so far?"
WIRES = ("openai", "anthropic")


def prompt_bytes(body: dict[str, Any]) -> bytes:
    system = body.get("system")
    parts = [_json(body.get("tools", []))]
    if system:
        parts.append(_json(system))
    parts += [_json(m) for m in body.get("messages", [])]
    return "\n".join(parts).encode()


def common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def compare(a: RecordedRequest, b: RecordedRequest) -> dict[str, Any]:
    pa, pb = prompt_bytes(a.body), prompt_bytes(b.body)
    ma, mb = a.body.get("messages", []), b.body.get("messages", [])
    kept = 0
    for x, y in zip(ma, mb, strict=False):
        if _json(x) != _json(y):
            break
        kept += 1
    reported = b.reported_usage or Usage()
    return {
        "wire": a.api,
        "request_bytes": len(pa),
        "next_bytes": len(pb),
        "prefix_bytes": common_prefix(pa, pb),
        "prefix_fraction": round(common_prefix(pa, pb) / len(pa), 4),
        "messages_kept": f"{kept}/{len(ma)}",
        "tools_identical": _json(a.body.get("tools")) == _json(b.body.get("tools")),
        "raw_body_prefix_fraction": round(common_prefix(a.raw, b.raw) / len(a.raw), 4),
        "reported_input_tokens": reported.input_tokens,
        "reported_cached_tokens": reported.cached_tokens,
        "reported_cache_write_tokens": reported.cache_write_tokens,
    }


def rounds_of(stack: Stack, model: str) -> list[RecordedRequest]:
    """The task's main-round requests, in order (not branches, not side questions)."""
    wire, name = model.split(":", 1)
    return [
        r
        for r in stack.model.requests_for(name)
        if r.api == wire
        and any(t["function"]["name"] == "final_reply" for t in as_chat(r).body.get("tools", []))
        and not is_side(r)
    ]


def is_side(request: RecordedRequest) -> bool:
    messages = as_chat(request).body.get("messages", [])
    return bool(messages) and SIDE_MARKER in str(messages[-1].get("content") or "")


def side_request(stack: Stack) -> RecordedRequest:
    return next(r for r in reversed(stack.model.requests) if is_side(r))


def as_chat(request: RecordedRequest) -> RecordedRequest:
    """An Anthropic request as the Chat Completions request the benchmark model reads."""
    if request.api == "openai":
        return request
    messages: list[dict[str, Any]] = []
    for turn in request.body.get("messages", []):
        content = turn.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        texts = [b["text"] for b in blocks if b.get("type") == "text"]
        messages += [
            {"role": "tool", "tool_call_id": b["tool_use_id"], "content": b.get("content")}
            for b in blocks
            if b.get("type") == "tool_result"
        ]
        if turn.get("role") == "assistant":
            calls = [
                {"id": b["id"], "type": "function", "function": {"name": b["name"]}}
                for b in blocks
                if b.get("type") == "tool_use"
            ]
            messages.append({"role": "assistant", "content": "".join(texts), "tool_calls": calls})
        elif texts:
            messages.append({"role": "user", "content": "\n\n".join(texts)})
    tools = [{"type": "function", "function": t} for t in request.body.get("tools", [])]
    return dataclasses.replace(request, body={**request.body, "messages": messages, "tools": tools})


async def run(stack: Stack | None = None) -> dict[str, Any]:
    async with stack_for("b5", stack) as stack:
        settings = stack.settings().model_copy(
            update={
                # The in-process model: it keeps the requests this benchmark reads.
                "openai_base_url": stack.model.openai_base_url,
                "anthropic_api_key": SecretStr(FAKE_KEY),
                "anthropic_base_url": stack.model.anthropic_base_url,
            }
        )
        await stack.worker(settings)
        # The smoke test shares the stack: put its model back as it was afterwards.
        responder, prompt_cache = stack.model.responder, stack.model.prompt_cache
        stack.model.responder = _reading_both_wires(responder)
        stack.model.prompt_cache = True
        scenarios: dict[str, Any] = {}
        try:
            for wire in WIRES:
                suffix = "" if wire == "openai" else f" ({wire})"
                found = await _scenarios(stack, settings, wire)
                scenarios.update({f"{name}{suffix}": rows for name, rows in found.items()})
        finally:
            stack.model.responder, stack.model.prompt_cache = responder, prompt_cache
    return {"measure": "longest common byte prefix / first request's bytes", **scenarios}


async def _scenarios(stack: Stack, settings: Settings, wire: str) -> dict[str, Any]:
    scenarios: dict[str, Any] = {}

    model = _on(wire, model_name(2, 3))
    stack.model.reset()
    handle = await stack.start_task(settings, model)
    result = await stack.result(handle)
    main = rounds_of(stack, model)
    scenarios["rounds"] = [
        {"from": f"round {i}", "to": f"round {i + 1}", **compare(main[i], main[i + 1])}
        for i in range(len(main) - 1)
    ]
    scenarios["side question after the task finished"] = await _finished(
        stack, settings.task_queue, result, main[-1]
    )

    model = _on(wire, model_name(1, 3, slow=True))
    stack.model.reset()
    handle = await stack.start_task(settings, model)
    await wait_for(lambda: _true(len(rounds_of(stack, model)) >= 2), 60, "round 1's model call")
    await handle.execute_update(
        "ask_side_question", SideQuestion(question=QUESTION), result_type=SideAnswer
    )
    in_flight = rounds_of(stack, model)[1]
    scenarios["side question while a round is in flight"] = {
        "from": "round 1 (in flight)",
        "to": "side question",
        **compare(in_flight, side_request(stack)),
    }
    await stack.result(handle)

    model = _on(wire, model_name(1, 3, ask=True))
    stack.model.reset()
    handle = await stack.start_task(settings, model)
    status = await _parked(handle)
    await handle.execute_update(
        "ask_side_question", SideQuestion(question=QUESTION), result_type=SideAnswer
    )
    latest = rounds_of(stack, model)[-1]
    scenarios["side question while waiting on the user"] = {
        "from": "round 1 (asked the user)",
        "to": "side question",
        **compare(latest, side_request(stack)),
    }
    question_set = (status.pending_question or {})["id"]
    await handle.execute_update(
        "answer_question",
        {"question_set_id": question_set, "answers": {"q1": [ANSWER_LABEL]}},
    )
    await stack.result(handle)
    return scenarios


async def _finished(
    stack: Stack, queue: str, result: TaskResult, last: RecordedRequest
) -> dict[str, Any]:
    assert result.last_round is not None
    await stack.client.execute_workflow(
        "SideQuestionWorkflow",
        SideQuestionInput(
            task_id=result.task_id,
            session_id=result.session_id,
            question=QUESTION,
            model=result.side_question_model or result.last_round.model,
            round=result.last_round,
        ),
        id=f"{result.task_id}/btw-{uuid.uuid4().hex[:6]}",
        task_queue=queue,
        result_type=SideAnswer,
    )
    return {"from": "last round", "to": "side question", **compare(last, side_request(stack))}


async def _parked(handle: Any) -> TaskResult:
    for _ in range(600):
        status: TaskResult = await handle.query("status", result_type=TaskResult)
        if status.status == "waiting_for_user":
            return status
        await asyncio.sleep(0.1)
    raise TimeoutError(f"task {handle.id} never waited for the user")


async def _true(value: bool) -> bool:
    return value


def _on(wire: str, spec: str) -> str:
    return f"{wire}:{spec.split(':', 1)[1]}"


def _reading_both_wires(responder: Responder | None) -> Responder:
    def respond(request: RecordedRequest) -> Any:
        return responder(as_chat(request)) if responder is not None else None

    return respond


def _json(value: Any) -> str:
    return json.dumps(_unmarked(value), ensure_ascii=False, separators=(",", ":"))


def _unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def _rows(result: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (name, row)
        for name, rows in result.items()
        if name != "measure"
        for row in (rows if isinstance(rows, list) else [rows])
    ]


def verdict(result: dict[str, Any]) -> tuple[str, None, None]:
    rows = _rows(result)
    rounds = [r["prefix_fraction"] for name, r in rows if name.startswith("rounds")]
    sides = [r["prefix_fraction"] for _, r in rows if r["to"] == "side question"]
    cached = [share for _, r in rows if (share := _share(r)) is not None]
    figure = (
        f"rounds reuse {min(rounds):.1%}–{max(rounds):.1%} of the previous request; side "
        f"questions {min(sides):.1%}–{max(sides):.1%} of the latest round's"
    )
    if cached:
        figure += f"; providers report {min(cached):.1%}–{max(cached):.1%} of input as cached"
    return figure, None, None


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| scenario | wire | request → next | bytes | reused prefix | messages kept "
        "| tools identical | cached input (reported) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in _rows(result):
        share = _share(row)
        cached = (
            "—"
            if share is None
            else f"{row['reported_cached_tokens']:,} of {row['reported_input_tokens']:,} "
            f"({share:.0%})"
        )
        lines.append(
            f"| {name.removesuffix(' (anthropic)')} | {row.get('wire', 'openai')} | "
            f"{row['from']} → {row['to']} | {row['request_bytes']:,} → {row['next_bytes']:,} | "
            f"**{row['prefix_fraction']:.1%}** | {row['messages_kept']} | "
            f"{'yes' if row['tools_identical'] else 'no'} | {cached} |"
        )
    return "\n".join(lines)


def _share(row: dict[str, Any]) -> float | None:
    """Cached input over all input of the next request, as reported; None in older results."""
    total = row.get("reported_input_tokens")
    return row["reported_cached_tokens"] / total if total else None
