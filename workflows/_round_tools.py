"""The main agent's work-tool calls in a round (MCP and Python tools): approved by the user
first where their policy says so, then all of one step's calls at once, each an activity
(``run_round_tool``) whose result is stored and reaches the next step by reference."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities import ToolActivities
    from errands.agent import prompts
    from errands.contracts import ids
    from errands.contracts.activities import RunRoundToolInput, RunToolOutput, SessionRouting
    from errands.contracts.approvals import ApprovalNeed
    from errands.contracts.messages import ToolCall
    from errands.contracts.principals import Principal
    from errands.contracts.workflows import Slot, TaskInput
    from workflows._failures import attempts_failed
    from workflows._options import tool_run
    from workflows._repairs import append_exchange
    from workflows._sessions import SessionHolders

Approver = Callable[[ApprovalNeed, int], Awaitable[tuple[str | None, list[Principal]]]]
"""Puts one of the main agent's tool calls (and the step it is in) to the user: None when
approved, else the text the model reads instead of the tool's result; and who approved or
denied it (empty when nobody answered)."""


async def run_round_tools(
    data: TaskInput,
    slot: Slot,
    step: int,
    by_index: dict[int, ToolCall],
    needs: list[ApprovalNeed],
    approve: Approver | None,
    holders: SessionHolders,
    servers: dict[int, str],
) -> None:
    """A step's work-tool calls (by their place among the step's calls), those that need it
    approved by the user first, then all at once; a call of a stateful MCP server (``servers``
    names it) runs on the worker ``holders`` says holds its session. Each call and its result go
    to the slot's messages; a call whose every attempt failed (its worker kept dying) is told to
    the model as an error."""
    settings = data.settings
    verdicts: dict[int, str | None] = {}
    deciders: dict[int, list[Principal]] = {}
    for need in needs:
        assert approve is not None, "a task that offers such tools can approve them"
        verdicts[need.index], deciders[need.index] = await approve(need, step)
    calls = list(by_index.values())
    result_ids = [
        ids.round_tool_result_id(
            data.task_id, slot.round, slot.name, step, i, f"{call.name}:{call.arguments}"
        )
        for i, call in enumerate(calls)
    ]

    inputs = [
        RunRoundToolInput(
            task_id=data.task_id,
            result_id=result_id,
            call=call,
            timeout_seconds=settings.tool_timeout_seconds,
            max_attempts=settings.tool_max_attempts,
            verdict=verdicts.get(index),
            approved=index in verdicts and verdicts[index] is None,
            by=deciders.get(index, []),
        )
        for index, call, result_id in zip(by_index, calls, result_ids, strict=True)
    ]
    outcomes = await asyncio.gather(
        *(
            _run(data, slot, arg, holders, servers.get(index))
            for index, arg in zip(by_index, inputs, strict=True)
        ),
        return_exceptions=True,
    )
    for call, result_id, outcome in zip(calls, result_ids, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, ActivityError):
                raise outcome
            detail = attempts_failed(outcome, settings.tool_max_attempts)
            append_exchange(slot, call, call.name, prompts.tool_failed(call.name, detail))
            slot.extra[-1].is_error = True
            continue
        append_exchange(slot, call, call.name, "", stored=result_id)
        slot.extra[-1].is_error = not outcome.ok


def _run(
    data: TaskInput,
    slot: Slot,
    arg: RunRoundToolInput,
    holders: SessionHolders,
    server: str | None,
) -> Awaitable[RunToolOutput]:
    """One call's activity: on the shared queue, or, for a stateful MCP ``server``, where
    ``holders`` routes it."""
    settings = data.settings

    def scheduled(routing: SessionRouting) -> Awaitable[RunToolOutput]:
        return tool_run(
            ToolActivities.run_round_tool,
            arg.model_copy(update={"routing": routing}),
            timeout_seconds=settings.tool_timeout_seconds,
            heartbeat_seconds=settings.heartbeat_timeout_seconds,
            max_attempts=settings.tool_max_attempts,
            summary=f"round {slot.round} · {slot.name} · {arg.call.name}",
            holder=routing.holder,
        )

    if server is None:
        return scheduled(SessionRouting())
    return holders.run(server, scheduled)
