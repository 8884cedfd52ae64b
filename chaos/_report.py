"""What a scenario found, counted, and the reliability note written from it.

Every loss is a count under a fixed name, never a boolean: "nothing was lost" in the note is the
sum of these counts being zero, and a failing run says how much of what went wrong.
"""

from __future__ import annotations

import os
import platform
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

GENERATED = {"input", "pure", "hostile"}
"""Scenarios whose "faults" are generated inputs rather than injected failures."""

MAX_DETAILS = 40
"""Problems kept in words per scenario; the counts keep going past it."""

LOSSES = (
    "tasks not ended as expected",
    "messages missing",
    "messages duplicated",
    "unexpected messages",
    "messages with wrong content",
    "second reply visible",
    "message changed after it was seen",
    "answers lost",
    "settled step asked again",
    "workflow task failures",
    "stuck tasks",
    "property violations",
    "secrets in history",
    "user text readable in history",
    "histories that do not replay",
    "wrong displays",
    "tool calls not as approved",
)
"""The names losses are counted under, in the order the note lists them."""


@dataclass
class Outcome:
    name: str
    title: str
    tasks: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    facts: dict[str, Any] = field(default_factory=dict)
    losses: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def lose(self, what: str, detail: str, count: int = 1) -> None:
        if what not in LOSSES:
            raise ValueError(f"unknown loss {what!r}; add it to chaos._report.LOSSES")
        if count <= 0:
            return
        self.losses[what] += count
        if len(self.problems) < MAX_DETAILS:
            self.problems.append(f"{what}: {detail}")

    @property
    def lost(self) -> int:
        return sum(self.losses.values())

    def summary(self) -> str:
        faults = sum(self.faults.values())
        verdict = "nothing lost" if not self.lost else f"{self.lost} problem(s)"
        return f"{self.name}: {self.tasks} tasks, {faults} faults, {verdict} ({self.seconds:.0f} s)"


@dataclass
class Run:
    seed: int
    short: bool
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0
    encrypted: bool = False
    """Payload encryption was on (``--encrypt``)."""

    @property
    def lost(self) -> int:
        return sum(o.lost for o in self.outcomes)


def machine() -> str:
    cpu = _cpu_model() or platform.processor() or platform.machine()
    cores = os.cpu_count() or 0
    memory = _memory_gib()
    parts = [f"{cpu}, {cores} cores" if cores else cpu]
    if memory:
        parts.append(f"{memory:.0f} GiB RAM")
    parts.append(f"{platform.system()} {platform.release()}")
    parts.append(f"Python {platform.python_version()}")
    return "; ".join(parts)


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024 / 1024
    except (OSError, ValueError):
        return None
    return None


def render(run: Run, versions: dict[str, str], findings: list[str]) -> str:
    """The reliability note: what was injected, what ran, what was lost, and how to redo it."""
    generated = sum(sum(o.faults.values()) for o in run.outcomes if o.name in GENERATED)
    faults = sum(sum(o.faults.values()) for o in run.outcomes) - generated
    tasks = sum(o.tasks for o in run.outcomes)
    scenarios = [o for o in run.outcomes if o.name != "probes"]
    lost = sum(o.lost for o in scenarios)
    probed = sum(o.lost for o in run.outcomes if o.name == "probes")
    size = "short" if run.short else "full"
    lines = [
        "# Reliability: the fault-injection suite",
        "",
        "`make chaos` (`.venv/bin/python -m chaos`) runs every scenario below against a real "
        "Temporal dev server (SQLite file), real `python worker.py` processes and the real "
        "OpenAI and Anthropic SDK clients talking to the scripted model server on loopback. "
        "Each scenario counts what was lost instead of assuming nothing was; `--seed N` replays "
        "a run's random choices (kill points, plans, generated inputs), and `--short` is the "
        "form CI runs inside `make test` (`tests/test_chaos_short.py`).",
        "",
        "## This run",
        "",
        f"- Date: {run.started:%Y-%m-%d %H:%M} UTC; {size} size; {run.seconds / 60:.1f} minutes",
        f"- Seed: `{run.seed}` (reproduce with `python -m chaos --seed {run.seed}`)",
        f"- Machine: {machine()}",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
        f"- Faults injected: **{faults}**; generated bad inputs: **{generated}**; "
        f"tasks run: **{tasks}**",
        f"- Lost under the injected faults: **{lost}** "
        + ("(nothing)" if not lost else "(see the scenarios below)"),
        f"- Open bugs the targeted probes found: **{probed}** "
        + ("(none)" if not probed else "(described at the end)"),
        "",
        "| scenario | tasks | faults injected (or inputs generated) | lost |",
        "|---|---:|---|---:|",
    ]
    for o in run.outcomes:
        injected = ", ".join(f"{k} × {v}" for k, v in sorted(o.faults.items())) or "-"
        lines.append(f"| {o.title} | {o.tasks} | {injected} | {o.lost} |")
    lines += [
        "",
        "## What was counted as lost",
        "",
        "Each of these is counted by every scenario it applies to (the probes, aimed at known "
        "weak spots, are counted apart); all are zero when nothing was lost.",
        "",
        "| loss | count |",
        "|---|---:|",
    ]
    total: Counter[str] = Counter()
    for o in scenarios:
        total.update(o.losses)
    lines += [f"| {name} | {total[name]} |" for name in LOSSES]
    for o in run.outcomes:
        lines += ["", f"## {o.title}", ""]
        lines += [f"- {k}: {_fact(v)}" for k, v in o.facts.items()]
        lines += [f"- {note}" for note in o.notes]
        if o.problems:
            lines += ["", "Problems:", ""] + [f"- {p}" for p in o.problems]
    if findings:
        lines += [
            "",
            "## Bugs the suite found",
            "",
            "Each was found by a scenario above or by hypothesis, then given a probe that aims at "
            "it directly; `tests/test_chaos_short.py` runs every probe in CI.",
            "",
            *findings,
        ]
    return "\n".join(lines) + "\n"


ENCRYPTED_HEADING = "## With payload encryption on"
ENCRYPTED_BEFORE = "## What was counted as lost"


def render_encrypted(run: Run, command: str) -> str:
    """The note's section for a run with encryption on: kept apart from the full run's note,
    which a later ``make chaos`` rewrites around it."""
    # The audit's "faults" are the keys it looked for, not failures injected.
    struck = [o for o in run.outcomes if o.name not in GENERATED and o.name != "audit"]
    faults = sum(sum(o.faults.values()) for o in struck)
    tasks = sum(o.tasks for o in run.outcomes)
    lost = sum(o.lost for o in run.outcomes if o.name != "probes")
    audit = next((o for o in run.outcomes if o.name == "audit"), None)
    lines = [
        ENCRYPTED_HEADING,
        "",
        f"`{command}` runs the scenarios with payload encryption on: a key made up for the run "
        "is given as `ERRANDS_ENCRYPTION_KEYS` to every `python worker.py` process, and the "
        "suite's own client (tasks, answers, signals, histories) carries the same codec "
        "(`errands.adapters.encryption.data_converter`). The audit replays every history through "
        "the codec and looks for the planned tasks' words in every history's raw bytes (where a "
        "payload is as stored, not in the base64 of a JSON export).",
        "",
        f"- Date: {run.started:%Y-%m-%d %H:%M} UTC; {'short' if run.short else 'full'} size; "
        f"{run.seconds / 60:.1f} minutes; seed `{run.seed}`",
        f"- Machine: {machine()}",
        f"- Faults injected: **{faults}**; tasks run: **{tasks}**; lost: **{lost}** "
        + ("(nothing)" if not lost else "(see below)"),
        "",
        "| scenario | tasks | faults injected | lost |",
        "|---|---:|---|---:|",
    ]
    for o in run.outcomes:
        injected = ", ".join(f"{k} × {v}" for k, v in sorted(o.faults.items())) or "-"
        lines.append(f"| {o.title} | {o.tasks} | {injected} | {o.lost} |")
    if audit is not None:
        lines += ["", *(f"- {k}: {_fact(v)}" for k, v in audit.facts.items())]
    problems = [p for o in run.outcomes for p in o.problems]
    if problems:
        lines += ["", "Problems:", "", *(f"- {p}" for p in problems)]
    return "\n".join(lines) + "\n"


def encrypted_section(note: str) -> str | None:
    """The encryption section of an existing note (up to the next heading), if it has one."""
    start = note.find(ENCRYPTED_HEADING)
    if start < 0:
        return None
    end = note.find("\n## ", start + len(ENCRYPTED_HEADING))
    return note[start : end + 1 if end >= 0 else len(note)]


def with_encrypted_section(note: str, section: str) -> str:
    """``note`` with ``section`` in place of its encryption section, or before its losses
    table when it has none."""
    old = encrypted_section(note)
    if old is not None:
        at = note.index(old)
        rest = note[at + len(old) :]
        return note[:at] + section.rstrip("\n") + "\n" + ("\n" + rest if rest else "")
    at = note.find(ENCRYPTED_BEFORE)
    if at < 0:
        return note.rstrip("\n") + "\n\n" + section
    return note[:at] + section.rstrip("\n") + "\n\n" + note[at:]


def _fact(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, dict | Counter):
        return ", ".join(f"{k} {v}" for k, v in value.items()) or "-"
    return str(value)
