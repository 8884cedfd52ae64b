"""What the CLI prints: a task's state, its events as ``errands run`` and ``errands watch`` show
them, a pending question or approval with the commands that answer it. Every text that came from
a model, a tool or a person goes through ``shown`` or ``one_line`` (errands.cli._terminal);
``--json`` output does not, so it stays the exact document the API returns."""

from __future__ import annotations

import json
import os
import shlex
import sys
import unicodedata
from typing import Any

from errands.cli._terminal import indented, one_line, shown
from errands.contracts.asking import OTHER_PREFIX
from errands.contracts.events import StoredEvent


def print_state(state: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(state, ensure_ascii=False))
        return
    print(one_line(f"{state['task_id']}: {state['status']}"))
    if state.get("pending_question"):
        print(question_text(state["task_id"], state["pending_question"]))
    if state.get("pending_approval"):
        print(approval_text(state["task_id"], state["pending_approval"]))
    if state.get("reply"):
        print(shown(state["reply"]))
    if state.get("error"):
        print(f"error ({one_line(state['error']['kind'])}): {shown(state['error']['message'])}")


def question_text(task_id: str, pending: dict[str, Any]) -> str:
    """A pending question set (``pending_question`` of the status) as text, ending with the
    ``errands answer`` command that answers it."""
    lines, example = [], []
    for q in pending["questions"]:
        offered = [o for o in q["options"] if not o["free_text"]]
        if not offered:
            how = "write the answer as text"
        elif q["multi_select"]:
            how = f"choose one or more: repeat {q['id']}=…"
        else:
            how = "choose one"
        if not q.get("required", True):
            how += "; optional"
        # The question may run over lines: each goes on indented, so none of the model's
        # lines can pass for one of ours (an `answer with:` line).
        head = one_line(f"{q['id']} · {q['header']}")
        lines.append(f"{head}: {indented(q['question'])} ({how})")
        for option in offered:
            described = f": {option['description']}" if option.get("description") else ""
            lines.append(f"    {one_line(option['label'] + described)}")
        if offered:
            lines.append(f"    {OTHER_PREFIX} <your own answer>")
        example.append(f"{q['id']}={offered[0]['label'] if offered else '<your answer>'}")
    lines.append(f"answer with: {one_line(shlex.join(['errands', 'answer', task_id, *example]))}")
    lines.append("  (or --dismiss to choose nothing, --cancel to withdraw the question)")
    return "\n".join(lines)


WHY_GUTTER = "  │ "
"""Starts every screen line of the model's explanation of a call waiting for approval."""
CALL_GUTTER = "    ┆ "
"""Starts every screen line of the call's arguments."""


def approval_text(task_id: str, pending: dict[str, Any], width: int | None = None) -> str:
    """A tool call waiting for approval (``pending_approval`` of the status, or the fields of an
    ``approval_requested`` event), with the commands that answer it.

    The model's explanation and the call are two labelled blocks, each line behind a gutter of
    its own, so nothing the model writes can pass for the call: a text that tries (a fake
    ``arguments:`` line, a carriage return, an escape sequence) shows behind the explanation's
    gutter, its control characters made visible. The arguments are the whole canonical text
    the tool will receive, never cut, with their size and SHA-256 digest. ``width``: the
    terminal's columns, to wrap long lines behind their gutter (by default the terminal's,
    when printing to one; otherwise lines are not wrapped)."""
    width = _terminal_width() if width is None else width
    tool, where = one_line(pending["tool"]), one_line(pending["where"])
    lines = [f"{tool} ({where}) waits for your approval."]
    lines.extend(policy_lines(pending))
    if pending.get("why"):
        lines.append("  the model's explanation (its own words, not the call):")
        lines.extend(_behind(WHY_GUTTER, pending["why"], width))
    digest = pending.get("arguments_sha256") or ""
    size = pending.get("arguments_bytes")
    lines.append("  the call, exactly as the tool will receive it:")
    lines.append(f"    tool:   {tool}")
    lines.append(f"    where:  {where}")
    lines.append(f"    size:   {f'{size:,} bytes' if size is not None else 'not recorded'}")
    lines.append(f"    sha256: {one_line(digest) or 'not recorded'}")
    lines.append("    arguments (whole):")
    lines.extend(_behind(CALL_GUTTER, pending["arguments"], width))
    # An answer names the call it was given for: its digest, or (recorded before 0.3) its id.
    pin = (
        f" --sha256 {one_line(digest)}"
        if digest
        else f" --id {shlex.quote(one_line(pending['approval_id']))}"
    )
    always = " [--always]" if pending.get("can_approve_always") else ""
    task = shlex.quote(one_line(task_id))
    lines.append(f"approve with: errands approve {task}{pin}{always}")
    lines.append(f"deny with:    errands deny {task}{pin} [--reason TEXT]")
    return "\n".join(lines)


POLICY_WORDS = {
    "ask": "ask: the task's owner or an admin approves it",
    "always": "always: the task's owner or an admin approves it, every call",
    "approver": "approver: it waits for an approver (or an admin); the owner alone cannot run it",
    "two": "two: two different people must approve it (four eyes)",
}
"""Each approval policy in words, as the CLI says who a waiting call needs."""


def policy_lines(pending: dict[str, Any]) -> list[str]:
    """Who the waiting call needs (its policy in words) and, for a call that needs more than
    one approval, how many it has and from whom. Nothing for a call recorded before policies
    were shown (no ``policy``)."""
    policy = pending.get("policy")
    if not policy:
        return []
    lines = [f"  policy: {POLICY_WORDS.get(policy) or one_line(str(policy))}"]
    needed = pending.get("approvals_needed") or (2 if policy == "two" else 1)
    approved = pending.get("approved_by") or []
    if needed > 1:
        lines.append(f"  approvals: {approvals_so_far(approved, needed)}")
    return lines


def approvals_so_far(approved: list[dict[str, Any]], needed: int) -> str:
    """``1 of 2 (alice)``: how many of the approvals a call needs it has, and whose (principal
    ids made safe for the terminal)."""
    names = f" ({who(approved)})" if approved else ""
    return f"{len(approved)} of {needed}{names}"


def who(principals: list[dict[str, Any]] | dict[str, Any] | None) -> str:
    """The ids of principals as events name them (``{"id", "role"}``), made safe for the
    terminal: ``alice``, ``alice and bob``; ``someone`` for nobody named."""
    if isinstance(principals, dict):
        principals = [principals]
    ids = [one_line(str(p.get("id", "?"))) for p in principals or []]
    if not ids:
        return "someone"
    return ids[0] if len(ids) == 1 else ", ".join(ids[:-1]) + " and " + ids[-1]


def _behind(gutter: str, text: str, width: int | None) -> list[str]:
    """``text`` made safe (``shown``, tabs visible too), each of its lines behind ``gutter``;
    given ``width``, a line longer than the screen continues on the next behind the gutter
    with ``↪``, so no screen line of it starts without the gutter."""
    rows = []
    for line in shown(text).replace("\t", "\\t").split("\n"):
        if width is None or width <= len(gutter) + 8:
            rows.append(gutter + line)
            continue
        room, first = width - len(gutter) - 1, True
        while True:
            piece, line = _fit(line, room)
            rows.append(gutter + ("" if first else "↪") + piece)
            first = False
            if not line:
                break
    return rows


def _fit(line: str, room: int) -> tuple[str, str]:
    """The start of ``line`` that fills at most ``room`` columns (wide characters take two),
    and the rest."""
    used = 0
    for i, char in enumerate(line):
        used += 2 if unicodedata.east_asian_width(char) in "WF" else 1
        if used > room:
            return line[:i], line[i:]
    return line, ""


def _terminal_width() -> int | None:
    """The columns of the terminal the CLI prints to (stdout, or stderr where ``errands run``
    shows approvals), or None when neither is one."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream.isatty():
                return os.get_terminal_size(stream.fileno()).columns
        except (OSError, ValueError):
            continue
    return None


def step_line(event: StoredEvent, types: dict[tuple[int, int], str]) -> str | None:
    """``_step_line``, with what the model and the tools wrote in it made visible."""
    line = _step_line(event, types)
    return None if line is None else one_line(line)


def _step_line(event: StoredEvent, types: dict[tuple[int, int], str]) -> str | None:
    """What ``errands run`` prints of one event of the log while the task works (None: nothing):
    its rounds, its delegation, each branch's start and end, its tool calls, a retried model
    call, a summary of earlier messages, what became of a message sent to it. ``types``: each
    branch's subtask type by (round, ordinal), filled from the ``delegated`` events."""
    e = event.data
    if event.type == "round_started":
        return f"  round {e['round']}"
    if event.type == "delegated":
        for ordinal, type_ in enumerate(e.get("types") or [], 1):
            types[(e["round"], ordinal)] = type_
        reply = f": {e['reply']}" if e.get("reply") else ""
        return f"  round {e['round']}: {e['subtasks']} subtasks{reply}"
    if event.type == "branch_started":
        return f"  {_branch(e['round'], e['ordinal'], types)} started"
    if event.type == "branch_finished":
        types.setdefault((e["round"], e["ordinal"]), e.get("subtask_type") or "")
        return f"  {_branch(e['round'], e['ordinal'], types)} {e['status']}"
    if event.type == "tool_requested":
        return f"  {_where(e['where'], types)}: {e['tool']}"
    if event.type == "tool_denied":
        denied_by = f"; denied by {who(e['by'])}" if e.get("by") else ""
        return f"  {_where(e['where'], types)}: {e['tool']} not run ({e['reason']}{denied_by})"
    if event.type == "approval_recorded":
        needed = len(e["approved_by"]) + e["waiting_for"]
        more = "a second approver" if e["waiting_for"] == 1 else f"{e['waiting_for']} more"
        return (
            f"  {who(e['by'])} approved {e['tool']} ({len(e['approved_by'])} of {needed}); "
            f"waiting for {more}"
        )
    if event.type == "approval_answered" and e.get("by") and e["decision"] != "deny":
        if len(e.get("approved_by") or []) > 1:
            return f"  {who(e['approved_by'])} approved {e.get('tool') or 'the call'}; it runs"
    if event.type == "tool_finished" and e.get("is_error"):
        return f"  {_where(e['where'], types)}: {e['tool']} answered with an error"
    if event.type == "model_call_started" and e.get("attempt", 1) > 1:
        where = _where(e["where"], types)
        return f"  {where}: {e['model']} again (attempt {e['attempt']})"
    if event.type == "compaction":
        return f"  {_where(e['where'], types)}: earlier messages summarised"
    if event.type == "message_delivered":
        return f"  your message {e['message_id']}: {e['outcome']}"
    return None


def _branch(round_: int, ordinal: int, types: dict[tuple[int, int], str]) -> str:
    type_ = types.get((round_, ordinal))
    return f"round {round_} · subtask {ordinal}" + (f" ({type_})" if type_ else "")


def _where(where: str, types: dict[tuple[int, int], str]) -> str:
    """An event's ``where`` (``main`` or ``r{round}/b{ordinal}``) as the lines say it."""
    round_, _, ordinal = where.partition("/")
    if where == "main" or not (round_[1:].isdigit() and ordinal[1:].isdigit()):
        return where
    return _branch(int(round_[1:]), int(ordinal[1:]), types)


def event_line(event: StoredEvent) -> str:
    """One event of the log as a line: its seq, type and fields."""
    fields = " ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in event.data.items())
    return one_line(f"{event.seq:>4} {event.type} {fields}".rstrip())


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
