"""The whole suite, full size or short, on one stack; then the audit of every history it made."""

from __future__ import annotations

import asyncio
import os
import random
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field

from chaos._bad_input import bad_input
from chaos._checks import audit_histories
from chaos._crashes import (
    KILL_FULL,
    KILL_SHORT,
    RESTART_FULL,
    RESTART_SHORT,
    server_restarts,
    worker_kills,
)
from chaos._faults import provider_faults
from chaos._hostile import hostile_input
from chaos._planned import Size
from chaos._probes import probes
from chaos._report import Outcome, Run
from chaos._stack import ROOT, Stack


@dataclass(frozen=True)
class Scale:
    kill: Size
    restart: Size
    apis: list[str]
    examples: dict[str, int]
    pure_examples: int
    probes: list[str] | None = field(default=None)
    """None: every probe."""


FULL = Scale(
    kill=KILL_FULL,
    restart=RESTART_FULL,
    apis=["openai", "anthropic"],
    examples={"answers": 50, "side questions": 40, "control-tool arguments": 50},
    pure_examples=1000,
)
SHORT = Scale(
    kill=KILL_SHORT,
    restart=RESTART_SHORT,
    apis=["openai"],
    examples={"answers": 10, "side questions": 6, "control-tool arguments": 8},
    pure_examples=0,
)
SCENARIOS = ["kill", "restart", "faults", "input", "hostile", "probes", "pure"]
SEALED = (
    "survey the options and report back",
    "round 0 part 1",
    "final answer for ",
    "How wide should the survey be?",
)
"""Words of the planned tasks (a task's text, a branch's prompt and result, a reply, a question)
that no raw history may hold when the stack encrypts."""


def scenario_rng(seed: int, name: str) -> random.Random:
    """Each scenario draws from its own stream, so one can be rerun alone with the same seed."""
    return random.Random(f"{seed}:{name}")


async def run_suite(
    seed: int, *, short: bool, only: list[str] | None = None, encrypt: bool = False
) -> Run:
    scale = SHORT if short else FULL
    chosen = only or SCENARIOS
    run = Run(seed=seed, short=short, encrypted=encrypt)
    started = time.monotonic()
    async with Stack.open(encrypt=encrypt) as stack:
        steps = {
            "kill": lambda: worker_kills(stack, scenario_rng(seed, "kill"), scale.kill),
            "restart": lambda: server_restarts(stack, scenario_rng(seed, "restart"), scale.restart),
            "faults": lambda: provider_faults(stack, scale.apis),
            "input": lambda: bad_input(stack, seed, scale.examples),
            "hostile": lambda: hostile_input(stack, full=not short, apis=scale.apis),
            "probes": lambda: probes(stack, scale.probes),
        }
        for name in chosen:
            if name in steps:
                outcome = await steps[name]()
                run.outcomes.append(outcome)
                print(outcome.summary(), flush=True)
        audit = Outcome("audit", "Secrets and replay: every history the suite produced")
        audit_started = time.monotonic()
        await audit_histories(
            stack.client,
            stack.queues,
            stack.keys,
            audit,
            probed={q for q in stack.queues if q.startswith("chaos-probes-")},
            sealed=SEALED if encrypt else (),
        )
        audit.seconds = time.monotonic() - audit_started
        audit.faults["provider keys looked for"] = len(stack.keys)
        run.outcomes.append(audit)
        print(audit.summary(), flush=True)
    if "pure" in chosen and scale.pure_examples:
        pure = await asyncio.to_thread(pure_properties, scale.pure_examples)
        run.outcomes.append(pure)
        print(pure.summary(), flush=True)
    run.seconds = time.monotonic() - started
    return run


def pure_properties(examples: int) -> Outcome:
    """``tests/test_properties.py`` with more examples per property than CI gives it."""
    outcome = Outcome("pure", "Properties of the pure validators and the catalog")
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/test_properties.py",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env={**os.environ, "ERRANDS_PROPERTY_EXAMPLES": str(examples)},
        capture_output=True,
        text=True,
        check=False,
    )
    passed = _count(r"(\d+) passed", done.stdout)
    failed = _count(r"(\d+) failed", done.stdout)
    outcome.seconds = time.monotonic() - started
    outcome.faults["generated inputs"] = (passed + failed) * examples
    outcome.facts["properties"] = passed + failed
    outcome.facts["examples per property"] = examples
    if failed or done.returncode not in (0, 134):
        tail = "\n".join(done.stdout.splitlines()[-15:])
        outcome.lose("property violations", f"{failed} properties failed:\n{tail}", max(1, failed))
    return outcome


def _count(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    return int(found.group(1)) if found else 0
