"""The MCP tools: plain ones every client can use, and ``run_task``, which waits a bounded time
and asks the task's questions through the client's form elicitation when it has it.

Each tool acts through ``errands.Client`` as the request's principal (``_acting``); a refusal
is a tool error carrying errands' own message, and a refused answer changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, InputRequiredResult

from errands.client import Client
from errands.errors import ErrandsError
from errands.protocols.mcp._acting import Frontend, refused
from errands.protocols.mcp._run import WAIT_DEFAULT, WAIT_MAX, run_task
from errands.protocols.mcp._views import task_view


@contextmanager
def refusals() -> Iterator[None]:
    """errands' refusals as tool errors (``isError`` with the message)."""
    try:
        yield
    except ErrandsError as error:
        raise refused(error) from None


def add_tools(server: MCPServer[Any], frontend: Frontend) -> None:
    """Register every tool of errands' MCP server on ``server``."""

    def acting(ctx: Context[Any, Any]) -> Client:
        with refusals():
            return frontend.acting(ctx.request_context.request)

    @server.tool()
    async def start_task(
        text: str, ctx: Context[Any, Any], session: str | None = None, headless: bool = False
    ) -> dict[str, Any]:
        """Start a durable errands task and return its id at once (it never waits for the task).
        `session`: the conversation to work in (default: a new one); `headless`: nobody will
        answer its questions. Follow it with task_status."""
        with refusals():
            handle = await acting(ctx).start(text, session=session, headless=headless)
        task = handle.task_id
        return {
            "task_id": task,
            "session_id": handle.session_id,
            "status": "running",
            "summary": f"started task {task}; call task_status({task!r}) to follow it",
        }

    @server.tool()
    async def task_status(task_id: str, ctx: Context[Any, Any]) -> dict[str, Any]:
        """A task as it stands: status (running, waiting_for_user, replied, failed, canceled),
        phase, reply or error, and the pending question (answer with `answer`) or tool call
        waiting for approval (`approve` / `deny`). `summary` says what to call next."""
        with refusals():
            return task_view(await acting(ctx).task(task_id).status())

    @server.tool()
    async def answer(
        task_id: str,
        ctx: Context[Any, Any],
        answers: dict[str, list[str] | str] | None = None,
        dismiss: bool = False,
        cancel_question: bool = False,
        question_set_id: str | None = None,
    ) -> dict[str, Any]:
        """Answer the task's pending question. `answers`: per question id (q1, q2, …) the
        offered labels chosen, "Other: <your words>", or the text of a text question. Or
        `dismiss` to choose nothing (the agent stops and waits), or `cancel_question` to
        withdraw it. `question_set_id`: refuse unless that question set is the one pending.
        The task validates the answer; a refused one says why and changes nothing."""
        with refusals():
            receipt = (
                await acting(ctx)
                .task(task_id)
                .answer(
                    answers,
                    dismiss=dismiss,
                    cancel=cancel_question,
                    question_set_id=question_set_id,
                )
            )
        return {"task_id": task_id, "accepted": True, **receipt.model_dump(mode="json")}

    @server.tool()
    async def approve(
        task_id: str, sha256: str, ctx: Context[Any, Any], always: bool = False
    ) -> dict[str, Any]:
        """Let the tool call waiting for approval run. `sha256`: the `arguments_sha256` of the
        `pending_approval` you read (refused unless the waiting call has those arguments);
        `always`: also every later call of that tool in the session."""
        with refusals():
            receipt = (
                await acting(ctx).task(task_id).approve(always=always, arguments_sha256=sha256)
            )
        return {"task_id": task_id, **receipt.model_dump(mode="json")}

    @server.tool()
    async def deny(
        task_id: str, ctx: Context[Any, Any], sha256: str | None = None, reason: str | None = None
    ) -> dict[str, Any]:
        """Refuse the tool call waiting for approval; the agent reads `reason`. `sha256`: the
        `arguments_sha256` of the `pending_approval` you read (refused unless it matches)."""
        with refusals():
            receipt = await acting(ctx).task(task_id).deny(reason, arguments_sha256=sha256)
        return {"task_id": task_id, **receipt.model_dump(mode="json")}

    @server.tool()
    async def side_question(task_id: str, question: str, ctx: Context[Any, Any]) -> dict[str, Any]:
        """Ask a side question about a task (running, waiting or finished) without touching it:
        nothing is added to its conversation and no tool runs."""
        with refusals():
            answered = await acting(ctx).task(task_id).btw(question)
        return {"task_id": task_id, **answered.model_dump(mode="json")}

    @server.tool()
    async def say(
        task_id: str,
        text: str,
        ctx: Context[Any, Any],
        mode: Literal["steer", "interrupt", "queue"] = "steer",
    ) -> dict[str, Any]:
        """Send a message into a running task: `steer` (default) shows it to the agent before
        its next step; `interrupt` stops the round in flight first; `queue` makes it the
        session's next task once this one ends."""
        with refusals():
            receipt = await acting(ctx).task(task_id).say(text, mode=mode)
        return {"task_id": task_id, **receipt.model_dump(mode="json")}

    @server.tool()
    async def cancel(task_id: str, ctx: Context[Any, Any]) -> dict[str, Any]:
        """Ask a running task to stop; task_status shows when it has (canceled)."""
        with refusals():
            await acting(ctx).task(task_id).cancel()
        return {"task_id": task_id, "status": "cancel_requested"}

    @server.tool()
    async def history(session_id: str, ctx: Context[Any, Any]) -> dict[str, Any]:
        """A session's messages, oldest first: the user's requests, acknowledgements, replies."""
        with refusals():
            rows = await acting(ctx).history(session_id)
        messages = [
            {
                "seq": r.seq,
                "role": r.role,
                "kind": r.shown_kind,
                "text": r.text,
                "task_id": r.task_id,
            }
            for r in rows
        ]
        return {"session_id": session_id, "messages": messages}

    @server.tool(name="run_task", description=RUN_TASK)
    async def run_task_tool(
        ctx: Context[Any, Any],
        text: str | None = None,
        task_id: str | None = None,
        session: str | None = None,
        wait_seconds: float = WAIT_DEFAULT,
    ) -> CallToolResult | InputRequiredResult:
        with refusals():
            return await run_task(
                acting(ctx),
                ctx,
                text=text,
                task_id=task_id,
                session=session,
                wait_seconds=wait_seconds,
            )


RUN_TASK = f"""Start a task with `text` (or continue the task `task_id`) and wait for it, at most
`wait_seconds` (default {WAIT_DEFAULT:g}, at most {WAIT_MAX:g}). If the task asks a question
meanwhile and this client supports form elicitation, the question is put to the user as a form
(decline: choose nothing; cancel: withdraw the question) and the wait goes on. Returns the reply,
or "still working" with the task id (call task_status or run_task(task_id=…) again), or the
pending question or approval for a client without elicitation (answer with `answer`)."""
