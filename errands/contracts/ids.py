"""Deterministic ids: every row the system writes is named by its position, never its content.

A retried or replayed activity computes the same id and ``append_once`` returns the row already
stored (DESIGN invariant 1). Provider-facing tool-call ids keep to ``[A-Za-z0-9_-]``.
"""

from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def user_message_id(task_id: str) -> str:
    return f"task:{task_id}:user"


def steer_message_id(task_id: str, n: int) -> str:
    """The ``n``-th message the user sent into the running task (``send_message``)."""
    return f"task:{task_id}:steer:{n}"


def queued_task_id(task_id: str, n: int) -> str:
    """The task a message queued on ``task_id`` becomes once that task ends."""
    return f"{task_id}-q{n}"


def queued_start_id(message_id: str) -> str:
    """Where a queued message's start is recorded until it becomes a task (quotas count it
    meanwhile). A slash: no task id has one, so it is never taken for a running task."""
    return f"queued/{message_id}"


def is_queued_start(start_id: str) -> bool:
    return start_id.startswith("queued/")


def queued_after_end_task_id(task_id: str) -> str:
    """The task a message queued on ``task_id`` after it ended starts (``-q0``: the task's own
    queued tasks count from 1)."""
    return queued_task_id(task_id, 0)


def ack_message_id(task_id: str, round_: int) -> str:
    return f"task:{task_id}:round:{round_}:ack"


def reply_message_id(task_id: str) -> str:
    return f"task:{task_id}:reply"


def branch_row_id(task_id: str, round_: int, ordinal: int) -> str:
    return f"task:{task_id}:round:{round_}:branch:{ordinal}"


def branch_rows_prefix(task_id: str, round_: int | None = None) -> str:
    """Prefix of the branch rows of one round, or of every round when ``round_`` is None."""
    if round_ is None:
        return f"task:{task_id}:round:"
    return f"task:{task_id}:round:{round_}:branch:"


def child_workflow_id(task_workflow_id: str, round_: int, ordinal: int) -> str:
    return f"{task_workflow_id}/r{round_}/b{ordinal}"


def thread_step_id(thread_id: str, step: int) -> str:
    """A branch's own thread: the model's output at ``step``."""
    return f"{thread_id}:step:{step}"


def thread_tool_result_id(thread_id: str, step: int, call_index: int) -> str:
    return f"{thread_id}:step:{step}:tool:{call_index}"


def thread_instructions_id(thread_id: str) -> str:
    return f"{thread_id}:instructions"


def summary_id(session_id: str, covers_upto: int) -> str:
    """A compaction summary of ``session_id`` (a session or a branch's thread) folding in every
    row up to seq ``covers_upto``: the same stretch always names the same row."""
    return f"{session_id}:summary:{covers_upto}"


def reads_session_id(task_id: str) -> str:
    """Where a task's ``read_message`` results are kept, apart from its session."""
    return f"task:{task_id}:reads"


def task_tools_id(task_id: str) -> str:
    """The MCP tool list a task pinned when it first needed it (a session of its own, too)."""
    return f"task:{task_id}:tools"


def mcp_holder_id(scope: str, server: str, generation: int) -> str:
    """The record that generation ``generation`` of ``scope``'s session with the MCP server
    ``server`` is held by one worker (its queue is the row's text): the first to write it holds
    it (``append_once``)."""
    return f"mcp:{scope}:{server}:{generation}"


def mcp_main_scope(task_id: str) -> str:
    """The scope of the main agent's own ``branch`` sessions (a branch's is its thread id)."""
    return f"task:{task_id}:main"


def read_result_id(task_id: str, round_: int, slot: str, step: int, arguments: str) -> str:
    """The page a round's ``read_message`` call at the task's ``step`` asked for; the digest
    of its arguments keeps a different call at the same step (after a reset) apart."""
    digest = hashlib.sha256(arguments.encode()).hexdigest()[:12]
    return f"task:{task_id}:round:{round_}:{slot}:read:{step}:{digest}"


def round_tool_result_id(
    task_id: str, round_: int, slot: str, step: int, index: int, call: str
) -> str:
    """The result of the ``index``-th tool call the main agent made at the task's ``step``; the
    digest of ``call`` (its name and arguments) keeps a different call there (after a reset)
    apart, and with it its idempotency key."""
    digest = hashlib.sha256(call.encode()).hexdigest()[:12]
    return f"task:{task_id}:round:{round_}:{slot}:tool:{step}:{index}:{digest}"


def approvals_session_id(session_id: str) -> str:
    """Where a session keeps the tools its user approved for good."""
    return f"{session_id}:approvals"


def approved_always_id(session_id: str, tool: str) -> str:
    """The row saying the user approved every call of ``tool`` in the session."""
    return f"{session_id}:approved:{tool}"


def approval_id(workflow_id: str, step: int, index: int) -> str:
    """The pending approval of the ``index``-th call of ``step`` in a task or a branch."""
    return f"{workflow_id}:approval:{step}:{index}"


def provider_safe(raw: str) -> str:
    """A tool-call id every provider accepts (Anthropic rejects anything outside [A-Za-z0-9_-])."""
    return _UNSAFE.sub("_", raw)


def delegate_call_id(task_id: str, round_: int) -> str:
    return provider_safe(f"task_{task_id}_round_{round_}_delegate")


def repair_call_id(task_id: str, round_: int, slot: str, repair: int) -> str:
    return provider_safe(f"task_{task_id}_round_{round_}_{slot}_repair_{repair}")
