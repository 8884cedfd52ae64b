"""The fault-injection suite in its short form: the scenarios of ``python -m chaos --short`` on
their own dev server (a SQLite file, so it can be restarted), with ``python worker.py`` processes
to kill. Each test asserts that nothing was lost; a failure names the seed that replays it
(``ERRANDS_CHAOS_SEED=N``).

The probes of the bugs this suite found (``docs/reliability.md`` describes them) now run as
plain tests: each pins its fix.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator

import pytest

from chaos._bad_input import bad_input
from chaos._checks import audit_histories
from chaos._crashes import server_restarts, worker_kills
from chaos._faults import provider_faults
from chaos._hostile import hostile_input
from chaos._probes import probes
from chaos._report import Outcome
from chaos._stack import Stack
from chaos._suite import SEALED, SHORT, scenario_rng
from errands.adapters.encryption import ENCODING

SEED = int(os.environ.get("ERRANDS_CHAOS_SEED") or secrets.randbelow(2**31))


@pytest.fixture(scope="module")
async def stack() -> AsyncIterator[Stack]:
    async with Stack.open() as opened:
        yield opened


@pytest.fixture(scope="module")
async def encrypted_stack() -> AsyncIterator[Stack]:
    """A stack of its own whose workers and client encrypt every payload (``--encrypt``)."""
    async with Stack.open(encrypt=True) as opened:
        yield opened


def nothing_lost(outcome: Outcome) -> None:
    assert not outcome.lost, f"seed {SEED}, {outcome.summary()}:\n" + "\n".join(outcome.problems)


async def test_workers_killed_at_random_points_lose_no_task_message_or_answer(
    stack: Stack,
) -> None:
    outcome = await worker_kills(stack, scenario_rng(SEED, "kill"), SHORT.kill)
    nothing_lost(outcome)
    assert outcome.faults["worker kill -9"] >= 1


async def test_workers_killed_with_encryption_on_lose_nothing_and_show_no_text(
    encrypted_stack: Stack,
) -> None:
    outcome = await worker_kills(encrypted_stack, scenario_rng(SEED, "kill"), SHORT.kill)
    nothing_lost(outcome)
    assert outcome.faults["worker kill -9"] >= 1
    [queue] = encrypted_stack.queues
    first = await anext(encrypted_stack.client.list_workflows(f"TaskQueue = '{queue}'"))
    history = await encrypted_stack.client.get_workflow_handle(first.id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    assert [p.metadata["encoding"] for p in started.input.payloads] == [ENCODING]
    # Every history replays through the codec, and none holds the tasks' words in the clear.
    audit = Outcome("audit", "audit")
    await audit_histories(
        encrypted_stack.client, [queue], encrypted_stack.keys, audit, sealed=SEALED
    )
    nothing_lost(audit)
    assert audit.facts["histories replayed"] >= SHORT.kill.tasks


async def test_tasks_finish_across_a_dev_server_restart(stack: Stack) -> None:
    outcome = await server_restarts(stack, scenario_rng(SEED, "restart"), SHORT.restart)
    nothing_lost(outcome)
    assert outcome.faults["dev server stop + start"] == SHORT.restart.strikes


async def test_every_provider_fault_ends_the_way_the_spec_says(stack: Stack) -> None:
    nothing_lost(await provider_faults(stack, SHORT.apis))


async def test_bad_answers_side_questions_and_control_arguments_strand_no_task(
    stack: Stack,
) -> None:
    nothing_lost(await bad_input(stack, SEED, SHORT.examples))


async def test_hostile_models_and_tools_break_no_task_and_fool_no_display(stack: Stack) -> None:
    outcome = await hostile_input(stack, full=False, apis=SHORT.apis)
    nothing_lost(outcome)
    assert outcome.tasks == outcome.facts["cases"] >= 14


async def test_no_history_holds_a_provider_key_and_every_history_replays(stack: Stack) -> None:
    outcome = Outcome("audit", "audit")
    probed = {q for q in stack.queues if q.startswith("chaos-probes-")}
    await audit_histories(stack.client, stack.queues, stack.keys, outcome, probed=probed)
    nothing_lost(outcome)
    assert outcome.facts["histories replayed"] > 0 or not stack.queues


FIXED_BUGS = [
    "a 401 whose message echoes the key",
    "rejected control calls over 1 MB, twice",
    "deeply nested control-call arguments",
    "a subtask type that is not a string",
    "an answer signal that is not a JSON object",
]


@pytest.mark.parametrize("probe", FIXED_BUGS)
async def test_probe_of_a_fixed_bug_holds(stack: Stack, probe: str) -> None:
    nothing_lost(await probes(stack, [probe]))
