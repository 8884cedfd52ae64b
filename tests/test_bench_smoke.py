"""Every benchmark runs end to end at tiny sizes on one shared stack, and its report renders.

Timing is never asserted here (the machine is shared): only that each benchmark completes and
produces JSON-serializable results, a verdict and a table, plus the invariant B5 measures.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bench.__main__ import BENCHMARKS
from bench._harness import Stack


@pytest.fixture(scope="module")
async def stack() -> AsyncIterator[Stack]:
    # A task that hangs (a workflow task failing over and over) fails the test in a minute.
    async with Stack("smoke", task_timeout=60) as shared:
        yield shared


def rounds_are_byte_identical_prefixes(result: dict[str, Any]) -> None:
    assert [r["prefix_fraction"] for r in result["rounds"]] == [1.0, 1.0]
    assert all(r["tools_identical"] for r in result["rounds"])


def the_event_log_is_on_in_one_row_and_off_in_the_other(result: dict[str, Any]) -> None:
    log = result["event_log"]
    assert log["events_per_task"] > 0 and log["reply_deltas_per_task"] > 0
    assert log["events_per_task_log_off"] == 0


INVARIANTS = {
    "B1": the_event_log_is_on_in_one_row_and_off_in_the_other,
    "B5": rounds_are_byte_identical_prefixes,
}


@pytest.mark.parametrize("key", list(BENCHMARKS))
async def test_each_benchmark_runs_at_tiny_size_and_reports(stack: Stack, key: str) -> None:
    module = BENCHMARKS[key]
    result = await module.run(**module.SMOKE, stack=stack)
    json.dumps(result)
    figure, _target, _met = module.verdict(result)
    assert figure
    assert "|" in module.markdown(result)
    INVARIANTS.get(key, lambda _: None)(result)
