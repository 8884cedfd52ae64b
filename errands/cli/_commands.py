"""One handler per ``errands`` command; ``errands.cli`` maps the command line onto them. Every
handler talks to errands through ``errands.Client``; refusals are ``errands.errors``."""

from __future__ import annotations

import argparse
import asyncio
import json

from errands.adapters.connection import resolve
from errands.adapters.store import open_store, sqlite_path
from errands.cli._codec import dev_codec_server, dev_keys, key_source
from errands.cli._connection import connection_flags, connection_report, render_connection
from errands.cli._follow import follow
from errands.cli._notifications import print_secrets
from errands.cli._output import approvals_so_far, event_line, note, print_state, who
from errands.cli._stack import dev_server, stack, ui_url
from errands.cli._terminal import one_line, shown
from errands.client import Client, connect, new_session_id, task_input
from errands.contracts.approvals import ApprovalReceipt
from errands.contracts.events import named
from errands.errors import InvalidRequest
from errands.settings import load_settings, render_report

FLAGS = {"model": "--model", "fallback_model": "--fallback-model"}
"""Task arguments by the flag that sets them, to name the flag in a refusal."""


async def run(args: argparse.Namespace) -> int:
    settings = load_settings(**connection_flags(args))
    session = args.session if args.session is not None else new_session_id()
    options = {
        "session": session,
        "model": args.model,
        "fallback_model": args.fallback_model,
        "headless": args.headless,
        "notify": args.notify,
    }
    try:
        # Everything is checked before the stack starts and anything is written.
        task_input(settings, args.text, **options)
    except InvalidRequest as error:
        raise _with_flag(error, args) from None
    if not args.model:
        model_note = settings.default_model()[1]
        if model_note:
            note(model_note)
    async with stack(settings, need_worker_here=not args.detach) as client:
        handle = await client.start(args.text, **options)
        print_secrets(handle.notify_secrets)
        if args.detach:
            if args.json:
                print(
                    json.dumps(
                        {"task_id": handle.task_id, "session_id": session, "status": "running"}
                    )
                )
            else:
                print(handle.task_id)
            return 0
        note(f"errands: task {handle.task_id} in session {session}")
        state = await follow(handle, timeout=None, steps=True)
    if not resolve(settings).configured:
        note(f"Temporal UI: {ui_url(settings, handle.task_id)} (while `errands dev` runs)")
    print_state(state, args.json)
    return 0 if state["status"] == "replied" else 1


def _with_flag(error: InvalidRequest, args: argparse.Namespace) -> InvalidRequest:
    """The refusal naming the flag or the setting the bad value came from."""
    if error.field not in FLAGS:
        return error
    given = getattr(args, error.field, None)
    source = FLAGS[error.field] if given else f"ERRANDS_{error.field.upper()}"
    return InvalidRequest(
        error.message.replace(f"{error.field}:", f"{source}:", 1), field=error.field
    )


async def wait(args: argparse.Namespace) -> int:
    settings = load_settings(**connection_flags(args))
    async with stack(settings, need_worker_here=False) as client:
        try:
            state = await follow(client.task(args.task), timeout=args.timeout, steps=False)
        except TimeoutError:
            raise InvalidRequest(
                f"task {args.task} did not end within {args.timeout:g} s; it goes on running "
                f"(`errands status {args.task}` shows what it is doing)"
            ) from None
    print_state(state, args.json)
    return 0 if state["status"] == "replied" else 1


async def status(args: argparse.Namespace) -> int:
    settings = load_settings(**connection_flags(args))
    async with stack(settings, need_worker_here=False) as client:
        result = await client.task(args.task).status()
    print_state(result.public(), args.json)
    return 0


async def answer(args: argparse.Namespace) -> int:
    if args.dismiss + args.cancel + bool(args.choices) != 1:
        raise InvalidRequest(
            "give answers as QID=VALUE, or --dismiss, or --cancel (exactly one of them)"
        )
    answers: dict[str, list[str]] = {}
    for choice in args.choices:
        qid, sep, value = choice.partition("=")
        if not sep or not qid.strip():
            raise InvalidRequest(f"{choice!r} is not QID=VALUE (for example q1=PostgreSQL)")
        answers.setdefault(qid.strip(), []).append(value)
    settings = load_settings(**connection_flags(args))
    async with stack(settings, need_worker_here=False) as client:
        receipt = await client.task(args.task).answer(
            answers or None, dismiss=args.dismiss, cancel=args.cancel
        )
    if args.json:
        print(json.dumps({"task_id": args.task, "accepted": True, **receipt.model_dump()}))
    elif args.cancel:
        print(f"{one_line(args.task)}: question cancelled; the task goes on without an answer")
    elif args.dismiss:
        print(f"{one_line(args.task)}: question dismissed; the agent replies without a choice")
    else:
        print(f"{one_line(args.task)}: answer accepted; the task goes on")
    return 0


async def say(args: argparse.Namespace) -> int:
    mode = "queue" if args.queue else "interrupt" if args.interrupt else "steer"
    settings = load_settings(**connection_flags(args))
    async with stack(settings, need_worker_here=False) as client:
        receipt = await client.task(args.task).say(args.text, mode=mode)
    if args.json:
        print(json.dumps({"task_id": args.task, **receipt.model_dump()}))
    elif receipt.status == "queued":
        print(one_line(f"{args.task}: queued as {receipt.message_id}; it becomes the next task"))
    elif receipt.status == "started":
        print(one_line(f"{args.task} had ended; the message started the session's next task"))
        print(one_line(str(receipt.task_id)))
    else:
        sent = f"{args.task}: {receipt.message_id} sent; the agent sees it before its next step"
        print(one_line(sent))
    return 0


def _pinned(args: argparse.Namespace, verb: str) -> None:
    """Refuse an answer that names no call: the digest (or id) comes from the person who read
    the call, never from whatever waits when the answer lands."""
    if args.arguments_sha256 is None and args.approval_id is None:
        raise InvalidRequest(
            f"errands {verb} needs the call you read: pass the --sha256 that `errands status "
            f"{args.task}` shows on its 'approve with:' line (or --id APPROVAL_ID)"
        )


async def approve(args: argparse.Namespace) -> int:
    _pinned(args, "approve")
    settings = load_settings(**connection_flags(args))
    async with stack(settings, need_worker_here=False) as client:
        receipt = await client.task(args.task).approve(
            always=args.always,
            approval_id=args.approval_id,
            arguments_sha256=args.arguments_sha256,
        )
    if args.json:
        print(json.dumps({"task_id": args.task, **_receipt_view(receipt)}))
    else:
        print(_approved(args.task, receipt, args.always))
        print(_answered_call(receipt))
    return 0


def _approved(task_id: str, receipt: ApprovalReceipt, always: bool) -> str:
    """What an approval did: recorded while the call waits for another approver (policy
    ``two``), or the call runs."""
    task = one_line(task_id)
    approvers = [n for p in receipt.approved_by if (n := named(p))]
    if receipt.waiting_for:
        needed = len(approvers) + receipt.waiting_for
        second = "a second, different approver" if receipt.waiting_for == 1 else "more approvers"
        return (
            f"{task}: your approval is recorded, {approvals_so_far(approvers, needed)}; "
            f"the call does not run yet: it waits for {second}"
        )
    if len(approvers) > 1:
        return f"{task}: tool call approved by {who(approvers)}; it runs and the task goes on"
    later = " (and its later calls in this session)" if always else ""
    return f"{task}: tool call approved{later}; the task goes on"


def _receipt_view(receipt: ApprovalReceipt) -> dict[str, object]:
    """A receipt as ``--json`` prints it: principals named as events and the API name them."""
    return {**receipt.model_dump(), "approved_by": [named(p) for p in receipt.approved_by]}


async def deny(args: argparse.Namespace) -> int:
    _pinned(args, "deny")
    settings = load_settings(**connection_flags(args))
    async with stack(settings, need_worker_here=False) as client:
        receipt = await client.task(args.task).deny(
            args.reason, approval_id=args.approval_id, arguments_sha256=args.arguments_sha256
        )
    if args.json:
        print(json.dumps({"task_id": args.task, **_receipt_view(receipt)}))
    else:
        print(f"{one_line(args.task)}: tool call denied; the agent is told and goes on without it")
        print(_answered_call(receipt))
    return 0


def _answered_call(receipt: ApprovalReceipt) -> str:
    """Which call an approve or deny answered: its tool, the size and digest of its arguments."""
    size = f"{receipt.arguments_bytes:,} bytes" if receipt.arguments_bytes is not None else "?"
    return (
        f"  answered: {one_line(receipt.approval_id)} · {one_line(receipt.tool or '?')} · "
        f"arguments {size} · sha256 {receipt.arguments_sha256 or 'not recorded'}"
    )


async def watch(args: argparse.Namespace) -> int:
    if args.after < 0:
        raise InvalidRequest("--after takes a sequence number, 0 or more")
    settings = load_settings(**connection_flags(args))
    async with stack(settings, need_worker_here=False) as client:
        task = client.task(args.task)
        await task.status()  # an unknown task is refused here, not waited on
        async for event in task.events(after=args.after):
            if args.json:
                print(json.dumps(event.public(), ensure_ascii=False), flush=True)
            else:
                print(event_line(event), flush=True)
    return 0


async def cancel(args: argparse.Namespace) -> int:
    settings = load_settings(**connection_flags(args))
    async with stack(settings, need_worker_here=False) as client:
        await client.task(args.task).cancel()
    if args.json:
        print(json.dumps({"task_id": args.task, "status": "cancel_requested"}))
    else:
        task = one_line(args.task)
        print(f"{task}: cancel requested; `errands wait {task}` shows when it has stopped")
    return 0


async def btw(args: argparse.Namespace) -> int:
    if not args.question.strip():
        raise InvalidRequest("the side question is empty; write what you want to know")
    settings = load_settings(**connection_flags(args))
    async with stack(settings, need_worker_here=False) as client:
        answer = await client.task(args.task).btw(args.question)
    if args.json:
        print(json.dumps({"task_id": args.task, **answer.model_dump(mode="json")}))
    else:
        print(shown(answer.answer))
    return 0


async def history(args: argparse.Namespace) -> int:
    settings = load_settings()
    # Reads only: no Temporal needed, and a store that is not there is refused, not created.
    async with Client(None, settings) as client:
        rows = await client.history(args.session)
    if not rows:
        path = sqlite_path(settings.session_database_url())
        note(one_line(f"errands: session {args.session} has no messages in {path or 'the store'}"))
    messages = [
        {
            "id": r.id,
            "seq": r.seq,
            "role": r.role,
            "kind": r.shown_kind,
            "text": r.text,
            "task_id": r.task_id,
            # A compaction summary, with the stretch of seqs it folds in.
            **({"covers": r.covers} if r.covers else {}),
        }
        for r in rows
    ]
    if args.json:
        print(json.dumps({"session_id": args.session, "messages": messages}, ensure_ascii=False))
    else:
        for m in messages:
            print(one_line(f"[{m['seq']}] {m['role']} ({m['kind']}) {m['id']}"))
            print(f"{shown(str(m['text']))}\n")
    return 0


async def config(args: argparse.Namespace) -> int:
    settings = load_settings(**connection_flags(args))
    report = settings.report()
    connection = connection_report(settings)
    if args.json:
        print(json.dumps({**report, "connection": connection}, ensure_ascii=False))
    else:
        print(render_report(report))
        print()
        print(render_connection(connection))
    if "error" in connection:  # the settings are shown; the connection cannot be read
        note(f"errands: {connection['error']}")
        return 2
    return 0


async def dev(args: argparse.Namespace) -> int:
    from errands.workers import running_workers

    settings = load_settings(
        ERRANDS_DEV_PORT=args.port, ERRANDS_DEV_UI_PORT=args.ui_port, ERRANDS_DATA_DIR=args.data_dir
    )
    settings = dev_keys(settings, create=args.encrypt)
    store = open_store(settings.session_database_url())
    try:
        async with (
            dev_codec_server(settings, args.codec_port) as codec,
            dev_server(settings, codec_endpoint=codec) as server,
        ):
            temporal = await connect(settings, address=server.address, embedded=True)
            note(
                f"errands dev: Temporal at {server.address}, UI at {server.ui_url}, worker running"
            )
            if codec:
                note(f"errands dev: payloads encrypted ({key_source(settings)}), codec at {codec}")
            async with running_workers(temporal, settings, store=store):
                await asyncio.Event().wait()  # until the command is stopped
    finally:
        store.close()
    return 0


async def serve(args: argparse.Namespace) -> int:
    from errands.gateway import serve

    settings = load_settings(**connection_flags(args))
    token = settings.api_token.get_secret_value() if settings.api_token else None
    await serve(settings, args.host, args.port, token)
    return 0


async def worker(args: argparse.Namespace) -> int:
    from errands.workers import run_worker

    await run_worker(load_settings(**connection_flags(args)))
    return 0
