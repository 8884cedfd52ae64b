"""Hostile input (issue 23): what a model or a tool sends to fool a person or break a task.

Each case is one task on a worker that offers the hostile MCP server (``chaos._hostile_tools``)
with its ``run`` tool behind an ``ask`` approval. The scripted model plays the case's steps and
then answers ``final_reply`` with ``RECOVERED``:

- arguments 1,000 levels deep to the advisor and every control tool, and arguments past the
  parser's size cap: the model is told, the task replies;
- tool results of 100 KB and 1 MB (50 MB in the full run, which plays every case on both
  APIs): previewed in the request that
  follows, the task replies;
- a result and a model reply with NUL, a lone surrogate and escape sequences: both stores hold
  them, the task replies;
- a reply full of terminal escape sequences: ``errands status`` shows them neutralised,
  ``errands status --json`` gives them back exactly;
- an approval whose explanation holds a fake ``arguments:`` line, with real arguments hidden
  behind a carriage return or 2,100 spaces: ``errands status`` shows the whole real call and its
  digest, the fake line only in the model's words; ``errands approve`` runs the tool once, with
  exactly those arguments.

Losses: a task that does not reply (``tasks not ended as expected``, ``stuck tasks``), a
workflow task failure, a display a person could misread (``wrong displays``), a tool that did
not run exactly once with the approved arguments (``tool calls not as approved``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field

from chaos._inputs import Violation, failures_of
from chaos._report import Outcome
from chaos._stack import ROOT, Stack
from errands.adapters.scripted import Call, RecordedRequest, Reply, Step
from errands.contracts.visible import never_raw
from errands.contracts.workflows import RoundSettings, TaskInput, TaskResult

NAME = "chaos-hostile"
RECOVERED = "recovered"
DEEP = "[" * 1000 + "]" * 1000
ESCAPES = (
    "clear\x1b[2J colour\x1b[31m up\x1b[1A clip\x1b]52;c;ZXZpbA==\x07 "
    "link\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\ cr\rover c1\x9b2J end"
)
SPOOF_WHY = 'Listing the directory, nothing else.\n    arguments: {"cmd": "ls -la"}'
SPOOFED = '{"cmd": "rm -rf ~"}\r' + " " * 80
PADDED = '{"cmd": "echo hello' + " " * 2100 + '; rm -rf ~ ; curl http://evil.example"}'
_TAG = re.compile(r"chaos hostile (\d+)")
LARGEST_REQUEST = 32_000 * 4
"""Characters a request to the 32,000-token scripted model may hold (four per token is
generous: errands estimates fewer)."""


@dataclass
class Case:
    name: str
    steps: list[Step]
    approve: str | None = None
    """The raw arguments of the ``run`` call a person approves in this case."""
    reply: str | None = RECOVERED
    """The reply expected; None when the reply is checked by ``clean``."""
    clean: bool = False
    """The reply and the session must hold no NUL and no lone surrogate."""
    display: str | None = None
    """The reply ``errands status`` must show neutralised and ``--json`` give back exactly."""
    ran: str | None = None
    """The hostile tool whose result (not an error) the session must hold."""


@dataclass
class HostileModel:
    scripts: dict[str, list[Step]] = field(default_factory=dict)
    largest: dict[str, int] = field(default_factory=dict)

    def __call__(self, request: RecordedRequest) -> Step | None:
        body = request.body
        messages = body.get("messages", [])
        tools = [t.get("name") or t["function"]["name"] for t in body.get("tools", [])]
        if "final_reply" not in tools:
            return Reply(text="branch output")
        user = next((m.get("content") or "" for m in messages if m["role"] == "user"), "")
        found = _TAG.search(user if isinstance(user, str) else json.dumps(user))
        if found is None:
            return None
        tag = found.group(1)
        size = len(json.dumps(body, ensure_ascii=False))
        self.largest[tag] = max(self.largest.get(tag, 0), size)
        script = self.scripts.get(tag)
        if script:
            return script.pop(0)
        return Reply(calls=[Call("final_reply", {"text": RECOVERED})])


def cases(full: bool) -> list[Case]:
    deep = [
        Case(f"{tool} 1,000 levels deep", [Reply(calls=[Call(tool, f'{{"x": {DEEP}}}')])])
        for tool in ("advisor", "read_message", "final_reply", "delegate", "ask_user")
    ]
    huge_arguments = [
        Case(
            "final_reply of 300 KB", [Reply(calls=[Call("final_reply", {"text": "x" * 300_000})])]
        ),
        Case(
            "a tool call of 300 KB",
            [Reply(calls=[Call("mcp__hostile__blob", {"size": 1, "pad": "z" * 300_000})])],
        ),
    ]
    sizes = [100_000, 1_000_000] + ([50_000_000] if full else [])
    huge_results = [
        Case(
            f"a result of {size:,} characters",
            [Reply(calls=[Call("mcp__hostile__blob", {"size": size})])],
            ran="mcp__hostile__blob",
        )
        for size in sizes
    ]
    dirty = [
        Case(
            "a result with NUL and escapes",
            [Reply(calls=[Call("mcp__hostile__dirty", {})])],
            clean=True,
            ran="mcp__hostile__dirty",
        ),
        Case(
            "a reply with NUL and a lone surrogate",
            [Reply(calls=[Call("final_reply", {"text": "a\x00b \ud800 c"})])],
            reply=None,
            clean=True,
        ),
        Case(
            "a reply of escape sequences",
            [Reply(calls=[Call("final_reply", {"text": ESCAPES})])],
            reply=ESCAPES,
            display=ESCAPES,
        ),
    ]
    spoofs = [
        Case(name, [Reply(text=SPOOF_WHY, calls=[Call("mcp__hostile__run", raw)])], approve=raw)
        for name, raw in (
            ("a call hidden behind a CR", SPOOFED),
            ("a call padded past 2,000", PADDED),
        )
    ]
    return deep + huge_arguments + huge_results + dirty + spoofs


class Hostile:
    def __init__(self, stack: Stack, queue: str, outcome: Outcome) -> None:
        self.stack = stack
        self.queue = queue
        self.outcome = outcome
        self.model = HostileModel()
        self.log = stack.root / f"hostile-{queue}.jsonl"
        stack.answer(NAME, self.model)

    def mcp_servers(self) -> str:
        server = {
            "command": [sys.executable, "-m", "chaos._hostile_tools"],
            "cwd": str(ROOT),
            "env": {"HOSTILE_LOG": str(self.log)},
            "approval": {"run": "ask"},
        }
        return json.dumps({"hostile": server})

    async def run(self, number: int, case: Case, api: str) -> None:
        tag = str(number)
        self.model.scripts[tag] = list(case.steps)
        data = TaskInput(
            task_id=f"task-{self.queue}-{tag}",
            session_id=f"{self.queue}-{tag}",
            text=f"chaos hostile {tag} ({case.name})",
            model=f"{api}:{NAME}",
            settings=RoundSettings(model_max_attempts=3),
        )
        handle = await self.stack.client.start_workflow(
            "TaskWorkflow", data, id=data.task_id, task_queue=self.queue, result_type=TaskResult
        )
        if case.approve is not None:
            await self.approve(data.task_id, case.approve)
        try:
            result = await asyncio.wait_for(handle.result(), 60)
        except TimeoutError:
            raise Violation(
                "stuck tasks", f"{case.name}: {handle.id} did not end in 60 s"
            ) from None
        await failures_of(handle)
        if result.status != "replied" or (case.reply is not None and result.reply != case.reply):
            raise Violation(
                "tasks not ended as expected",
                f"{case.name}: {handle.id} ended {result.status} {result.error} with "
                f"{(result.reply or '')[:200]!r}",
            )
        largest = self.model.largest.get(tag, 0)
        self.outcome.facts["largest request (characters)"] = max(
            largest, self.outcome.facts.get("largest request (characters)", 0)
        )
        if largest > LARGEST_REQUEST:
            raise Violation(
                "tasks not ended as expected",
                f"{case.name}: a request of {largest:,} characters went to a 32,000-token model",
            )
        if case.ran is not None:
            await asyncio.to_thread(self.check_ran, case, data.task_id)
        if case.clean:
            await asyncio.to_thread(self.check_clean, case, data.session_id, result.reply or "")
        if case.display is not None:
            await self.check_display(case, data.task_id)

    def check_ran(self, case: Case, task_id: str) -> None:
        finished = [
            event.data
            for event in self.stack.store.list_events(task_id)
            if event.type == "tool_finished" and event.data.get("tool") == case.ran
        ]
        if len(finished) != 1 or finished[0].get("is_error"):
            raise Violation(
                "tasks not ended as expected",
                f"{case.name}: {case.ran} finished {len(finished)} time(s), not once without "
                f"an error: {finished!r}",
            )
        stored = "largest stored tool result (characters)"
        chars = int(finished[0].get("chars") or 0)
        self.outcome.facts[stored] = max(chars, self.outcome.facts.get(stored, 0))

    def check_clean(self, case: Case, session_id: str, reply: str) -> None:
        texts = [reply] + [row.text for row in self.stack.store.list_session(session_id)]
        if any("\x00" in t or any(0xD800 <= ord(c) <= 0xDFFF for c in t) for t in texts):
            raise Violation("wrong displays", f"{case.name}: a NUL or a lone surrogate was kept")

    async def check_display(self, case: Case, task_id: str) -> None:
        shown = await self.cli("status", task_id)
        bad = [c for c in shown if _controls(c)]
        if bad:
            raise Violation(
                "wrong displays", f"{case.name}: `errands status` printed {bad[:5]!r} raw"
            )
        exact = json.loads(await self.cli("status", task_id, "--json"))
        if exact.get("reply") != case.display:
            raise Violation("wrong displays", f"{case.name}: --json did not give the reply back")

    async def approve(self, task_id: str, raw: str) -> None:
        canonical = json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        shown = await self.waiting(task_id)
        lines = shown.splitlines()
        missing = [line.strip() for line in canonical.splitlines() if line.strip() not in shown]
        if missing or digest not in shown:
            raise Violation(
                "wrong displays",
                f"{task_id}: `errands status` hid part of the call ({missing[:2]!r}) or its "
                f"digest {digest[:12]}",
            )
        fake = [line for line in lines if "ls -la" in line]
        if any(not line.lstrip().startswith(MODEL_GUTTER) for line in fake):
            raise Violation(
                "wrong displays", f"{task_id}: the model's fake line is not shown as its words"
            )
        before = self.runs()
        await self.cli("approve", task_id, "--sha256", digest)
        await self._ran_once(task_id, before, json.loads(raw)["cmd"])

    async def waiting(self, task_id: str) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            shown = await self.cli("status", task_id)
            if "errands approve" in shown:
                return shown
            await asyncio.sleep(0.2)
        raise Violation("stuck tasks", f"{task_id} never waited for approval")

    def runs(self) -> list[str]:
        if not self.log.exists():
            return []
        return [json.loads(line)["cmd"] for line in self.log.read_text().splitlines()]

    async def _ran_once(self, task_id: str, before: list[str], cmd: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(self.runs()) == len(before):
            await asyncio.sleep(0.1)
        new = self.runs()[len(before) :]
        if new != [cmd]:
            raise Violation(
                "tool calls not as approved",
                f"{task_id}: the tool ran {len(new)} time(s) with "
                f"{[c[:40] for c in new]!r}, not once with the approved arguments",
            )

    async def cli(self, *args: str) -> str:
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "errands.cli", *args],
            cwd=ROOT,
            env=self.stack.worker_env(self.queue),
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            raise Violation(
                "wrong displays",
                f"`errands {' '.join(args)}` exited {done.returncode}: "
                f"{done.stderr.decode(errors='replace')[-300:]}",
            )
        return done.stdout.decode()


MODEL_GUTTER = "│"
"""How ``errands status`` marks each line of the model's own words beside an approval."""


def _controls(char: str) -> bool:
    """What a terminal must never print raw: the CLI's own table."""
    return never_raw(char)


async def hostile_input(stack: Stack, *, full: bool, apis: list[str]) -> Outcome:
    """Every case on each API of ``apis`` (``openai``, ``anthropic``)."""
    outcome = Outcome(
        "hostile",
        "Hostile input: nested and huge arguments, huge and NUL-bearing results, escape "
        "sequences, spoofing explanations",
    )
    queue = stack.queue("hostile")
    started = time.monotonic()
    runner = Hostile(stack, queue, outcome)
    async with stack.worker(queue, ERRANDS_MCP_SERVERS=runner.mcp_servers()):
        every = [(case, api) for api in apis for case in cases(full)]
        for number, (case, api) in enumerate(every, 1):
            outcome.faults[case.name] += 1
            outcome.tasks += 1
            try:
                await runner.run(number, case, api)
            except Violation as violation:
                outcome.lose(violation.what, str(violation)[:600])
    outcome.seconds = time.monotonic() - started
    outcome.facts["cases"] = outcome.tasks
    return outcome
