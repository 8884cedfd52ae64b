"""Recorded histories replay against the current workflow code: a change that alters the command
sequence of running tasks fails here, not in production.

Record them again with ``ERRANDS_RECORD_HISTORIES=1 make test`` (only when a change is guarded or
the previous release's tasks have drained)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from errands.plugin import WORKFLOWS
from tests.helpers import HISTORIES

pytestmark = pytest.mark.fast

RECORDED = sorted(HISTORIES.glob("*.json"))


def test_histories_are_recorded() -> None:
    assert len(RECORDED) >= 5, f"expected recorded histories under {HISTORIES}"


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
async def test_recorded_history_replays(path: Path) -> None:
    recorded = json.loads(path.read_text())
    history = WorkflowHistory.from_json(recorded["workflow_id"], recorded["history"])
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
