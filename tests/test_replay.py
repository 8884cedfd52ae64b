"""Recorded histories replay against the current workflow code: a change that alters the command
sequence of running tasks fails here, not in production.

The histories are the support window's (docs/operations.md): the previous release's (``r6-``,
0.2.0, recorded with ``ERRANDS_RECORD_HISTORIES=r6 make test``) and the paths of the release
being made (0.3.0), unprefixed. When a release is cut, its prefix records its set and the oldest
set leaves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from errands.adapters.sandbox import CompiledSandboxRunner
from errands.plugin import WORKFLOWS
from tests.helpers import HISTORIES

pytestmark = pytest.mark.fast

RECORDED = sorted(HISTORIES.glob("*.json"))
WINDOW = ("r6-",)
"""The releases whose tasks this code replays besides its own (unprefixed): the previous one."""
RELEASE = re.compile(r"r\d+-")


def test_histories_are_recorded() -> None:
    assert len(RECORDED) >= 5, f"expected recorded histories under {HISTORIES}"


def test_every_recorded_history_is_of_a_release_in_the_window() -> None:
    outside = [p.name for p in RECORDED if RELEASE.match(p.name) and not p.name.startswith(WINDOW)]
    assert not outside, f"histories from before the support window: {outside}"
    for prefix in WINDOW:
        assert any(p.name.startswith(prefix) for p in RECORDED), f"no {prefix}* histories"


RUNNERS = {
    "sandbox": SandboxedWorkflowRunner(),
    "compiled": CompiledSandboxRunner(restrictions=SandboxRestrictions.default),
}
"""temporalio's full sandbox, and errands' (compiled, its context questions read directly) with
the same restrictions: every history must replay in both."""


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
async def test_recorded_history_replays(path: Path, runner: str) -> None:
    recorded = json.loads(path.read_text())
    history = WorkflowHistory.from_json(recorded["workflow_id"], recorded["history"])
    replayer = Replayer(
        workflows=WORKFLOWS,
        data_converter=pydantic_data_converter,
        workflow_runner=RUNNERS[runner],
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
