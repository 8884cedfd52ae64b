"""errands: run a task, wait for it, show its status and a session's history, run the stack.

Every command that prints state has --json. Exit codes: 0 done, 1 the task failed or was
canceled, 2 bad usage, bad configuration, a refused request or a service that did not answer
(the reason is on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Awaitable

from errands.cli import _commands as commands
from errands.errors import ErrandsError, Stopped, TaskEnded, TaskFailed

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(asyncio.run(_stoppable(args.handler(args))) or 0)
    except Stopped as stopped:
        return 128 + stopped.signum
    except ErrandsError as error:
        print(f"errands: {_message(error)}", file=sys.stderr)
        return exit_code(error)
    except KeyboardInterrupt:
        return 130


def exit_code(error: ErrandsError) -> int:
    """The one mapping of errands' errors to exit codes: 1 a task failed, 128 + N a signal
    stopped the command, 2 anything else (configuration, refusal, a service not answering)."""
    if isinstance(error, TaskFailed):
        return 1
    if isinstance(error, Stopped):
        return 128 + error.signum
    return 2


def _message(error: ErrandsError) -> str:
    """The error as one line, with the command that helps next where there is one."""
    if isinstance(error, TaskEnded):
        return (
            f"task {error.task_id} has already ended ({error.ended}); {error.consequence}. "
            f"`errands status {error.task_id}` shows its result"
        )
    return " ".join(error.message.split())


async def _stoppable(command: Awaitable[int | None]) -> int | None:
    """Run ``command`` so that SIGTERM and SIGHUP stop it the way Ctrl-C does: it is cancelled
    and its cleanup runs, so a dev server it started is stopped instead of holding its port."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    received: list[int] = []

    def stop(signum: int) -> None:
        received.append(signum)
        task.cancel()

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop, signum)
    try:
        return await command
    except asyncio.CancelledError:
        if received:
            raise Stopped(received[0], signal.Signals(received[0]).name) from None
        raise
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)


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
    run.set_defaults(handler=commands.run)

    wait = sub.add_parser("wait", help="wait for a task to end and print its result")
    wait.add_argument("task")
    wait.add_argument("--timeout", type=float, default=None, help="seconds (default: forever)")
    wait.add_argument("--json", action="store_true")
    wait.set_defaults(handler=commands.wait)

    status = sub.add_parser("status", help="show a task's state")
    status.add_argument("task")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=commands.status)

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
    answer.set_defaults(handler=commands.answer)

    say = sub.add_parser("say", help="send a message into a running task")
    say.add_argument("task")
    say.add_argument("text")
    how = say.add_mutually_exclusive_group()
    how.add_argument(
        "--queue", action="store_true", help="make it the session's next task once this one ends"
    )
    how.add_argument("--interrupt", action="store_true", help="stop the round in flight first")
    say.add_argument("--json", action="store_true")
    say.set_defaults(handler=commands.say)

    approve = sub.add_parser("approve", help="let a task's tool call waiting for approval run")
    approve.add_argument("task")
    approve.add_argument(
        "--always",
        action="store_true",
        help="also every later call of that tool in the session (tools whose approval is ask)",
    )
    approve.add_argument("--id", dest="approval_id", help="refuse unless this call is waiting")
    approve.add_argument("--json", action="store_true")
    approve.set_defaults(handler=commands.approve)

    deny = sub.add_parser("deny", help="refuse a task's tool call waiting for approval")
    deny.add_argument("task")
    deny.add_argument("--reason", help="why; the agent reads it")
    deny.add_argument("--id", dest="approval_id", help="refuse unless this call is waiting")
    deny.add_argument("--json", action="store_true")
    deny.set_defaults(handler=commands.deny)

    watch = sub.add_parser("watch", help="print a task's event log and follow it to the end")
    watch.add_argument("task")
    watch.add_argument("--after", type=int, default=0, metavar="SEQ", help="only events after SEQ")
    watch.add_argument("--json", action="store_true", help="one JSON object a line")
    watch.set_defaults(handler=commands.watch)

    cancel = sub.add_parser("cancel", help="cancel a running task")
    cancel.add_argument("task")
    cancel.add_argument("--json", action="store_true")
    cancel.set_defaults(handler=commands.cancel)

    btw = sub.add_parser("btw", help="ask a side question about a task without disturbing it")
    btw.add_argument("task")
    btw.add_argument("question")
    btw.add_argument("--json", action="store_true")
    btw.set_defaults(handler=commands.btw)

    config = sub.add_parser("config", help="print the effective settings (secrets masked)")
    config.add_argument("--json", action="store_true")
    config.set_defaults(handler=commands.config)

    history = sub.add_parser("history", help="show a session's messages")
    history.add_argument("session")
    history.add_argument("--json", action="store_true")
    history.set_defaults(handler=commands.history)

    dev = sub.add_parser("dev", help="run the embedded stack: Temporal dev server, UI and worker")
    dev.add_argument("--port", type=int, default=None)
    dev.add_argument("--ui-port", type=int, default=None)
    dev.add_argument("--data-dir", default=None)
    dev.set_defaults(handler=commands.dev)

    serve = sub.add_parser("serve", help="serve the HTTP gateway and the web page")
    serve.add_argument(
        "--host", default="127.0.0.1", help="beyond loopback needs ERRANDS_API_TOKEN"
    )
    serve.add_argument("--port", type=int, default=8080)
    serve.set_defaults(handler=commands.serve)

    worker = sub.add_parser("worker", help="run a worker against TEMPORAL_ADDRESS")
    worker.set_defaults(handler=commands.worker)
    return parser


def entry() -> None:
    """The console script. Exits without interpreter teardown: a process that used the Temporal
    client can abort there (temporalio/sdk-python#300) after its work is done and printed."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
