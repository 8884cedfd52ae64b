"""Both sides of a planned task: the model that plays it and the user who answers its questions.

The model is stateless: it reads each request (which round, whether it already asked) and plays
the plan's next move, so a request repeated after a crash gets the same answer. Before answering
it looks at the store, and notes any request for something the store says is already settled
(a round whose acknowledgement or reply is written, a branch step already stored, a question
already answered): a settled step asked again is a step the system forgot it had done.
"""

from __future__ import annotations

import asyncio
import random
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from temporalio.client import (
    Client,
    RPCTimeoutOrCancelledError,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError

from chaos._checks import ExpectedRows
from chaos._report import Outcome
from errands.adapters.scripted import Call, RecordedRequest, Reply
from errands.adapters.store import SessionStore
from errands.contracts import ids
from errands.contracts.workflows import TaskResult

QUESTIONS = [
    ("Scope", "How wide should the survey be?", ["Narrow", "Broad", "Balanced"]),
    ("Format", "How should the findings be written up?", ["Table", "Prose"]),
    ("Deadline", "When do you need the result?", ["Today", "This week", "No rush"]),
]
"""One question per round that asks; headers and words differ so decision memory never
answers one round's question with another's answer."""

_MAIN_TAG = re.compile(r"chaos task (\w+):")
_BRANCH_TAG = re.compile(r"chaos task (\w+) round (\d+) part (\d+)")


@dataclass(frozen=True)
class Plan:
    tag: str
    branches: tuple[int, ...]
    """Subtasks per delegating round; the round after the last one replies."""
    asks: frozenset[int]
    """Rounds that put a question to the user before deciding."""
    picks: tuple[str, ...]
    """The label the user picks, per round."""
    channel: str = "update"
    """How the user answers: the ``answer_question`` update or the ``submit_answer`` signal."""

    @property
    def text(self) -> str:
        return f"chaos task {self.tag}: survey the options and report back"

    @property
    def reply(self) -> str:
        return f"final answer for {self.tag}"

    def ack(self, round_: int) -> str:
        return f"working on {self.tag}, round {round_}"

    def branch_prompt(self, round_: int, part: int) -> str:
        return f"chaos task {self.tag} round {round_} part {part}"

    def branch_text(self, round_: int, part: int) -> str:
        return f"result of {self.tag} round {round_} part {part}"

    @property
    def main_calls(self) -> int:
        """Model calls of the main agent when nothing goes wrong."""
        return len(self.branches) + 1 + len(self.asks)

    @property
    def branch_calls(self) -> int:
        return sum(self.branches)

    def expected_rows(self, task_id: str, session_id: str) -> ExpectedRows:
        rows = {ids.user_message_id(task_id): self.text}
        threads = {}
        for r, n in enumerate(self.branches):
            rows[ids.ack_message_id(task_id, r)] = self.ack(r)
            for k in range(1, n + 1):
                rows[ids.branch_row_id(task_id, r, k)] = self.branch_text(r, k)
                threads[ids.child_workflow_id(task_id, r, k)] = 1
        rows[ids.reply_message_id(task_id)] = self.reply
        return ExpectedRows(session_id=session_id, rows=rows, threads=threads)


def make_plan(rng: random.Random, tag: str, *, channels: tuple[str, ...] = ("update",)) -> Plan:
    delegating = rng.choice([1, 1, 2])
    branches = tuple(rng.randint(1, 4) for _ in range(delegating))
    asks = frozenset(r for r in range(delegating + 1) if r == 0 or rng.random() < 0.3)
    picks = tuple(rng.choice(QUESTIONS[r % len(QUESTIONS)][2]) for r in range(delegating + 1))
    return Plan(tag, branches, asks, picks, rng.choice(channels))


def question(round_: int) -> dict[str, Any]:
    header, text, labels = QUESTIONS[round_ % len(QUESTIONS)]
    return {"question": text, "header": header, "options": [{"label": x} for x in labels]}


@dataclass
class _Task:
    plan: Plan
    task_id: str
    session_id: str


class Agent:
    """The scripted model's responder for planned tasks (OpenAI wire format)."""

    def __init__(
        self, store: SessionStore, outcome: Outcome, rng: random.Random, delay: float
    ) -> None:
        self._store = store
        self._delay = delay
        self._outcome = outcome
        self._rng = rng
        self._tasks: dict[str, _Task] = {}
        self._lock = threading.Lock()
        self.main_calls = 0
        self.branch_calls = 0
        self.branch_asked: dict[str, list[float]] = {}
        """When each branch thread's model call was received, attempt by attempt."""

    @property
    def calls(self) -> int:
        return self.main_calls + self.branch_calls

    def add(self, plan: Plan, task_id: str, session_id: str) -> None:
        with self._lock:
            self._tasks[plan.tag] = _Task(plan, task_id, session_id)

    def __call__(self, request: RecordedRequest) -> Reply | None:
        messages = request.body.get("messages", [])
        tools = [t["function"]["name"] for t in request.body.get("tools", [])]
        with self._lock:
            delay = self._rng.uniform(0.05, self._delay)
        if "final_reply" in tools:
            return self._main(messages, delay)
        return self._branch(messages, delay)

    def _main(self, messages: list[dict[str, Any]], delay: float) -> Reply | None:
        first_user = next((m.get("content") or "" for m in messages if m["role"] == "user"), "")
        found = _MAIN_TAG.search(first_user)
        task = self._tasks.get(found.group(1)) if found else None
        if task is None:
            return None
        self.main_calls += 1
        plan, store = task.plan, self._store
        calls = [c["function"] for m in messages for c in (m.get("tool_calls") or [])]
        round_ = sum(1 for c in calls if c["name"] == "delegate")
        asked = any(c["name"] == "ask_user" for c in calls)
        where = f"{task.task_id} round {round_}"
        if store.get(ids.reply_message_id(task.task_id)) is not None:
            self._settled(f"{where}: asked again after the reply was stored")
        elif store.get(ids.ack_message_id(task.task_id, round_)) is not None:
            self._settled(f"{where}: asked again after its acknowledgement was stored")
        elif round_ in plan.asks and not asked:
            before = sum(1 for r in plan.asks if r < round_)
            if len(store.list_decisions(task.session_id)) > before:
                self._settled(f"{where}: asked to ask the user again after the answer was kept")
        if round_ in plan.asks and not asked:
            return Reply(calls=[Call("ask_user", {"questions": [question(round_)]})], delay=delay)
        if round_ in plan.asks:
            header = QUESTIONS[round_ % len(QUESTIONS)][0]
            results = [m.get("content") or "" for m in messages if m["role"] == "tool"]
            if not results or f"{header}: {plan.picks[round_]}" not in results[-1]:
                self._outcome.lose(
                    "answers lost", f"{where}: the model never read the user's answer"
                )
        if round_ < len(plan.branches):
            subtasks = [
                {"type": "general", "prompt": plan.branch_prompt(round_, k), "references": [1]}
                for k in range(1, plan.branches[round_] + 1)
            ]
            args = {"reply": plan.ack(round_), "subtasks": subtasks}
            return Reply(calls=[Call("delegate", args)], delay=delay)
        return Reply(calls=[Call("final_reply", {"text": plan.reply})], delay=delay)

    def _branch(self, messages: list[dict[str, Any]], delay: float) -> Reply | None:
        text = "\n".join(m.get("content") or "" for m in messages if m["role"] == "user")
        found = _BRANCH_TAG.search(text)
        task = self._tasks.get(found.group(1)) if found else None
        if found is None or task is None:
            return None
        self.branch_calls += 1
        round_, part = int(found.group(2)), int(found.group(3))
        thread = ids.child_workflow_id(task.task_id, round_, part)
        self.branch_asked.setdefault(thread, []).append(time.time())
        if self._store.get(ids.thread_step_id(thread, 0)) is not None:
            self._settled(f"{thread}: its step was asked again after it was stored")
        return Reply(text=task.plan.branch_text(round_, part), delay=delay)

    def _settled(self, detail: str) -> None:
        self._outcome.lose("settled step asked again", detail)


class User:
    """Follows one task to its end and answers each question once, as it appears."""

    def __init__(self, client: Client, outcome: Outcome) -> None:
        self._client = client
        self._outcome = outcome
        self.answers = 0
        self.answer_retries = 0

    async def follow(self, task_id: str, plan: Plan, timeout: float) -> TaskResult | None:
        handle = self._client.get_workflow_handle(task_id, result_type=TaskResult)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        answered: set[str] = set()
        while loop.time() < deadline:
            try:
                description = await asyncio.wait_for(handle.describe(), 5)
                if description.status != WorkflowExecutionStatus.RUNNING:
                    return await asyncio.wait_for(handle.result(), 30)
                pending = await asyncio.wait_for(handle.query("pending_question"), 3)
                if pending and pending["id"] not in answered:
                    if await self._answer(handle, pending, plan):
                        answered.add(pending["id"])
            except (RPCError, RPCTimeoutOrCancelledError, TimeoutError):
                pass  # the server or the worker is down: look again in a moment
            await asyncio.sleep(0.25)
        return None

    async def _answer(
        self, handle: WorkflowHandle[Any, TaskResult], pending: dict[str, Any], plan: Plan
    ) -> bool:
        """True once the answer is in (or was, by an earlier attempt whose reply was lost)."""
        header = pending["questions"][0]["header"]
        round_ = next(r for r, q in enumerate(QUESTIONS) if q[0] == header)
        payload = {"question_set_id": pending["id"], "answers": {"q1": [plan.picks[round_]]}}
        if plan.channel == "signal":
            await handle.signal("submit_answer", payload)
            self.answers += 1
            return True
        try:
            await asyncio.wait_for(handle.execute_update("answer_question", payload), 15)
        except WorkflowUpdateFailedError as error:
            now = await asyncio.wait_for(handle.query("pending_question"), 3)
            if now is None or now["id"] != pending["id"]:
                return True  # taken by an attempt whose reply the crash swallowed
            self._outcome.lose(
                "answers lost", f"{handle.id}: a valid answer was rejected: {error.cause}"
            )
            return True
        except (RPCError, RPCTimeoutOrCancelledError, TimeoutError):
            # The worker died or the server went away mid-update: ask again next time round.
            self.answer_retries += 1
            return False
        self.answers += 1
        return True
