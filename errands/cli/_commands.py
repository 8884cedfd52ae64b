"""One handler per ``errands`` command; ``errands.cli`` maps the command line onto them."""

from __future__ import annotations

import argparse
import json
import secrets
from pathlib import Path

from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from errands.activity_io import SideAnswer
from errands.cli._output import note, print_state
from errands.cli._stack import (
    UsageError,
    configured_settings,
    connect_temporal,
    dev_server,
    open_session_store,
    stack,
    ui_url,
)
from errands.cli._state import (
    closed_state,
    describe_task,
    query_task,
    running_task,
    start_update,
    task_state,
    wait_for,
)
from errands.store import sqlite_path
from errands.tasks import ask_finished_task, task_input
from errands.validation import check_session_id, check_task_text
from errands.workflow_io import SideQuestion
from workflows import _search as search


async def run(args: argparse.Namespace) -> int:
    settings = configured_settings()
    try:
        check_task_text(args.text)
        session = (
            check_session_id(args.session)
            if args.session is not None
            else f"s-{secrets.token_hex(4)}"
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    model, model_note = (args.model, None) if args.model else settings.default_model()
    _check_model("--model" if args.model else "ERRANDS_MODEL", model)
    fallback = args.fallback_model or settings.fallback_model
    if fallback:
        _check_model(
            "--fallback-model" if args.fallback_model else "ERRANDS_FALLBACK_MODEL", fallback
        )
    if model_note:
        note(model_note)
    task = task_input(
        settings,
        session_id=session,
        text=args.text,
        model=model,
        fallback_model=fallback,
        headless=args.headless,
    )
    task_id = task.task_id
    async with stack(settings, need_worker_here=not args.detach) as client:
        await client.start_workflow(
            "TaskWorkflow",
            task,
            id=task_id,
            task_queue=settings.task_queue,
            search_attributes=search.initial(session),
            static_summary=args.text[:200],
        )
        if args.detach:
            print_state({"task_id": task_id, "session_id": session, "status": "running"}, args.json)
            return 0
        note(f"errands: task {task_id} in session {session}")
        state = await wait_for(client, task_id, timeout=None, progress=True)
    if not settings.temporal_address:
        note(f"Temporal UI: {ui_url(settings, task_id)} (while `errands dev` runs)")
    print_state(state, args.json)
    return 0 if state["status"] == "replied" else 1


def _check_model(source: str, spec: str) -> None:
    """Refuse a model spec the worker would refuse, before anything is written."""
    # Imported here: the provider SDKs behind the router take a second to import, which the
    # commands that never start a task should not pay.
    from errands.routing import parse_model

    try:
        parse_model(spec)
    except ApplicationError as error:
        raise UsageError(f"{source}: {error.message}") from None


async def wait(args: argparse.Namespace) -> int:
    settings = configured_settings()
    async with stack(settings, need_worker_here=False) as client:
        try:
            state = await wait_for(client, args.task, timeout=args.timeout, progress=False)
        except TimeoutError:
            raise UsageError(
                f"task {args.task} did not end within {args.timeout:g} s; it goes on running "
                f"(`errands status {args.task}` shows what it is doing)"
            ) from None
    print_state(state, args.json)
    return 0 if state["status"] == "replied" else 1


async def status(args: argparse.Namespace) -> int:
    settings = configured_settings()
    async with stack(settings, need_worker_here=False) as client:
        state = await task_state(client, args.task)
    print_state(state, args.json)
    return 0


async def answer(args: argparse.Namespace) -> int:
    if args.dismiss + args.cancel + bool(args.choices) != 1:
        raise UsageError(
            "give answers as QID=VALUE, or --dismiss, or --cancel (exactly one of them)"
        )
    answers: dict[str, list[str]] = {}
    for choice in args.choices:
        qid, sep, value = choice.partition("=")
        if not sep or not qid.strip():
            raise UsageError(f"{choice!r} is not QID=VALUE (for example q1=PostgreSQL)")
        answers.setdefault(qid.strip(), []).append(value)
    settings = configured_settings()
    async with stack(settings, need_worker_here=False) as client:
        description = await running_task(client, args.task, "there is no question to answer")
        pending = await query_task(client, description, "pending_question")
        if not pending:
            raise UsageError(
                f"task {args.task} has no question waiting for an answer; "
                f"`errands status {args.task}` shows what it is doing"
            )
        payload = {
            "question_set_id": pending["id"],
            "status": "cancelled" if args.cancel else "answered",
            "answers": answers,
        }
        try:
            receipt = await client.get_workflow_handle(args.task).execute_update(
                "answer_question", payload
            )
        except WorkflowUpdateFailedError as error:
            reason = (
                error.cause.message if isinstance(error.cause, ApplicationError) else error.cause
            )
            raise UsageError(f"answer rejected: {reason}") from None
    if args.json:
        print(json.dumps({"task_id": args.task, "accepted": True, **receipt}))
    elif args.cancel:
        print(f"{args.task}: question cancelled; the task goes on without an answer")
    elif args.dismiss:
        print(f"{args.task}: question dismissed; the agent replies without a choice")
    else:
        print(f"{args.task}: answer accepted; the task goes on")
    return 0


async def cancel(args: argparse.Namespace) -> int:
    settings = configured_settings()
    async with stack(settings, need_worker_here=False) as client:
        await running_task(client, args.task, "there is nothing to cancel")
        try:
            await client.get_workflow_handle(args.task).cancel()
        except RPCError as error:
            raise UsageError(f"task {args.task} was not canceled: {error.message}") from None
    if args.json:
        print(json.dumps({"task_id": args.task, "status": "cancel_requested"}))
    else:
        print(
            f"{args.task}: cancel requested; `errands wait {args.task}` shows when it has stopped"
        )
    return 0


async def btw(args: argparse.Namespace) -> int:
    if not args.question.strip():
        raise UsageError("the side question is empty; write what you want to know")
    settings = configured_settings()
    async with stack(settings, need_worker_here=False) as client:
        description = await describe_task(client, args.task)
        try:
            if description.status == WorkflowExecutionStatus.RUNNING:
                update = await start_update(
                    client,
                    description,
                    "ask_side_question",
                    SideQuestion(question=args.question),
                    SideAnswer,
                )
                answer = await update.result()
            else:
                answer = await ask_finished_task(
                    client, settings, await closed_state(client, description), args.question
                )
        except (WorkflowUpdateFailedError, WorkflowFailureError) as error:
            cause = error.cause
            while getattr(cause, "cause", None) is not None:
                cause = cause.cause  # type: ignore[attr-defined]
            raise UsageError(f"side question not answered: {cause}") from None
    if args.json:
        print(json.dumps({"task_id": args.task, **answer.model_dump(mode="json")}))
    else:
        print(answer.answer)
    return 0


async def history(args: argparse.Namespace) -> int:
    settings = configured_settings()
    url = settings.session_database_url()
    try:
        path = sqlite_path(url)
    except ValueError as error:
        raise UsageError(f"{error}; check ERRANDS_DATABASE_URL") from None
    if path is not None and not Path(path).exists():
        # Reading must not create an empty store somewhere else and show nothing.
        raise UsageError(
            f"no session store at {path}; run from the directory you ran errands in, or set "
            "ERRANDS_DATABASE_URL (or ERRANDS_DATA_DIR) to where the sessions are"
        )
    store = open_session_store(settings)
    try:
        rows = store.list_session(args.session)
    finally:
        store.close()
    if not rows:
        note(f"errands: session {args.session} has no messages in {path or 'the store'}")
    messages = [
        {
            "id": r.id,
            "seq": r.seq,
            "role": r.role,
            "kind": r.kind,
            "text": r.text,
            "task_id": r.task_id,
        }
        for r in rows
    ]
    if args.json:
        print(json.dumps({"session_id": args.session, "messages": messages}, ensure_ascii=False))
    else:
        for m in messages:
            print(f"[{m['seq']}] {m['role']} ({m['kind']}) {m['id']}\n{m['text']}\n")
    return 0


async def dev(args: argparse.Namespace) -> int:
    from worker import build_worker

    settings = configured_settings(
        ERRANDS_DEV_PORT=args.port, ERRANDS_DEV_UI_PORT=args.ui_port, ERRANDS_DATA_DIR=args.data_dir
    )
    store = open_session_store(settings)
    try:
        async with dev_server(settings) as server:
            client = await connect_temporal(server.address, settings.temporal_namespace)
            note(
                f"errands dev: Temporal at {server.address}, UI at {server.ui_url}, worker running"
            )
            await build_worker(client, settings, store=store).run()
    finally:
        store.close()
    return 0


async def serve(args: argparse.Namespace) -> int:
    from errands.gateway import ServeError, serve

    settings = configured_settings()
    token = settings.api_token.get_secret_value() if settings.api_token else None
    try:
        await serve(settings, args.host, args.port, token)
    except ServeError as error:
        raise UsageError(str(error)) from None
    return 0


async def worker(args: argparse.Namespace) -> int:
    from worker import WorkerSetupError, run_worker

    try:
        await run_worker(configured_settings())
    except WorkerSetupError as error:
        raise UsageError(str(error)) from None
    return 0
