"""B5: prompt-cache friendliness, read from the raw requests the scripted server received.

Providers cache a request's prefix: the tools, then the messages in order (system first on the
Chat Completions wire). For two requests A and B, the reused fraction is the length of the
longest byte-identical common prefix of A and B divided by A's length, over this serialization
of each request body as received: the ``tools`` array, then each element of the ``messages``
array, each as compact JSON in the order and key order the client sent, newline-separated.
Beside it: how many of A's messages reappear unchanged at the same positions in B, and whether
the tools are byte-identical. (The JSON results also hold the prefix over the whole raw body;
it ends early by construction, since the client writes ``messages`` before ``tools``.)

Scenarios (one task at a time, zero-latency model unless stated):

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
import json
import uuid
from typing import Any

from bench._harness import Stack, stack_for, wait_for
from bench._model import ANSWER_LABEL, SIDE_MARKER, model_name
from errands.activity_io import SideAnswer, SideQuestionInput
from errands.scripted import RecordedRequest
from errands.workflow_io import SideQuestion, TaskResult

TITLE = "B5 · prompt-cache friendliness"
FULL: dict[str, Any] = {}
SMOKE: dict[str, Any] = {}

QUESTION = "btw, what have you found so far?"


def prompt_bytes(body: dict[str, Any]) -> bytes:
    parts = [json.dumps(body.get("tools", []), ensure_ascii=False, separators=(",", ":"))]
    parts += [
        json.dumps(m, ensure_ascii=False, separators=(",", ":")) for m in body.get("messages", [])
    ]
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
        if json.dumps(x) != json.dumps(y):
            break
        kept += 1
    return {
        "request_bytes": len(pa),
        "next_bytes": len(pb),
        "prefix_bytes": common_prefix(pa, pb),
        "prefix_fraction": round(common_prefix(pa, pb) / len(pa), 4),
        "messages_kept": f"{kept}/{len(ma)}",
        "tools_identical": json.dumps(a.body.get("tools")) == json.dumps(b.body.get("tools")),
        "raw_body_prefix_fraction": round(common_prefix(a.raw, b.raw) / len(a.raw), 4),
    }


def rounds_of(stack: Stack, model: str) -> list[RecordedRequest]:
    """The task's main-round requests, in order (not branches, not side questions)."""
    name = model.split(":", 1)[1]
    return [
        r
        for r in stack.model.requests_for(name)
        if any(t["function"]["name"] == "final_reply" for t in r.body.get("tools", []))
        and not is_side(r)
    ]


def is_side(request: RecordedRequest) -> bool:
    messages = request.body.get("messages", [])
    return bool(messages) and SIDE_MARKER in str(messages[-1].get("content") or "")


def side_request(stack: Stack) -> RecordedRequest:
    return next(r for r in reversed(stack.model.requests) if is_side(r))


async def run(stack: Stack | None = None) -> dict[str, Any]:
    async with stack_for("b5", stack) as stack:
        settings = stack.settings()
        await stack.worker(settings)
        scenarios: dict[str, Any] = {}

        model = model_name(2, 3)
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

        model = model_name(1, 3, slow=True)
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

        model = model_name(1, 3, ask=True)
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
    return {"measure": "longest common byte prefix / first request's bytes", **scenarios}


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


def verdict(result: dict[str, Any]) -> tuple[str, None, None]:
    rows = [
        r for k, v in result.items() if k != "measure" for r in (v if isinstance(v, list) else [v])
    ]
    rounds = [r["prefix_fraction"] for r in result["rounds"]]
    sides = [r["prefix_fraction"] for r in rows if r["to"] == "side question"]
    return (
        f"rounds reuse {min(rounds):.1%}–{max(rounds):.1%} of the previous request; side "
        f"questions {min(sides):.1%}–{max(sides):.1%} of the latest round's",
        None,
        None,
    )


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| scenario | request → next | bytes | reused prefix | messages kept | tools identical |",
        "|---|---|---|---|---|---|",
    ]
    for name, rows in result.items():
        if name == "measure":
            continue
        for row in rows if isinstance(rows, list) else [rows]:
            lines.append(
                f"| {name} | {row['from']} → {row['to']} | {row['request_bytes']:,} → "
                f"{row['next_bytes']:,} | **{row['prefix_fraction']:.1%}** | "
                f"{row['messages_kept']} | {'yes' if row['tools_identical'] else 'no'} |"
            )
    return "\n".join(lines)
