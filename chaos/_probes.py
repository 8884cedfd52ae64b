"""Targeted probes: inputs the generators do not reach, each aimed at one weak spot the suite
found. A probe states what SPEC or DESIGN requires and counts a loss when the system does
otherwise; ``tests/test_chaos_short.py`` runs every probe, so a fixed bug stays fixed."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

from chaos._checks import task_failures
from chaos._inputs import InputModel, Violation, parked_task, processed, task_input
from chaos._report import Outcome
from chaos._stack import Stack
from errands.adapters.scripted import Call, Fail, Reply
from errands.contracts.workflows import TaskResult


async def deeply_nested_arguments(stack: Stack, queue: str, model: InputModel) -> None:
    """SPEC §1: control-call arguments that cannot be read are repaired on the same model.
    JSON nested deeper than the parser's recursion limit is such an argument."""
    nested = "[" * 100_000 + "]" * 100_000
    result, handle = await _scripted_task(
        stack, queue, model, [Reply(calls=[Call("final_reply", nested)])]
    )
    if result is None or result.status != "replied" or result.reply != InputModel.RECOVERED:
        raise Violation(
            "tasks not ended as expected",
            f"{handle.id}: a final_reply with 100,000-deep arguments ended "
            f"{_ended(result)}, not repaired",
        )


async def oversized_rejected_calls(stack: Stack, queue: str, model: InputModel) -> None:
    """DESIGN invariants 2 and 6: every payload stays far below 2 MB and no task is left
    hanging. Two rejected control calls of ~1.1 MB each (a blank text padded with spaces) are
    both carried into the next model call's input."""
    blank = Reply(calls=[Call("final_reply", {"text": " " * 1_100_000})])
    result, handle = await _scripted_task(stack, queue, model, [blank, blank], wait=40)
    if result is None:
        ours, _, causes = task_failures(await handle.fetch_history())
        await handle.terminate("chaos probe: stuck on an oversized payload")
        raise Violation(
            "stuck tasks",
            f"{handle.id}: after two oversized rejected calls the task hangs, "
            f"{ours} workflow task failures ({causes[0] if causes else 'none recorded yet'})",
        )
    if result.status != "replied" or result.reply != InputModel.RECOVERED:
        raise Violation("tasks not ended as expected", f"{handle.id} ended {_ended(result)}")


async def subtask_type_that_is_not_a_string(stack: Stack, queue: str, model: InputModel) -> None:
    """SPEC §1: an unknown subtask type is a repairable error ("subtask N: unknown type").
    A list is not a known type."""
    arguments = {"reply": "On it.", "subtasks": [{"type": ["general"], "prompt": "look"}]}
    result, handle = await _scripted_task(
        stack, queue, model, [Reply(calls=[Call("delegate", arguments)])]
    )
    if result is None or result.status != "replied" or result.reply != InputModel.RECOVERED:
        raise Violation(
            "tasks not ended as expected",
            f'{handle.id}: delegate with `type: ["general"]` ended {_ended(result)}, not repaired',
        )


async def key_echoed_by_a_401(stack: Stack, queue: str, model: InputModel) -> None:
    """DESIGN invariant 5: no credential in any workflow history. Some providers echo the
    rejected key in a 401's message; the error the task records is redacted, and so must be
    everything else the history keeps of that failure."""
    name = f"chaos-echo-{model.new_tag()}"
    stack.models.script(name, Fail(401, f"Incorrect API key provided: {stack.openai_key}"))
    data = task_input(queue, "echo", name).model_copy(update={"model": f"openai:{name}"})
    handle = await stack.client.start_workflow(
        "TaskWorkflow", data, id=data.task_id, task_queue=queue, result_type=TaskResult
    )
    result = await asyncio.wait_for(handle.result(), 60)
    if result.error is None or result.error.kind != "credential":
        raise Violation("tasks not ended as expected", f"{handle.id} ended {_ended(result)}")
    history = json.loads((await handle.fetch_history()).to_json())
    leaks = [path for path, text in _strings(history, "") if stack.openai_key in text]
    if leaks:
        raise Violation(
            "secrets in history",
            f"{handle.id}: the key is in the history at {', '.join(leaks)} (the redacted "
            "ApplicationError keeps the SDK's exception as its cause)",
        )


async def signal_that_is_not_an_object(stack: Stack, queue: str, model: InputModel) -> None:
    """SPEC §2: an invalid answer sent by signal is recorded and ignored. A JSON list is an
    invalid answer."""
    handle, set_id = await parked_task(stack, queue, model)
    await handle.signal("submit_answer", ["q1", "PostgreSQL"])
    await processed(handle)
    status = await handle.query("status", result_type=TaskResult)
    await handle.execute_update(
        "answer_question", {"question_set_id": set_id, "status": "cancelled"}
    )
    if not status.answer_errors:
        raise Violation(
            "property violations",
            f"{handle.id}: a signal carrying a JSON list was dropped without a trace in "
            "answer_errors (the SDK refuses to decode it into the handler's dict parameter)",
        )


PROBES: dict[str, Callable[[Stack, str, InputModel], Awaitable[None]]] = {
    "deeply nested control-call arguments": deeply_nested_arguments,
    "rejected control calls over 1 MB, twice": oversized_rejected_calls,
    "a subtask type that is not a string": subtask_type_that_is_not_a_string,
    "a 401 whose message echoes the key": key_echoed_by_a_401,
    "an answer signal that is not a JSON object": signal_that_is_not_an_object,
}


async def probes(stack: Stack, names: list[str] | None = None) -> Outcome:
    outcome = Outcome("probes", "Targeted probes")
    queue = stack.queue("probes")
    model = InputModel()
    stack.answer(InputModel.NAME, model)
    started = time.monotonic()
    async with stack.worker(queue):
        for name in names or list(PROBES):
            outcome.faults[name] += 1
            try:
                await PROBES[name](stack, queue, model)
            except Violation as violation:
                outcome.lose(violation.what, f"{name}: {violation}")
                outcome.facts[name] = "FAILS"
            else:
                outcome.facts[name] = "holds"
    outcome.tasks = model.tasks
    outcome.seconds = time.monotonic() - started
    return outcome


async def _scripted_task(
    stack: Stack, queue: str, model: InputModel, steps: list[Reply], *, wait: float = 60
) -> tuple[TaskResult | None, WorkflowHandle[Any, TaskResult]]:
    """Run a task whose first steps are ``steps``; (None, handle) when it is stuck: still
    running after ``wait`` seconds, or failing its workflow task (which retries forever)."""
    tag = model.new_tag()
    model.scripts[tag] = list(steps)
    data = task_input(queue, "control", tag)
    handle = await stack.client.start_workflow(
        "TaskWorkflow", data, id=data.task_id, task_queue=queue, result_type=TaskResult
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while loop.time() < deadline:
        description = await handle.describe()
        if description.status != WorkflowExecutionStatus.RUNNING:
            return await handle.result(), handle
        if task_failures(await handle.fetch_history())[0]:
            return None, handle
        await asyncio.sleep(0.25)
    return None, handle


def _strings(value: Any, path: str) -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [found for k, v in value.items() for found in _strings(v, f"{path}/{k}")]
    if isinstance(value, list):
        return [found for i, v in enumerate(value) for found in _strings(v, f"{path}/{i}")]
    return [(path, value)] if isinstance(value, str) else []


def _ended(result: TaskResult | None) -> str:
    if result is None:
        return "never"
    error = json.dumps(result.error.model_dump()) if result.error else ""
    return f"{result.status} {error}"[:300]
