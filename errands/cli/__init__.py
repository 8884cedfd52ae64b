"""errands: run a task, wait for it, show its status and a session's history, run the stack.

Every command that prints state has --json. Exit codes: 0 done, 1 the task failed or was
canceled, 2 bad usage, bad configuration, a refused request or a service that did not answer
(the reason is on stderr).

Temporal: --address, --namespace, --profile and --config-file first, then the TEMPORAL_*
variables, then the temporal.toml profile (TEMPORAL_PROFILE of TEMPORAL_CONFIG_FILE), then the
embedded dev server; an API key turns TLS on (docs/operations.md, "Connecting to a secured
cluster"). `errands config` shows the connection and where each value came from.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable

from errands.cli import _commands as commands
from errands.cli import _mcp as mcp_server
from errands.cli import _notifications as notifications
from errands.cli import _principals as principals
from errands.cli import _schedules as schedules
from errands.cli import _upgrade as upgrade
from errands.cli._codec import DEV_CODEC_PORT, codec_server
from errands.cli._connection import REACHES_TEMPORAL, add_connection_flags
from errands.cli._terminal import one_line
from errands.contracts.limits import SEQ_MAX
from errands.errors import ErrandsError, InvalidRequest, Stopped, TaskEnded, TaskFailed

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
Handler = Callable[[argparse.Namespace], Awaitable[int | None]]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        check_arguments(argv)
    except ErrandsError as error:
        print(f"errands: {one_line(_message(error))}", file=sys.stderr)
        return exit_code(error)
    args = _parser().parse_args(argv)
    try:
        return int(asyncio.run(_stoppable(args.handler(args))) or 0)
    except Stopped as stopped:
        # A server ends by being stopped: that is its work done, not a failure.
        return 0 if args.stops_by_signal else 128 + stopped.signum
    except ErrandsError as error:
        print(f"errands: {one_line(_message(error))}", file=sys.stderr)
        return exit_code(error)
    except KeyboardInterrupt:
        return 130


def check_arguments(argv: list[str]) -> None:
    """Refuse an argument that is not UTF-8: Python keeps its bytes as lone surrogates, which
    no store, payload or terminal could take later on."""
    for n, arg in enumerate(argv, 1):
        if any("\udc80" <= char <= "\udcff" for char in arg):
            given = os.fsencode(arg).decode("utf-8", errors="backslashreplace")
            raise InvalidRequest(
                f"argument {n} ({given}) is not UTF-8 text; give every argument as UTF-8 (check "
                "the terminal's encoding, or the script that built the command line)"
            )


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

    def command(
        name: str, handler: Handler, help: str, *positionals: str, json: bool = True
    ) -> argparse.ArgumentParser:
        """A command, its positional arguments and (a command that prints state) --json."""
        parsed = sub.add_parser(name, help=help)
        for positional in positionals:
            parsed.add_argument(positional)
        if json:
            parsed.add_argument("--json", action="store_true")
        parsed.set_defaults(handler=handler, stops_by_signal=False)
        return parsed

    run = command(
        "run", commands.run, "start a task and (unless --detach) wait for its reply", "text"
    )
    run.add_argument("--session", help="session id (default: a new session)")
    run.add_argument("--model", help="provider:model of the primary slot (ERRANDS_MODEL)")
    run.add_argument("--fallback-model", help="provider:model of the fallback slot")
    run.add_argument("--headless", action="store_true", help="no one will answer questions")
    run.add_argument("--detach", action="store_true", help="print the task id and return")
    run.add_argument(
        "--notify",
        action="append",
        metavar="URL",
        help="an https:// URL notified of this task's changes of state, signed with a secret "
        "printed once (repeat for up to 4)",
    )

    wait = command("wait", commands.wait, "wait for a task to end and print its result", "task")
    wait.add_argument("--timeout", type=float, default=None, help="seconds (default: forever)")

    command("status", commands.status, "show a task's state", "task")

    answer = command("answer", commands.answer, "answer a task's pending question", "task")
    answer.add_argument(
        "choices",
        nargs="*",
        metavar="QID=VALUE",
        help='an offered label, "Other: your words", or a text answer; repeat a question id '
        "to pick several labels of a multi-select question",
    )
    answer.add_argument("--dismiss", action="store_true", help="decline to choose anything")
    answer.add_argument("--cancel", action="store_true", help="cancel the question")

    say = command("say", commands.say, "send a message into a running task", "task", "text")
    how = say.add_mutually_exclusive_group()
    how.add_argument(
        "--queue", action="store_true", help="make it the session's next task once this one ends"
    )
    how.add_argument("--interrupt", action="store_true", help="stop the round in flight first")

    approve = command(
        "approve", commands.approve, "let a task's tool call waiting for approval run", "task"
    )
    approve.add_argument(
        "--always",
        action="store_true",
        help="also every later call of that tool in the session (tools whose approval is ask)",
    )
    deny = command("deny", commands.deny, "refuse a task's tool call waiting for approval", "task")
    deny.add_argument("--reason", help="why; the agent reads it")
    for decision in (approve, deny):
        decision.add_argument(
            "--id",
            dest="approval_id",
            help="refuse unless this call is waiting (this or --sha256 is required)",
        )
        decision.add_argument(
            "--sha256",
            dest="arguments_sha256",
            metavar="HEX",
            help="refuse unless the waiting call's arguments have this digest, as errands status "
            "shows it (this or --id is required)",
        )

    watch = command(
        "watch",
        commands.watch,
        "print a task's event log and follow it to the end",
        "task",
        json=False,
    )
    watch.add_argument(
        "--after", type=_position, default=0, metavar="SEQ", help="only events after SEQ"
    )
    watch.add_argument("--json", action="store_true", help="one JSON object a line")

    command("cancel", commands.cancel, "cancel a running task", "task")
    command(
        "btw",
        commands.btw,
        "ask a side question about a task without disturbing it",
        "task",
        "question",
    )
    command("config", commands.config, "print the effective settings (secrets masked)")
    command("history", commands.history, "show a session's messages", "session")

    dev = command(
        "dev",
        commands.dev,
        "run the embedded stack: Temporal dev server, UI and worker",
        json=False,
    )
    dev.add_argument("--port", type=_port, default=None)
    dev.add_argument("--ui-port", type=_port, default=None)
    dev.add_argument("--data-dir", default=None)
    dev.add_argument(
        "--encrypt",
        action="store_true",
        help="encrypt payloads with a key kept in the data dir, and run the codec server",
    )
    dev.add_argument(
        "--codec-port", type=_port, default=DEV_CODEC_PORT, help="the codec server's port"
    )

    serve = command("serve", commands.serve, "serve the HTTP gateway and the web page", json=False)
    serve.add_argument(
        "--host", default="127.0.0.1", help="beyond loopback needs ERRANDS_API_TOKEN"
    )
    serve.add_argument("--port", type=_port, default=8080)
    serve.set_defaults(stops_by_signal=True)

    codec = command(
        "codec-server",
        codec_server,
        "decrypt payloads for the Temporal UI and CLI (ERRANDS_ENCRYPTION_KEYS)",
        json=False,
    )
    codec.add_argument(
        "--host", default="127.0.0.1", help="beyond loopback needs ERRANDS_API_TOKEN"
    )
    codec.add_argument("--port", type=_port, default=DEV_CODEC_PORT)
    codec.set_defaults(stops_by_signal=True)

    command("worker", commands.worker, "run a worker against the configured Temporal", json=False)
    upgrade.add_command(sub)
    notifications.add_command(sub)
    principals.add_command(sub)
    schedules.add_command(sub)
    mcp_server.add_command(sub)
    for name in REACHES_TEMPORAL:
        if name in sub.choices:
            add_connection_flags(sub.choices[name])
    return parser


def _position(text: str) -> int:
    """A position in an event log: a whole number from 0 to the largest a store holds."""
    if not text.isascii() or not text.isdigit() or int(text) > SEQ_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is not a position: use 0 to {SEQ_MAX}")
    return int(text)


def _port(text: str) -> int:
    """A TCP port, or 0 for any free one."""
    if not text.isascii() or not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port: use 0 to 65535")
    return int(text)


def entry() -> None:
    """The console script. Exits without interpreter teardown: a process that used the Temporal
    client can abort there (temporalio/sdk-python#300) after its work is done and printed."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
