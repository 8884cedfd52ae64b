"""The exact request of a round, rebuilt from the store: one function, so a round's model call,
its advisor consultation and a later side question all see byte-identical system text, tools and
messages (the side question's prompt-cache parity depends on it); and a branch step's, from its
thread."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from activities._context import ResultLimit, SessionView, session_view
from activities._threads import thread_messages
from activities._tools import MAIN, PinnedTools
from errands.adapters.store import SessionStore
from errands.agent import prompts, reading
from errands.agent.advisor import advisor_spec
from errands.agent.asking import ask_user_spec
from errands.agent.catalog import render_session
from errands.agent.context import messages_bytes
from errands.agent.control import delegate_spec, final_reply_spec
from errands.agent.reading import (
    ALL,
    NONE,
    PREVIEW_OVER,
    READ_MESSAGE,
    read_message_spec,
    result_preview,
    utf8_over,
)
from errands.agent.subtask_types import SubtaskType, WorkTool
from errands.contracts import ids
from errands.contracts.activities import BranchStepInput
from errands.contracts.messages import Message, ModelRequest, StoredMessage
from errands.contracts.rounds import RoundStepInput
from errands.contracts.rows import ToolResultMeta


def round_request(
    store: SessionStore,
    types: dict[str, SubtaskType],
    data: RoundStepInput,
    previews: int = NONE,
    main_tools: Sequence[WorkTool] = (),
    result_limit: Callable[[int], int] | None = None,
    pinned: PinnedTools | None = None,
) -> tuple[ModelRequest, int, SessionView]:
    """The round's request, the size of its catalog, and the view of the session it renders
    (from the latest compaction summary on; bulky outputs as ``previews`` says; the round's own
    tool results within ``result_limit``, see ``stored_texts``). ``pinned``: the task's MCP tool
    list, when the caller holds it; else it is read from the store. Blocking: call it from a
    thread."""
    if data.view is not None:  # pinned: exactly what the round's step rendered
        previews = data.view.previews
    view = session_view(store, data.session_id, data.upto_seq, data.view)
    rendered = render_session(view.rows, data.task_id, view.summary, previews=previews)
    installed = list(types.values())
    pinned = pinned if pinned is not None else pinned_tools(store, data.task_id)
    delegable = data.final_reason is None and bool(installed)
    # Control tools first (the order is part of the prompt), then work tools.
    limit = result_limit(data.max_output_tokens) if result_limit is not None else None
    extra, previewed = stored_texts(store, data.extra, limit, previews)
    tools = [final_reply_spec()]
    if delegable:
        tools.append(delegate_spec([t.info() for t in installed], data.max_subtasks))
    if data.final_reason is None and data.work_tools:
        tools.append(ask_user_spec())
        if data.advisor:
            tools.append(advisor_spec())
        tools += [t.spec for t in main_tools]  # the main agent's Python tools, then MCP's
        if pinned is not None:
            tools += [t.spec() for t in pinned.offered(MAIN)]
        if rendered.previewed or previewed or any(m.tool_name == READ_MESSAGE for m in data.extra):
            tools.append(read_message_spec())
    request = ModelRequest(
        system=prompts.round_instructions(
            installed, data.max_subtasks, delegable=delegable, final_reason=data.final_reason
        )
        + (prompts.tools_unavailable(pinned.unavailable(MAIN)) if pinned is not None else ""),
        messages=rendered.messages + extra,
        tools=tools,
        tool_choice="required",
        max_output_tokens=data.max_output_tokens,
        # The rendered session is the stable prefix the next round, side questions and the
        # advisor share; the slot's own repair messages after it are not.
        cache_upto=len(rendered.messages),
    )
    shown = replace(view, shown_bytes=messages_bytes(rendered.messages))
    return request, len(rendered.catalog), shown


def pinned_tools(store: SessionStore, task_id: str) -> PinnedTools | None:
    """The MCP tools the task pinned (None before they were listed: the first step a server
    serves lists and pins them). Blocking."""
    row = store.get(ids.task_tools_id(task_id))
    return PinnedTools.model_validate_json(row.text) if row is not None else None


def stored_texts(
    store: SessionStore, messages: list[Message], limit: int | None = None, previews: int = NONE
) -> tuple[list[Message], bool]:
    """``messages`` with the text of those held in the store read back: a tool result over
    ``limit`` bytes as its preview (``result_preview``, numbered by its row in the task's
    results); with ``previews`` at ``ALL``, every result over ``PREVIEW_OVER``, earlier pages
    ``read_message`` showed among them (never the page the latest step asked for); and whether
    any result is shown as a preview. Blocking."""
    latest = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    out = []
    previewed = False
    for index, message in enumerate(messages):
        if message.stored is not None:
            row = store.get(message.stored)
            text = row.text if row is not None else "(this result is no longer in the store)"
            if row is not None:
                asked = message.tool_name == READ_MESSAGE and index > latest  # the page it read
                if previews == ALL and not asked and len(text) > PREVIEW_OVER:
                    text, previewed = result_preview(text, row.seq, PREVIEW_OVER), True
                elif not asked and limit is not None and utf8_over(text, limit):
                    text, previewed = result_preview(text, row.seq, limit), True
            message = message.model_copy(update={"text": text, "stored": None})
        out.append(message)
    return out, previewed


def branch_request(
    store: SessionStore,
    types: dict[str, SubtaskType],
    data: BranchStepInput,
    previews: int,
    pinned: PinnedTools | None = None,
    result_limit: ResultLimit | None = None,
) -> tuple[ModelRequest, int, SessionView]:
    """The step's request from the thread as stored: its opening (always word for word),
    the latest compaction summary of the thread, and the steps after it. A tool result is
    shown as the main agent's are (``reading.result_preview``, numbered by its row in the
    thread): always when over ``result_limit`` bytes, and past ``PREVIEW_OVER`` characters
    to the preview level asked. Blocking."""
    opening = store.get(ids.thread_instructions_id(data.thread_id))
    view = session_view(store, data.thread_id, None)
    rows = [r for r in view.rows if opening is None or r.id != opening.id]
    if view.summary is not None:
        # Results whose call was folded into the summary (a piece may end mid-step).
        while rows and rows[0].kind == "tool_result":
            rows.pop(0)
    limit = result_limit(data.max_output_tokens) if result_limit is not None else None
    shown, shortened = shortened_results(rows, previews, limit)
    messages = thread_messages([opening] if opening else [])
    compactable = thread_messages(shown)
    if view.summary is not None:
        summary = Message(role="user", text=prompts.summary_message(view.summary.text))
        compactable.insert(0, summary)
    messages += compactable
    subtask_type = types[data.subtask_type]
    if data.last_step:
        messages.append(Message(role="user", text=prompts.BRANCH_LAST_STEP))
    # Its own tools, then the MCP servers' (pinned for the task), then read_message.
    tools = [t.spec for t in subtask_type.tools]
    system = subtask_type.instructions
    if pinned is not None:
        tools += [t.spec() for t in pinned.offered(data.subtask_type)]
        system += prompts.tools_unavailable(pinned.unavailable(data.subtask_type))
    if shortened or any(ToolResultMeta.of(r).tool_name == reading.READ_MESSAGE for r in rows):
        tools.append(reading.read_message_spec())
    request = ModelRequest(
        system=system,
        messages=messages,
        tools=[] if data.last_step else tools,
        tool_choice="auto",
        max_output_tokens=data.max_output_tokens,
    )
    shown_bytes = messages_bytes(compactable)
    return request, 0, SessionView(data.thread_id, view.summary, rows, shown_bytes)


def shortened_results(
    rows: list[StoredMessage], previews: int, limit: int | None
) -> tuple[list[StoredMessage], int]:
    """A thread's rows as a branch's request shows them, and how many were shortened: a tool
    result over ``limit`` bytes, or past ``PREVIEW_OVER`` at the preview level asked, as its
    head and tail (``reading.result_preview``, numbered by its row in the thread); never the
    pages ``read_message`` returned."""
    latest_step = max((r.seq for r in rows if r.kind == "step"), default=0)
    shown: list[StoredMessage] = []
    shortened = 0
    for row in rows:
        bounds = [] if limit is None else [limit]
        if previews == reading.ALL or (previews == reading.OLDER and row.seq < latest_step):
            bounds.append(reading.PREVIEW_OVER)
        room = min(bounds, default=None)
        if (
            room is not None
            and row.kind == "tool_result"
            and ToolResultMeta.of(row).tool_name != reading.READ_MESSAGE  # what was asked for
            and reading.utf8_over(row.text, room)
        ):
            text = reading.result_preview(row.text, row.seq, room)
            row = row.model_copy(update={"text": text})
            shortened += 1
        shown.append(row)
    return shown, shortened
