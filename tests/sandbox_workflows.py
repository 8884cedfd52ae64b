"""Workflows for tests/test_sandbox.py, in a module of their own: the sandbox imports a workflow's
module afresh for each run, and this one imports nothing a workflow may not."""

from __future__ import annotations

import datetime
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.worker import UnsandboxedWorkflowRunner

RUNS: list[str] = []
"""Module state a run appends to: inside the sandbox each run sees a fresh copy of it."""


@workflow.defn(name="SandboxCounter")
class Counter:
    @workflow.run
    async def run(self, name: str) -> int:
        RUNS.append(name)
        return len(RUNS)


@workflow.defn(name="SandboxClock")
class Clock:
    @workflow.run
    async def run(self) -> str:
        return datetime.datetime.now().isoformat()  # forbidden in a workflow


@activity.defn(name="sandbox_echo")
async def echo(text: str) -> str:
    return text


@workflow.defn(name="SandboxParent")
class Parent:
    """An activity, a child and a signal to it: a command of each kind whose payloads have a
    context of their own."""

    @workflow.run
    async def run(self) -> str:
        said = await workflow.execute_activity(
            echo, "hello", start_to_close_timeout=timedelta(seconds=30)
        )
        child = await workflow.start_child_workflow(
            Listener.run, id=f"{workflow.info().workflow_id}-child"
        )
        await child.signal(Listener.hear, said)
        return await child


@workflow.defn(name="SandboxListener")
class Listener:
    def __init__(self) -> None:
        self._heard: list[str] = []

    @workflow.signal
    def hear(self, text: str) -> None:
        self._heard.append(text)

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: bool(self._heard))
        return self._heard[0]


class OwnRunner(UnsandboxedWorkflowRunner):
    """A runner class of a user's own, which the sandbox creates runs with."""
