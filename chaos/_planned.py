"""Planned tasks under a recurring fault: the harness the worker-kill and server-restart
scenarios share.

Tasks (branches and questions, drawn from the seeded RNG) start on a rolling window while a
fault strikes again and again. A strike is triggered by progress, not by the clock: it waits for
a random number of further model calls, then a random fraction of a second, so it lands inside a
model call, between two writes, or while tasks wait on the user, and a slow machine gets the
same mix as a fast one. Everything a user could see is watched while it runs, and everything
the tasks must have written is checked after.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from temporalio.client import WorkflowFailureError
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from chaos._checks import ExpectedRows, RowWatcher, audit_rows
from chaos._report import Outcome
from chaos._roleplay import Agent, Plan, User
from chaos._stack import Stack
from errands.contracts import ids
from errands.contracts.workflows import RoundSettings, TaskInput

Strike = Callable[[], Awaitable[None]]

CALL_TIMEOUT = 5.0
"""The model call timeout of the planned tasks, in seconds: a crashed call is retried soon."""
WORN_OUT = "branches failed (transient) because every attempt of their model call was cut off"


@dataclass(frozen=True)
class Size:
    tasks: int
    strikes: int
    concurrency: int
    timeout: float
    """Seconds the whole scenario may take before unfinished tasks count as stuck."""
    delay: float = 1.2
    """Longest a model call takes; each call takes a random time up to it."""


def round_settings(rng: random.Random) -> RoundSettings:
    """Short model timeouts, so a call cut off by a crash is retried within seconds; some tasks
    continue as new after every round, when this version of errands can."""
    values: dict[str, object] = {"model_timeout_seconds": CALL_TIMEOUT, "model_max_attempts": 8}
    if "rounds_per_run" in RoundSettings.model_fields and rng.random() < 0.35:
        values["rounds_per_run"] = 1
    return RoundSettings.model_validate(values)


async def start(stack: Stack, queue: str, data: TaskInput) -> None:
    """Start a task, through an outage if need be: a start that landed before the connection
    dropped is found already started on the next try."""
    for attempt in range(60):
        try:
            await stack.client.start_workflow(
                "TaskWorkflow", data, id=data.task_id, task_queue=queue
            )
            return
        except WorkflowAlreadyStartedError:
            return
        except RPCError:
            if attempt == 59:
                raise
            await asyncio.sleep(1)


def excuse_worn_out_branches(
    stack: Stack, agent: Agent, expected: ExpectedRows, struck: list[float], outcome: Outcome
) -> None:
    """A branch whose model call died with its worker on every attempt runs out of attempts and
    is rightly recorded as failed, transient (SPEC §1: a branch's failure is reported, never
    fatal). Expect that row instead of the result, but only when every request the model got
    for it was cut off by a strike within the call timeout: any other failure stays a loss."""
    for row_id in [r for r in expected.rows if ":branch:" in r]:
        row = stack.store.get(row_id)
        if row is None or row.meta.get("status") != "failed":
            continue
        round_, ordinal = row.round or 0, int(row.meta["ordinal"])
        thread = ids.child_workflow_id(row.task_id or "", round_, ordinal)
        asked = agent.branch_asked.get(thread, [])
        cut_off = asked and all(any(t <= s <= t + CALL_TIMEOUT for s in struck) for t in asked)
        if cut_off and "transient" in row.text:
            expected.rows[row_id] = ""
            expected.threads[thread] = 0
            worn = outcome.facts.setdefault(WORN_OUT, 0)
            outcome.facts[WORN_OUT] = worn + 1


async def run_planned(
    stack: Stack,
    outcome: Outcome,
    *,
    queue: str,
    model: str,
    plans: list[Plan],
    size: Size,
    rng: random.Random,
    strike: Strike,
    fault: str,
) -> None:
    agent = Agent(stack.store, outcome, random.Random(rng.random()), size.delay)
    stack.answer(model, agent)
    user = User(stack.client, outcome)
    watcher = RowWatcher(stack.store, outcome)
    stop = asyncio.Event()
    window = asyncio.Semaphore(size.concurrency)
    deadline = time.monotonic() + size.timeout
    settings = {p.tag: round_settings(rng) for p in plans}
    struck: list[float] = []
    continued = sum(1 for s in settings.values() if getattr(s, "rounds_per_run", None))

    async def one(plan: Plan) -> None:
        async with window:
            session_id = f"{queue}-{plan.tag}"
            task_id = f"task-{session_id}"
            agent.add(plan, task_id, session_id)
            watcher.watch(session_id, task_id)
            await start(
                stack,
                queue,
                TaskInput(
                    task_id=task_id,
                    session_id=session_id,
                    text=plan.text,
                    model=f"openai:{model}",
                    settings=settings[plan.tag],
                ),
            )
            try:
                result = await user.follow(task_id, plan, deadline - time.monotonic())
            except WorkflowFailureError as error:
                outcome.lose("tasks not ended as expected", f"{task_id} failed: {error.cause}")
                return
            if result is None:
                outcome.lose("stuck tasks", f"{task_id} did not end within {size.timeout:.0f} s")
                return
            if result.status != "replied" or result.reply != plan.reply:
                outcome.lose(
                    "tasks not ended as expected",
                    f"{task_id} ended {result.status} {result.error} with {result.reply!r}",
                )
            expected = plan.expected_rows(task_id, session_id)
            await asyncio.to_thread(
                excuse_worn_out_branches, stack, agent, expected, struck, outcome
            )
            checked = await asyncio.to_thread(audit_rows, stack.store, expected, outcome)
            outcome.facts["stored rows checked"] = outcome.facts.get("stored rows checked", 0) + (
                checked
            )
            decisions = await asyncio.to_thread(stack.store.list_decisions, session_id)
            if len(decisions) != len(plan.asks):
                outcome.lose(
                    "answers lost",
                    f"{task_id} kept {len(decisions)} decisions for {len(plan.asks)} questions",
                )

    async def strikes() -> None:
        expected_calls = sum(p.main_calls + p.branch_calls for p in plans)
        for n in range(size.strikes):
            left = max(1, expected_calls - agent.calls)
            # At most an even share of what is left, and never the last two calls, so every
            # strike lands before the end (the tasks can finish during the pause below).
            share = left // (size.strikes - n) - 2
            target = agent.calls + rng.randint(1, max(1, share))
            while agent.calls < target and not stop.is_set():
                await asyncio.sleep(0.05)
            await asyncio.sleep(rng.uniform(0, 0.6))
            if stop.is_set():
                return
            # Never cut short: a restart stopped halfway would leave the server down.
            struck.append(time.time())
            await strike()
            outcome.faults[fault] += 1

    started = time.monotonic()
    watching = asyncio.create_task(watcher.run(stop))
    striking = asyncio.create_task(strikes())
    try:
        await asyncio.gather(*(one(p) for p in plans))
    finally:
        stop.set()
        await striking
        await watching
    outcome.seconds = time.monotonic() - started
    outcome.tasks = len(plans)
    minimum = sum(p.main_calls + p.branch_calls for p in plans)
    outcome.facts.update(
        {
            "tasks": len(plans),
            "branches run": sum(p.branch_calls for p in plans),
            "questions asked": sum(len(p.asks) for p in plans),
            "questions answered": user.answers,
            "answers sent again after a lost reply or an outage": user.answer_retries,
            "tasks continuing as new after every round": continued,
            "model calls": agent.calls,
            "model calls repeated (cut off by a fault, asked again)": agent.calls - minimum,
            "most attempts one branch's model call took": max(
                (len(t) for t in agent.branch_asked.values()), default=0
            ),
            "session listings taken while faults struck": watcher.polls,
        }
    )
    if outcome.faults[fault] < size.strikes:
        outcome.notes.append(
            f"only {outcome.faults[fault]} of {size.strikes} planned strikes happened before "
            "every task ended"
        )
