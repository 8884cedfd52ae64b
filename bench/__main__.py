"""``python -m bench [B1 B1e … B7] [--smoke]``: run benchmarks, save their results, write the doc.

With no names every benchmark runs at full size. ``--smoke`` runs them at the tiny sizes the
smoke test uses and prints the results without saving anything.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from bench import (
    b1_overhead,
    b1e_encryption,
    b2_throughput,
    b3_history,
    b4_fanout,
    b5_cache,
    b6_parked,
    b7_markdown,
    b8_sessions,
)
from bench._measure import child_pids, load_average
from bench._report import DOC, load_results, machine, now, render, save_results

BENCHMARKS: dict[str, ModuleType] = {
    "B1": b1_overhead,
    "B1E": b1e_encryption,
    "B2": b2_throughput,
    "B3": b3_history,
    "B4": b4_fanout,
    "B5": b5_cache,
    "B6": b6_parked,
    "B7": b7_markdown,
    "B8": b8_sessions,
}


KEEP_EARLIER = 5


def other_dev_servers() -> int:
    """Dev servers on this machine that are not ours: other developers' test runs."""
    ours = set(child_pids("temporal"))
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in ours:
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"start-dev" in cmdline:
                count += 1
    return count


async def run_one(key: str, smoke: bool) -> dict[str, Any]:
    module = BENCHMARKS[key]
    params = module.SMOKE if smoke else module.FULL
    print(f"{key}: {module.TITLE} {json.dumps(params)}", file=sys.stderr, flush=True)
    before, others = load_average(), other_dev_servers()
    began = time.perf_counter()
    result = await module.run(**params)
    duration = time.perf_counter() - began
    entry = {
        "date": now(),
        "params": json.dumps(params),
        "duration_s": round(duration, 1),
        "load_before": before,
        "load_after": load_average(),
        "other_dev_servers": max(others, other_dev_servers()),
        "headline": module.verdict(result)[0],
        "result": result,
    }
    print(f"{key}: done in {duration:.0f} s: {entry['headline']}", file=sys.stderr)
    return entry


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="B1..B7, B1e", help="benchmarks to run (all)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes; save nothing")
    args = parser.parse_args(argv)
    names = [n.upper() for n in args.names] or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
    results = load_results()
    # Taken before anything runs: the commit the benchmarks measure, before this run's own
    # results make the tree differ from it.
    measured_on = machine()
    for key in names:
        entry = await run_one(key, args.smoke)
        if args.smoke:
            print(json.dumps(entry, indent=1))
            continue
        # Wall-clock figures move with the machine's load: keep the last runs' headlines.
        previous = results["benchmarks"].get(key)
        if previous is not None:
            earlier = previous.pop("earlier", [])
            headline = previous.get("headline") or BENCHMARKS[key].verdict(previous["result"])[0]
            entry["earlier"] = [
                {"date": previous["date"], "load": previous["load_before"], "result": headline},
                *earlier,
            ][:KEEP_EARLIER]
        results["benchmarks"][key] = entry
        results["machine"] = measured_on
        results["run_date"] = now()
        results["command"] = " ".join(["python -m bench", *args.names])
        # Saved after each benchmark, so a long run that fails late keeps what it measured.
        save_results(results)
        DOC.parent.mkdir(exist_ok=True)
        DOC.write_text(render(results, BENCHMARKS))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
