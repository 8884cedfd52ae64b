"""Workflows for tests/test_sandbox.py, in a module of their own: the sandbox imports a workflow's
module afresh for each run, and this one imports nothing a workflow may not."""

from __future__ import annotations

import datetime
from datetime import timedelta

from temporalio import workflow

RUNS: list[str] = []
"""Module state a run appends to: inside the sandbox each run sees a fresh copy of it."""


@workflow.defn(name="SandboxCounter")
class Counter:
    @workflow.run
    async def run(self, name: str) -> int:
        RUNS.append(name)
        await workflow.sleep(timedelta(milliseconds=1))
        return len(RUNS)


@workflow.defn(name="SandboxClock")
class Clock:
    @workflow.run
    async def run(self) -> str:
        return datetime.datetime.now().isoformat()  # forbidden in a workflow
