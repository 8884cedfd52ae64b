"""``errands notifications TASK``: each delivery of a task's notifications, and the secrets of
the URLs ``errands run --notify`` gave, printed once (docs/notifications.md)."""

from __future__ import annotations

import argparse
import json

from errands.cli._connection import connection_flags
from errands.cli._output import note
from errands.cli._stack import stack
from errands.cli._terminal import one_line
from errands.client import Delivery, GivenTarget
from errands.settings import load_settings


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``errands notifications`` on the CLI's subcommands."""
    parsed = sub.add_parser(
        "notifications",
        help="show each delivery of a task's notifications: sent, failed or retrying",
    )
    parsed.add_argument("task")
    parsed.add_argument("--json", action="store_true")
    parsed.set_defaults(handler=notifications, stops_by_signal=False)


async def notifications(args: argparse.Namespace) -> int:
    settings = load_settings(**connection_flags(args))
    async with stack(settings, need_worker_here=False) as client:
        found = await client.notifications(args.task)
    if args.json:
        document = {"task_id": args.task, "deliveries": [d.public() for d in found]}
        print(json.dumps(document, ensure_ascii=False))
        return 0
    for delivery in found:
        print(delivery_line(delivery))
    if not found:
        note(f"errands: task {one_line(args.task)} has notified nothing yet")
    return 0


def delivery_line(delivery: Delivery) -> str:
    """One delivery as text: what it notified, where, how it stands, and its webhook-id."""
    tries = f"{delivery.attempts} attempt{'' if delivery.attempts == 1 else 's'}"
    last = []
    if delivery.status is not None:
        last.append(f"HTTP {delivery.status}")
    if delivery.detail:
        last.append(delivery.detail)
    said = f": {'; '.join(last)}" if last else ""
    return one_line(
        f"{delivery.event} → {delivery.target} ({delivery.host or 'unknown host'}) "
        f"{delivery.state}, {tries}{said} · webhook-id {delivery.webhook_id}"
    )


def print_secrets(given: list[GivenTarget]) -> None:
    """The secrets of the URLs given with a start, on stderr, once: nothing shows them again."""
    if not given:
        return
    note(
        "errands: each notification is signed (Standard Webhooks): verify its webhook-signature "
        "with the URL's secret below, HMAC-SHA256 over webhook-id.webhook-timestamp.body "
        "(docs/notifications.md). The secrets are shown this once; keep them now."
    )
    for target in given:
        note(one_line(f"  {target.url}  {target.secret}"))
