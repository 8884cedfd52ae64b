"""``errands upgrade --from BUILD_ID``: wake every running task still pinned to an old build of
the worker deployment, so it moves to the current version and the old one drains
(docs/operations.md, "Upgrading workers safely")."""

from __future__ import annotations

import argparse
import json

from errands.cli._connection import connection_flags
from errands.cli._output import note
from errands.cli._stack import stack
from errands.cli._terminal import one_line
from errands.client import TaskOnOldVersion
from errands.client._upgrade import deployment_of
from errands.settings import load_settings


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``errands upgrade`` on the CLI's subcommands."""
    parsed = sub.add_parser(
        "upgrade",
        help="wake the running tasks on an old worker build so they move to the current one",
    )
    parsed.add_argument(
        "--from", dest="from_build", required=True, metavar="BUILD_ID", help="the old build"
    )
    parsed.add_argument(
        "--deployment",
        default=None,
        metavar="NAME",
        help="the worker deployment (default: ERRANDS_DEPLOYMENT_NAME)",
    )
    parsed.add_argument(
        "--dry-run", action="store_true", help="list the tasks on that build, wake none"
    )
    parsed.add_argument("--json", action="store_true")
    parsed.set_defaults(handler=upgrade, stops_by_signal=False)


async def upgrade(args: argparse.Namespace) -> int:
    settings = load_settings(**connection_flags(args))
    deployment_of(settings, args.from_build, args.deployment)  # refused before connecting
    async with stack(settings, need_worker_here=False) as client:
        tasks = await client.upgrade(
            args.from_build, deployment=args.deployment, dry_run=args.dry_run
        )
    if args.json:
        print(json.dumps([task.public() for task in tasks], ensure_ascii=False))
        return 0
    for task in tasks:
        print(one_line(f"{task.task_id}: {task.version}, {_what_happens(task, args.dry_run)}"))
    if not tasks:
        note(f"errands: no running task on build {one_line(args.from_build)}")
    return 0


def _what_happens(task: TaskOnOldVersion, dry_run: bool) -> str:
    if dry_run:
        return "waiting for the user" if task.waiting_for_user else "working"
    if not task.woken:
        return "ended meanwhile"
    if task.waiting_for_user:
        return "woken: moves now if it waits on a question, after the verdict on an approval"
    return "woken: moves at its next round boundary"
