"""``errands schedule add|list|show|pause|resume|trigger|delete``: scheduled tasks on Temporal
Schedules (docs/schedules.md). Each command talks to errands through ``errands.client``'s
schedule functions; the commands that print state take ``--json``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from typing import Any

from errands.cli._connection import add_connection_flags, connection_flags
from errands.cli._output import note
from errands.cli._stack import stack
from errands.cli._terminal import one_line
from errands.client import Client
from errands.client._schedule_views import ScheduleView
from errands.client._schedules import (
    OVERLAPS,
    add_schedule,
    delete_schedule,
    list_schedules,
    parse_duration,
    pause_schedule,
    resume_schedule,
    show_schedule,
    trigger_schedule,
)
from errands.settings import load_settings


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``errands schedule`` and its actions on the CLI's subcommands."""
    schedule = sub.add_parser("schedule", help="tasks that run on a schedule (Temporal Schedules)")
    actions = schedule.add_subparsers(required=True, metavar="ACTION")

    def action(name: str, handler: Callable[..., Awaitable[int]], help: str, *, json_: bool):
        parsed = actions.add_parser(name, help=help)
        if name != "list":
            parsed.add_argument("name", help="the schedule's name")
        if json_:
            parsed.add_argument("--json", action="store_true")
        add_connection_flags(parsed)
        parsed.set_defaults(handler=handler, stops_by_signal=False)
        return parsed

    add = action("add", _add, "add a schedule whose every fire starts a task", json_=True)
    add.add_argument("text", help="what each fire's task is asked")
    when = add.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", metavar="EXPR", help="five cron fields, e.g. '0 8 * * 1-5'")
    when.add_argument("--every", metavar="DURATION", help="an interval, e.g. 15m, 1h, 1d")
    add.add_argument("--timezone", default="UTC", help="IANA time zone of --cron (default UTC)")
    where = add.add_mutually_exclusive_group()
    where.add_argument("--session", help="one named session for every fire's task")
    where.add_argument(
        "--new-session", action="store_true", help="a new session per fire (the default)"
    )
    add.add_argument("--headless", action="store_true", help="no one will answer questions")
    add.add_argument("--model", help="provider:model (default: the worker's ERRANDS_MODEL)")
    add.add_argument(
        "--notify",
        action="append",
        metavar="URL",
        help="an https:// URL notified of each task's changes of state (repeat for up to 4)",
    )
    add.add_argument(
        "--overlap",
        choices=list(OVERLAPS),
        default="skip",
        help="a fire while the previous task still runs: skip it (default), buffer one, "
        "allow all, or cancel the previous",
    )
    add.add_argument(
        "--catchup",
        default="1h",
        metavar="DURATION",
        help="how late a fire may still start its task, after an outage (default 1h, least 10s)",
    )
    add.add_argument("--paused", action="store_true", help="add it paused")
    action("list", _list, "list your schedules", json_=True)
    action("show", _show, "a schedule: next fires, recent fires and their tasks", json_=True)
    action("pause", _pause, "stop a schedule's fires until resumed", json_=False).add_argument(
        "--note", help="why (shown by show and in the Temporal UI)"
    )
    action("resume", _resume, "resume a paused schedule", json_=False)
    action("trigger", _trigger, "fire a schedule once now", json_=False)
    action("delete", _delete, "delete a schedule (tasks already started run on)", json_=False)


async def _with_client(args: argparse.Namespace, call: Callable[[Client], Awaitable[Any]]) -> Any:
    settings = load_settings(**connection_flags(args))
    async with stack(settings, need_worker_here=False) as client:
        return await call(client)


async def _add(args: argparse.Namespace) -> int:
    every = parse_duration(args.every, "every") if args.every else None
    catchup = parse_duration(args.catchup, "catchup")
    added = await _with_client(
        args,
        lambda client: add_schedule(
            client,
            args.name,
            args.text,
            cron=args.cron,
            every=every,
            timezone=args.timezone,
            session=args.session,
            headless=args.headless,
            model=args.model,
            notify=args.notify,
            overlap=args.overlap,
            catchup=catchup,
            paused=args.paused,
        ),
    )
    if added.notify_secrets:
        note("errands: each notification is signed; the secrets are shown this once:")
        for given in added.notify_secrets:
            note(one_line(f"  {given['url']}  {given['secret']}"))
    if args.json:
        print(json.dumps(added.public(), ensure_ascii=False))
    else:
        print(added.schedule_id)
    return 0


async def _list(args: argparse.Namespace) -> int:
    found: list[ScheduleView] = await _with_client(args, list_schedules)
    if args.json:
        print(json.dumps({"schedules": [v.public() for v in found]}, ensure_ascii=False))
        return 0
    for view in found:
        state = (
            "paused" if view.paused else f"next {view.next_fires[0] if view.next_fires else '-'}"
        )
        print(one_line(f"{view.name}  {_when(view)}  {state}  {view.text[:60]}"))
    if not found:
        note("errands: no schedules (errands schedule add NAME --cron EXPR TEXT)")
    return 0


async def _show(args: argparse.Namespace) -> int:
    view: ScheduleView = await _with_client(args, lambda c: show_schedule(c, args.name))
    if args.json:
        print(json.dumps(view.public(), ensure_ascii=False))
        return 0
    print(one_line(f"schedule {view.name} ({view.schedule_id}): {_when(view)}"))
    print(one_line(f"  runs: {view.text}"))
    session = view.session or "a new session per fire"
    print(one_line(f"  session: {session}; headless: {view.headless}; overlap: {view.overlap}"))
    print(f"  catch-up window: {view.catchup_seconds:g} s; paused: {view.paused}")
    print(
        f"  fires: {view.fires_total}, skipped: {view.skipped_overlap}, buffered: {view.buffered}"
    )
    for at in view.next_fires:
        print(f"  next: {at}")
    for fire in view.recent:
        print(one_line(f"  fired {fire.fired_at}: {fire.task_id} {fire.outcome}"))
    return 0


def _when(view: ScheduleView) -> str:
    if view.cron:
        return f"cron '{view.cron}' {view.timezone}"
    return f"every {view.every_seconds or 0:g} s"


async def _pause(args: argparse.Namespace) -> int:
    await _with_client(args, lambda c: pause_schedule(c, args.name, args.note))
    return 0


async def _resume(args: argparse.Namespace) -> int:
    await _with_client(args, lambda c: resume_schedule(c, args.name))
    return 0


async def _trigger(args: argparse.Namespace) -> int:
    await _with_client(args, lambda c: trigger_schedule(c, args.name))
    return 0


async def _delete(args: argparse.Namespace) -> int:
    await _with_client(args, lambda c: delete_schedule(c, args.name))
    return 0
