"""``errands``: run a task, wait for it, show its status and a session's history, run the stack.

Every command that prints state has ``--json``. Exit codes: 0 done, 1 the task failed or was
canceled, 2 bad usage or a rejected request (with the reason on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from errands.activity_io import SideAnswer
from errands.client import connect
from errands.devserver import DevServer, port_open
from errands.picker import pick_answer
from errands.settings import Settings, load_settings
from errands.store import open_store
from errands.tasks import ask_finished_task, closed_task_state, task_input
from errands.workflow_io import SideQuestion, TaskStatus
from workflows import _search as search

STATUS_FIELDS = ("task_id", "session_id", "status", "reply", "error", "usage")


class UsageError(Exception):
    """A mistake in how the command was called; printed, exit code 2."""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(asyncio.run(args.handler(args)) or 0)
    except UsageError as error:
        print(f"errands: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="errands", description=__doc__)
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="start a task and (unless --detach) wait for its reply")
    run.add_argument("text")
    run.add_argument("--session", help="session id (default: a new session)")
    run.add_argument("--model", help="provider:model of the primary slot (ERRANDS_MODEL)")
    run.add_argument("--fallback-model", help="provider:model of the fallback slot")
    run.add_argument("--headless", action="store_true", help="no one will answer questions")
    run.add_argument("--detach", action="store_true", help="print the task id and return")
    run.add_argument("--json", action="store_true")
    run.set_defaults(handler=_run)

    wait = sub.add_parser("wait", help="wait for a task to end and print its result")
    wait.add_argument("task")
    wait.add_argument("--timeout", type=float, default=None, help="seconds (default: forever)")
    wait.add_argument("--json", action="store_true")
    wait.set_defaults(handler=_wait)

    status = sub.add_parser("status", help="show a task's state")
    status.add_argument("task")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=_status)

    answer = sub.add_parser("answer", help="answer a task's pending question")
    answer.add_argument("task")
    answer.add_argument(
        "choices",
        nargs="*",
        metavar="QID=VALUE",
        help='an offered label, "Other: your words", or a text answer; repeat a question id '
        "to pick several labels of a multi-select question",
    )
    answer.add_argument("--dismiss", action="store_true", help="decline to choose anything")
    answer.add_argument("--cancel", action="store_true", help="cancel the question")
    answer.add_argument("--json", action="store_true")
    answer.set_defaults(handler=_answer)

    btw = sub.add_parser("btw", help="ask a side question about a task without disturbing it")
    btw.add_argument("task")
    btw.add_argument("question")
    btw.add_argument("--json", action="store_true")
    btw.set_defaults(handler=_btw)

    history = sub.add_parser("history", help="show a session's messages")
    history.add_argument("session")
    history.add_argument("--json", action="store_true")
    history.set_defaults(handler=_history)

    dev = sub.add_parser("dev", help="run the embedded stack: Temporal dev server, UI and worker")
    dev.add_argument("--port", type=int, default=None)
    dev.add_argument("--ui-port", type=int, default=None)
    dev.add_argument("--data-dir", default=None)
    dev.set_defaults(handler=_dev)

    serve = sub.add_parser("serve", help="serve the HTTP gateway and the web page")
    serve.add_argument(
        "--host", default="127.0.0.1", help="beyond loopback needs ERRANDS_API_TOKEN"
    )
    serve.add_argument("--port", type=int, default=8080)
    serve.set_defaults(handler=_serve)

    worker = sub.add_parser("worker", help="run a worker against TEMPORAL_ADDRESS")
    worker.set_defaults(handler=_worker)
    return parser


# -- the stack ------------------------------------------------------------------------------


@asynccontextmanager
async def _stack(settings: Settings, *, need_worker_here: bool) -> AsyncIterator[Client]:
    """A client, starting the embedded dev server and a worker when nothing is configured."""
    if settings.temporal_address:
        yield await connect(settings.temporal_address, settings.temporal_namespace)
        return
    address = f"127.0.0.1:{settings.dev_port}"
    if port_open("127.0.0.1", settings.dev_port):
        # Someone's `errands dev` is running: it has the worker.
        yield await connect(address, settings.temporal_namespace)
        return
    if not need_worker_here:
        raise UsageError(
            "no Temporal server is configured or running; set TEMPORAL_ADDRESS or start the "
            "embedded stack with `errands dev`"
        )
    from worker import build_worker

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    _note(f"errands: starting the embedded Temporal dev server (data in {settings.data_dir}/)")
    server = DevServer(
        port=settings.dev_port,
        ui_port=settings.dev_ui_port,
        db_file=str((settings.data_dir / "temporal.db").resolve()),
        log_file=str((settings.data_dir / "temporal.log").resolve()),
    )
    await asyncio.to_thread(server.start)
    try:
        client = await connect(server.address, settings.temporal_namespace)
        async with build_worker(client, settings):
            yield client
    finally:
        await asyncio.to_thread(server.stop)


def _ui_url(settings: Settings, task_id: str) -> str:
    return (
        f"http://127.0.0.1:{settings.dev_ui_port}/namespaces/{settings.temporal_namespace}"
        f"/workflows/{task_id}"
    )


# -- commands -------------------------------------------------------------------------------


async def _run(args: argparse.Namespace) -> int:
    settings = load_settings()
    model, note = (args.model, None) if args.model else settings.default_model()
    if note:
        _note(note)
    session = args.session or f"s-{secrets.token_hex(4)}"
    task = task_input(
        settings,
        session_id=session,
        text=args.text,
        model=model,
        fallback_model=args.fallback_model,
        headless=args.headless,
    )
    task_id = task.task_id
    async with _stack(settings, need_worker_here=not args.detach) as client:
        await client.start_workflow(
            "TaskWorkflow",
            task,
            id=task_id,
            task_queue=settings.task_queue,
            search_attributes=search.initial(session),
            static_summary=args.text[:200],
        )
        if args.detach:
            _print_state(
                {"task_id": task_id, "session_id": session, "status": "running"}, args.json
            )
            return 0
        _note(f"errands: task {task_id} in session {session}")
        state = await _wait_for(client, task_id, timeout=None, progress=True)
    if not settings.temporal_address:
        _note(f"Temporal UI: {_ui_url(settings, task_id)} (while `errands dev` runs)")
    _print_state(state, args.json)
    return 0 if state["status"] == "replied" else 1


async def _wait(args: argparse.Namespace) -> int:
    settings = load_settings()
    async with _stack(settings, need_worker_here=False) as client:
        try:
            state = await _wait_for(client, args.task, timeout=args.timeout, progress=False)
        except TimeoutError:
            raise UsageError(f"task {args.task} did not end within {args.timeout} s") from None
    _print_state(state, args.json)
    return 0 if state["status"] == "replied" else 1


async def _status(args: argparse.Namespace) -> int:
    settings = load_settings()
    async with _stack(settings, need_worker_here=False) as client:
        state = await _task_state(client, args.task)
    _print_state(state, args.json)
    return 0


async def _answer(args: argparse.Namespace) -> int:
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
    settings = load_settings()
    async with _stack(settings, need_worker_here=False) as client:
        handle = client.get_workflow_handle(args.task)
        try:
            pending = await handle.query("pending_question")
        except RPCError as error:
            raise UsageError(f"cannot reach task {args.task!r}: {error.message}") from None
        if not pending:
            raise UsageError(f"task {args.task} has no question waiting for an answer")
        payload = {
            "question_set_id": pending["id"],
            "status": "cancelled" if args.cancel else "answered",
            "answers": answers,
        }
        try:
            receipt = await handle.execute_update("answer_question", payload)
        except WorkflowUpdateFailedError as error:
            reason = (
                error.cause.message if isinstance(error.cause, ApplicationError) else error.cause
            )
            raise UsageError(f"answer rejected: {reason}") from None
    state = {"task_id": args.task, "accepted": True, **receipt}
    if args.json:
        print(json.dumps(state))
    else:
        print(f"{args.task}: answer accepted ({receipt['status']})")
    return 0


async def _btw(args: argparse.Namespace) -> int:
    if not args.question.strip():
        raise UsageError("the side question is empty; write what you want to know")
    settings = load_settings()
    async with _stack(settings, need_worker_here=False) as client:
        handle = client.get_workflow_handle(args.task)
        try:
            description = await handle.describe()
        except RPCError as error:
            raise UsageError(
                f"no task {args.task!r} ({error.message}); check the task id"
            ) from None
        try:
            if description.status == WorkflowExecutionStatus.RUNNING:
                answer = await handle.execute_update(
                    "ask_side_question",
                    SideQuestion(question=args.question),
                    result_type=SideAnswer,
                )
            else:
                answer = await ask_finished_task(
                    client, settings, await _closed_state(client, args.task), args.question
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


async def _history(args: argparse.Namespace) -> int:
    store = open_store(load_settings().session_database_url())
    try:
        rows = store.list_session(args.session)
    finally:
        store.close()
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


async def _dev(args: argparse.Namespace) -> int:
    from worker import build_worker

    settings = load_settings(
        ERRANDS_DEV_PORT=args.port, ERRANDS_DEV_UI_PORT=args.ui_port, ERRANDS_DATA_DIR=args.data_dir
    )
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    server = DevServer(
        port=settings.dev_port,
        ui_port=settings.dev_ui_port,
        db_file=str((settings.data_dir / "temporal.db").resolve()),
        log_file=str((settings.data_dir / "temporal.log").resolve()),
    )
    await asyncio.to_thread(server.start)
    try:
        client = await connect(server.address, settings.temporal_namespace)
        _note(f"errands dev: Temporal at {server.address}, UI at {server.ui_url}, worker running")
        await build_worker(client, settings).run()
    finally:
        await asyncio.to_thread(server.stop)
    return 0


async def _serve(args: argparse.Namespace) -> int:
    from errands.gateway import ServeError, serve

    settings = load_settings()
    token = settings.api_token.get_secret_value() if settings.api_token else None
    try:
        await serve(settings, args.host, args.port, token)
    except ServeError as error:
        raise UsageError(str(error)) from None
    return 0


async def _worker(args: argparse.Namespace) -> int:
    from worker import run_worker

    await run_worker(load_settings())
    return 0


# -- task state -----------------------------------------------------------------------------


async def _task_state(client: Client, task_id: str) -> dict[str, Any]:
    handle = client.get_workflow_handle(task_id)
    try:
        description = await handle.describe()
    except RPCError as error:
        raise UsageError(f"no task {task_id!r} ({error.message}); check the task id") from None
    if description.status == WorkflowExecutionStatus.RUNNING:
        status = await handle.query("status", result_type=TaskStatus)
        return status.model_dump(mode="json")
    return await _closed_state(client, task_id)


async def _closed_state(client: Client, task_id: str) -> dict[str, Any]:
    description = await client.get_workflow_handle(task_id).describe()
    session_id = description.typed_search_attributes.get(search.SESSION)
    return await closed_task_state(client, task_id, session_id=session_id)


async def _wait_for(
    client: Client, task_id: str, *, timeout: float | None, progress: bool
) -> dict[str, Any]:
    interactive = progress and sys.stdin.isatty() and sys.stdout.isatty()

    async def follow() -> dict[str, Any]:
        last = ""
        while True:
            state = await _task_state(client, task_id)
            if state["status"] not in ("running", "waiting_for_user"):
                return state
            if progress and state.get("phase") and state["phase"] != last:
                last = state["phase"]
                _note(f"  … {last}")
            if interactive and state.get("pending_question"):
                await _answer_interactively(client, task_id, state["pending_question"])
            await asyncio.sleep(0.3)

    return await asyncio.wait_for(follow(), timeout)


async def _answer_interactively(client: Client, task_id: str, pending: dict[str, Any]) -> None:
    """Show the pending question as a picker on this terminal and send the answer."""
    payload = await asyncio.to_thread(pick_answer, pending)
    try:
        await client.get_workflow_handle(task_id).execute_update("answer_question", payload)
    except WorkflowUpdateFailedError as error:
        reason = error.cause.message if isinstance(error.cause, ApplicationError) else error.cause
        _note(f"errands: answer rejected: {reason}")


def _print_state(state: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(state, ensure_ascii=False))
        return
    print(f"{state['task_id']}: {state['status']}")
    if state.get("reply"):
        print(state["reply"])
    if state.get("error"):
        print(f"error ({state['error']['kind']}): {state['error']['message']}")


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def entry() -> None:
    """The console script. Exits without interpreter teardown: a process that used the Temporal
    client can abort there (temporalio/sdk-python#300) after its work is done and printed."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
