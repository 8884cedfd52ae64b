"""Provider faults: every failure SPEC §1 names, served by the scripted model server to the real
OpenAI and Anthropic SDK clients, each ending the way the spec says (retried on the same model,
handed to the fallback, repaired, joined, or failed with its kind).

Every case runs at once on one in-process worker; each has its own model names, so the scripts
cannot interfere, and a request nobody scripted is answered 400 and counted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio.api.enums.v1 import EventType

from chaos._report import Outcome
from chaos._stack import Stack
from errands.adapters.scripted import Call, Fail, RecordedRequest, Reply, Reset, Step
from errands.contracts.workflows import RoundSettings, TaskInput, TaskResult

FAST = RoundSettings(model_max_attempts=4, round_retry_seconds=1, round_retry_limit=1)
"""Short waits so the whole table runs in seconds; the policy itself is the default's."""


def final(text: str) -> Reply:
    return Reply(calls=[Call("final_reply", {"text": text})])


def delegate(*prompts: str) -> Reply:
    subtasks = [{"type": "general", "prompt": p, "references": [1]} for p in prompts]
    return Reply(calls=[Call("delegate", {"reply": "On it.", "subtasks": subtasks})])


def tool_names(request: RecordedRequest) -> list[str]:
    tools = request.body.get("tools", [])
    return [t["function"]["name"] if "function" in t else t["name"] for t in tools]


class Script:
    """One model's part in a case: main rounds in order, branches by their prompt."""

    def __init__(self, main: list[Step], branch: Callable[[str], Step] | None = None) -> None:
        self.main = list(main)
        self.branch = branch
        self.main_requests: list[RecordedRequest] = []
        self.branch_requests: list[RecordedRequest] = []

    def __call__(self, request: RecordedRequest) -> Step | None:
        if "final_reply" not in tool_names(request):
            self.branch_requests.append(request)
            return self.branch(request.raw.decode()) if self.branch else None
        self.main_requests.append(request)
        return self.main.pop(0) if self.main else None


@dataclass
class Run:
    result: TaskResult
    primary: Script
    fallback: Script
    events: list[Any]


@dataclass
class Case:
    key: str
    fault: str
    expect: str
    main: list[Step]
    fallback: list[Step] | None = None
    """None: the task has no fallback model."""
    branch: Callable[[str], Step] | None = None
    faults: int = 1
    settings: RoundSettings = field(default_factory=FAST.model_copy)
    status: str = "replied"
    kind: str | None = None
    reply: str | None = None
    primary_calls: int | None = None
    fallback_calls: int = 0
    check: Callable[[Run], str | None] | None = None


def cases(api: str) -> list[Case]:
    """The table (a 401 that echoes the key back is a probe: see ``chaos._probes``)."""
    overloaded = 529 if api == "anthropic" else 503
    return [
        Case("ra", "429 with retry-after: 1", "retried on the same model after the wait",
             [Fail(429, "slow down", {"retry-after": "1"}), final("ok")], reply="ok",
             primary_calls=2, check=waited(0.9)),
        Case("rl", "429 without retry-after", "retried on the same model",
             [Fail(429, "rate limited"), final("ok")], reply="ok", primary_calls=2),
        Case("se", "500", "retried on the same model",
             [Fail(500, "internal error"), final("ok")], reply="ok", primary_calls=2),
        Case("ol", f"{overloaded} overloaded", "retried on the same model",
             [Fail(overloaded, "overloaded"), final("ok")], reply="ok", primary_calls=2),
        Case("cr", "connection reset", "retried on the same model",
             [Reset(), final("ok")], reply="ok", primary_calls=2),
        Case("to", "timeout (reply after the call timeout)", "retried on the same model",
             [Reply(calls=[Call("final_reply", {"text": "late"})], delay=4), final("ok")],
             settings=FAST.model_copy(update={"model_timeout_seconds": 2}),
             reply="ok", primary_calls=2),
        Case("rx", "429 on every attempt of the primary", "the fallback answers",
             [Fail(429, "rate limited")] * 2, [final("from the fallback")], faults=2,
             settings=FAST.model_copy(update={"model_max_attempts": 2}),
             reply="from the fallback", primary_calls=2, fallback_calls=1),
        Case("oc", "503 on both slots, then the outage clears",
             "the round is retried later and replies",
             [Fail(503), Fail(503), final("after the outage")], [Fail(503)] * 2, faults=4,
             settings=FAST.model_copy(update={"model_max_attempts": 2}),
             reply="after the outage", primary_calls=3, fallback_calls=2),
        Case("op", "503 on both slots for good", "failed with kind transient",
             [Fail(503)] * 4, [Fail(503)] * 4, faults=8,
             settings=FAST.model_copy(update={"model_max_attempts": 2}),
             status="failed", kind="transient", primary_calls=4, fallback_calls=4),
        Case("cd", "401", "failed with kind credential, no fallback",
             [Fail(401, "invalid x-api-key")], [final("never")],
             status="failed", kind="credential", primary_calls=1, fallback_calls=0,
             check=names_variable(api)),
        Case("pm", "403", "failed with kind permission, no fallback",
             [Fail(403, "not allowed")], [final("never")],
             status="failed", kind="permission", primary_calls=1),
        Case("um", "404 unknown model", "failed with kind unknown_model, no fallback",
             [Fail(404, "The model does not exist")], [final("never")],
             status="failed", kind="unknown_model", primary_calls=1),
        Case("ma", "malformed tool arguments", "repaired on the same model",
             [Reply(calls=[Call("final_reply", '{"text": "half')]), final("repaired")],
             reply="repaired", primary_calls=2, check=told("not valid JSON")),
        Case("wa", "control call with invalid arguments", "repaired on the same model",
             [delegate(), final("repaired")], reply="repaired", primary_calls=2,
             check=told("subtasks")),
        Case("nf", "narration instead of a control call", "the fallback answers",
             [Reply(text="Let me think about this first.")], [final("from the fallback")],
             reply="from the fallback", primary_calls=1, fallback_calls=1),
        Case("nx", "narration on every slot", "failed with kind exhausted",
             [Reply(text="Let me think.")], [Reply(text="Me too.")] * 4, faults=5,
             status="failed", kind="exhausted", primary_calls=1, fallback_calls=4),
        Case("ef", "empty response", "the fallback answers",
             [Reply(text="")], [final("from the fallback")],
             reply="from the fallback", primary_calls=1, fallback_calls=1),
        Case("ex", "empty response on every slot", "failed with kind exhausted",
             [Reply(text="")], [Reply(text="")] * 4, faults=5,
             status="failed", kind="exhausted", primary_calls=1, fallback_calls=4),
        Case("rp", "blank final_reply on every repair", "failed, kind exhausted, after 3 repairs",
             [final(" ")] * 4, faults=4, status="failed", kind="exhausted", primary_calls=4),
        Case("bt", "500 in a branch", "the branch is retried and completes",
             [delegate("part one"), final("done")], branch=flaky_branch(), reply="done",
             primary_calls=2, check=told("completed")),
        Case("bc", "401 in one branch", "that branch fails, its sibling completes",
             [delegate("part one", "part two"), final("done")],
             branch=lambda raw: Fail(401, "bad key") if "part one" in raw else Reply("fine"),
             reply="done", primary_calls=2, check=told("credential")),
        Case("dj", "401 after a branch completed", "the deterministic join replies",
             [delegate("part one", "part two"), Fail(401, "key revoked")], [final("never")],
             branch=lambda raw: Reply("good result") if "part one" in raw else Fail(400, "no"),
             faults=2, primary_calls=2, check=joined),
    ]  # fmt: skip


def waited(seconds: float) -> Callable[[Run], str | None]:
    def check(run: Run) -> str | None:
        first, second = run.primary.main_requests[:2]
        gap = second.received_at - first.received_at
        if gap < seconds:
            return f"retried after {gap:.2f} s, before the {seconds} s retry-after"
        started = [
            e.activity_task_started_event_attributes.attempt
            for e in run.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        ]
        if 2 not in started:
            return "the history shows no second attempt of the model call"
        failed = run.result.usage.total().failed_calls
        return None if failed == 1 else f"usage counts {failed} failed calls, not 1"

    return check


def names_variable(api: str) -> Callable[[Run], str | None]:
    variable = "ANTHROPIC_API_KEY" if api == "anthropic" else "OPENAI_API_KEY"

    def check(run: Run) -> str | None:
        message = run.result.error.message if run.result.error else ""
        return None if variable in message else f"the error does not name {variable}: {message}"

    return check


def told(words: str) -> Callable[[Run], str | None]:
    """The model's next request carries ``words`` (a repair's error, a branch's status)."""

    def check(run: Run) -> str | None:
        last = run.primary.main_requests[-1].raw.decode()
        return None if words in last else f"the next request never told the model {words!r}"

    return check


def joined(run: Run) -> str | None:
    reply = run.result.reply or ""
    ok = reply.startswith("good result") and "did not complete" in reply
    return None if ok else f"not a deterministic join: {reply!r}"


def flaky_branch() -> Callable[[str], Step]:
    calls = 0

    def branch(raw: str) -> Step:
        nonlocal calls
        calls += 1
        return Fail(500, "branch hiccup") if calls == 1 else Reply("branch result")

    return branch


async def provider_faults(stack: Stack, apis: list[str]) -> Outcome:
    outcome = Outcome("faults", "Provider faults through the real SDK clients")
    queue = stack.queue("faults")
    started = time.monotonic()
    async with stack.worker(queue):
        runs = [run_case(stack, queue, api, case, outcome) for api in apis for case in cases(api)]
        verdicts = await asyncio.gather(*runs)
    outcome.seconds = time.monotonic() - started
    outcome.facts["cases"] = len(runs)
    outcome.facts["APIs"] = ", ".join(apis)
    for label, ok in verdicts:
        if not ok or label not in outcome.facts:
            outcome.facts[label] = "as specified" if ok else "NOT as specified"
    return outcome


async def run_case(
    stack: Stack, queue: str, api: str, case: Case, outcome: Outcome
) -> tuple[str, bool]:
    """Run one case on one API; (what it injects and what must follow, whether it did)."""
    name = f"chaos-{case.key}-{api}"
    primary = Script(case.main, case.branch)
    fallback = Script(case.fallback or [])
    stack.answer(f"{name}-p", primary)
    stack.answer(f"{name}-f", fallback)
    task_id = f"task-{queue}-{case.key}-{api}"
    handle = await stack.client.start_workflow(
        "TaskWorkflow",
        TaskInput(
            task_id=task_id,
            session_id=f"{queue}-{case.key}-{api}",
            text=f"fault case {case.key}",
            model=f"{api}:{name}-p",
            fallback_model=None if case.fallback is None else f"{api}:{name}-f",
            settings=case.settings,
        ),
        id=task_id,
        task_queue=queue,
        result_type=TaskResult,
    )
    outcome.tasks += 1
    outcome.faults[case.fault] += case.faults
    try:
        result = await asyncio.wait_for(handle.result(), 120)
    except TimeoutError:
        outcome.lose("stuck tasks", f"{case.fault} ({api}): no result within 120 s")
        return f"{case.fault} → {case.expect}", False
    events = [e async for e in handle.fetch_history_events()]
    problem = judge(case, Run(result, primary, fallback, events))
    if problem:
        outcome.lose("tasks not ended as expected", f"{case.fault} ({api}): {problem}")
    return f"{case.fault} → {case.expect}", problem is None


def judge(case: Case, run: Run) -> str | None:
    result = run.result
    kind = result.error.kind if result.error else None
    if (result.status, kind) != (case.status, case.kind):
        return f"ended {result.status} ({kind}), expected {case.status} ({case.kind}): {result}"
    if case.reply is not None and not (result.reply or "").startswith(case.reply):
        return f"replied {result.reply!r}, expected {case.reply!r}"
    calls = (len(run.primary.main_requests), len(run.fallback.main_requests))
    expected = (case.primary_calls, case.fallback_calls)
    if case.primary_calls is not None and calls != expected:
        return f"the model was asked {calls} times (primary, fallback), expected {expected}"
    if run.primary.main:
        return f"{len(run.primary.main)} scripted step(s) of the primary were never requested"
    if case.branch is None and run.primary.branch_requests:
        return f"{len(run.primary.branch_requests)} branch request(s) nobody expected"
    return case.check(run) if case.check else None
