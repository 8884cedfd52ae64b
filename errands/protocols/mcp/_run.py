"""``run_task``: start (or continue) a task, wait a bounded time, and ask its questions through
the client's form elicitation when the client has it.

The wait is bounded (``WAIT_DEFAULT`` s, at most ``WAIT_MAX``): clients cut long tool calls
(Claude Code at about 60 s), and the task is durable anyway, so the call answers "still
working" with the task id and the client follows with ``task_status``.

Elicitation rides the transport the client negotiated:

- up to 2025-11-25, a standalone ``elicitation/create`` request mid-call (``elicit_form``);
- from 2026-07-28 (no back-channel), an ``InputRequiredResult`` whose ``requestState`` carries
  the task and the question set; the client retries the call with the form's outcome, and the
  retry answers that task, never starting another. The SDK seals ``requestState`` (its
  ``RequestStateSecurity``) and every call acts as its principal, so a forged state reaches no
  task the caller could not reach anyway.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from mcp.server.mcpserver import Context
from mcp.types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    TextContent,
)
from mcp_types.version import is_version_at_least

from errands.client import Client, TaskHandle
from errands.contracts.events import TERMINAL
from errands.contracts.workflows import TaskResult
from errands.errors import Conflict, InvalidRequest
from errands.protocols.mcp._forms import Action, answers_from, form_message, form_schema
from errands.protocols.mcp._views import task_view

WAIT_DEFAULT = 25.0
WAIT_MAX = 45.0
"""Seconds ``run_task`` waits at most: under the ~60 s at which clients cut a tool call."""
ASKS = 3
"""Times one call asks the same question set after the task refused the answer to it."""
INPUT_REQUIRED_VERSION = "2026-07-28"
"""The first protocol version whose tool calls elicit by ``InputRequiredResult``."""
WAKE = frozenset({"question_asked", "approval_requested", *TERMINAL})
"""Events after which the task may need the caller (or have ended)."""


def can_elicit(ctx: Context[Any, Any]) -> bool:
    """Whether the client declared form elicitation (a bare ``elicitation: {}`` is form)."""
    capabilities = ctx.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def input_required(ctx: Context[Any, Any]) -> bool:
    version = ctx.protocol_version
    return version is not None and is_version_at_least(version, INPUT_REQUIRED_VERSION)


def bounded(wait_seconds: float | None) -> float:
    if wait_seconds is None:
        return WAIT_DEFAULT
    return min(max(float(wait_seconds), 0.0), WAIT_MAX)


async def answer_outcome(
    handle: TaskHandle, pending: Mapping[str, Any], action: Action, content: Any
) -> str | None:
    """Send the form's outcome to the task: accept → answered, decline → dismissed, cancel →
    the question cancelled. None when the task took it (or the question is no longer
    pending); the task's refusal otherwise, nothing changed."""
    question_set = str(pending["id"])
    try:
        if action == "accept":
            given = answers_from(pending, content)
            await handle.answer(given, question_set_id=question_set)
        elif action == "decline":
            await handle.answer(dismiss=True, question_set_id=question_set)
        else:
            await handle.answer(cancel=True, question_set_id=question_set)
    except InvalidRequest as refused:
        return " ".join(refused.message.split())
    except Conflict:
        return None  # answered meanwhile, or ended: what comes next is read from the task
    return None


async def settled(handle: TaskHandle, deadline: float, skip: str | None = None) -> TaskResult:
    """The task once it has ended, asks a question (other than the set ``skip``) or waits for
    an approval; as it stands when ``deadline`` (event-loop time) comes first."""
    after = await _tail(handle)
    status = await handle.status()
    if _needs_caller(status, skip):
        return status
    try:
        async with asyncio.timeout_at(deadline):
            async for event in handle.events(after=after):
                if event.type in TERMINAL:
                    return await handle.wait()
                if event.type in WAKE:
                    status = await handle.status()
                    if _needs_caller(status, skip):
                        return status
    except TimeoutError:
        pass
    return await handle.status()


def _needs_caller(status: TaskResult, skip: str | None) -> bool:
    if status.status not in ("running", "waiting_for_user"):
        return True
    question = status.pending_question
    return bool(question and question.get("id") != skip) or bool(status.pending_approval)


async def _tail(handle: TaskHandle) -> int:
    """The seq of the task's latest event so far (0: none yet)."""
    seen = 0
    while True:
        batch = await handle.events_after(seen)
        if not batch:
            return seen
        seen = batch[-1].seq


async def run_task(
    client: Client,
    ctx: Context[Any, Any],
    *,
    text: str | None,
    task_id: str | None,
    session: str | None,
    wait_seconds: float | None,
) -> CallToolResult | InputRequiredResult:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bounded(wait_seconds)
    rejected: str | None = None
    answered: str | None = None
    if ctx.input_responses is not None and ctx.request_state:
        # A retry after an InputRequiredResult: the form's outcome for the task in the state.
        state = json.loads(ctx.request_state)
        handle = client.task(str(state["task_id"]))
        pending = state["pending"]
        response = ctx.input_responses.get(str(pending["id"]))
        if isinstance(response, ElicitResult):
            rejected = await answer_outcome(handle, pending, response.action, response.content)
            if rejected is not None:
                return _ask(handle.task_id, pending, rejected, int(state.get("asked", 1)) + 1)
            answered = str(pending["id"])
    elif task_id is not None:
        handle = client.task(task_id)
    elif text is not None:
        handle = await client.start(text, session=session)
    else:
        raise InvalidRequest("give the task's text to start one, or task_id to continue one")
    asked = 0
    while True:
        status = await settled(handle, deadline, skip=answered)
        question = status.pending_question
        if status.status in ("running", "waiting_for_user") and question and can_elicit(ctx):
            if question.get("id") == answered:  # still shown as pending a moment after
                return _result(status, "still working")
            if input_required(ctx):
                return _ask(handle.task_id, question, rejected, 1)
            asked += 1
            if asked > ASKS:
                return _result(status, f"the answer was refused {ASKS} times: {rejected}")
            outcome = await ctx.request_context.session.elicit_form(
                message=form_message(handle.task_id, question, rejected),
                requested_schema=form_schema(question),
                related_request_id=ctx.request_id,
            )
            rejected = await answer_outcome(handle, question, outcome.action, outcome.content)
            if rejected is None:
                answered = str(question["id"])
            continue
        return _result(status, None)


def _ask(task_id: str, pending: Mapping[str, Any], rejected: str | None, asked: int) -> Any:
    """The task's question as an ``InputRequiredResult`` (2026-07-28 and later)."""
    if asked > ASKS:
        raise InvalidRequest(
            f"the answer to task {task_id}'s question was refused {ASKS} times (last: "
            f"{rejected}); call task_status({task_id}) and answer with the answer tool"
        )
    form = ElicitRequestFormParams(
        message=form_message(task_id, pending, rejected), requested_schema=form_schema(pending)
    )
    state = {"task_id": task_id, "pending": dict(pending), "asked": asked}
    return InputRequiredResult(
        input_requests={str(pending["id"]): ElicitRequest(params=form)},
        request_state=json.dumps(state, ensure_ascii=False),
    )


def _result(status: TaskResult, note: str | None) -> CallToolResult:
    view = task_view(status, note)
    return CallToolResult(
        content=[TextContent(type="text", text=view["summary"])],
        structured_content=view,
        is_error=status.status == "failed",
    )
