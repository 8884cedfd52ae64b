"""What the CLI prints: a task's state, a pending question or approval with the commands that
answer it."""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any

from errands.contracts.asking import OTHER_PREFIX
from errands.contracts.events import StoredEvent


def print_state(state: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(state, ensure_ascii=False))
        return
    print(f"{state['task_id']}: {state['status']}")
    if state.get("pending_question"):
        print(question_text(state["task_id"], state["pending_question"]))
    if state.get("pending_approval"):
        print(approval_text(state["task_id"], state["pending_approval"]))
    if state.get("reply"):
        print(state["reply"])
    if state.get("error"):
        print(f"error ({state['error']['kind']}): {state['error']['message']}")


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
        lines.append(f"{q['id']} · {q['header']}: {q['question']} ({how})")
        for option in offered:
            described = f": {option['description']}" if option.get("description") else ""
            lines.append(f"    {option['label']}{described}")
        if offered:
            lines.append(f"    {OTHER_PREFIX} <your own answer>")
        example.append(f"{q['id']}={offered[0]['label'] if offered else '<your answer>'}")
    lines.append(f"answer with: {shlex.join(['errands', 'answer', task_id, *example])}")
    lines.append("  (or --dismiss to choose nothing, --cancel to withdraw the question)")
    return "\n".join(lines)


def approval_text(task_id: str, pending: dict[str, Any]) -> str:
    """A tool call waiting for approval (``pending_approval`` of the status), with the commands
    that answer it."""
    lines = [f"{pending['tool']} ({pending['where']}) waits for your approval:"]
    if pending.get("why"):
        lines.append(f"    why: {pending['why']}")
    lines.append(f"    arguments: {pending['arguments']}")
    always = " [--always]" if pending.get("can_approve_always") else ""
    lines.append(f"approve with: errands approve {shlex.quote(task_id)}{always}")
    lines.append(f"deny with:    errands deny {shlex.quote(task_id)} [--reason TEXT]")
    return "\n".join(lines)


def event_line(event: StoredEvent) -> str:
    """One event of the log as a line: its seq, type and fields."""
    fields = " ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in event.data.items())
    return f"{event.seq:>4} {event.type} {fields}".rstrip()


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
