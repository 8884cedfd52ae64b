"""What every frontend (CLI, HTTP gateway) checks before it starts a task, so each refuses the
same input with the same message, before anything is written.

A model spec is checked with ``errands.routing.parse_model``, the same parser the worker uses.
"""

from __future__ import annotations

import re

SESSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,79}$"
"""Session ids become part of task ids, workflow ids and a search attribute: keep them plain."""
TASK_PATTERN = r"^[^/\s\x00-\x1f]{1,300}$"
MAX_TEXT = 100_000
"""Characters of a task's text."""


def check_task_text(text: str) -> str:
    """``text`` if it can be a task; ``ValueError`` saying what to write otherwise."""
    if not text.strip():
        raise ValueError("the task's text is blank; write what the agent should do")
    if len(text) > MAX_TEXT:
        raise ValueError(
            f"the task's text has {len(text):,} characters, more than the {MAX_TEXT:,} allowed; "
            "shorten it or split the work into several tasks"
        )
    return text


def check_session_id(session_id: str) -> str:
    """``session_id`` if it can name a session; ``ValueError`` saying what is allowed otherwise."""
    if not re.fullmatch(SESSION_PATTERN, session_id):
        raise ValueError(
            f"session id {session_id!r} is not allowed: use 1 to 80 letters, digits and _ . : - "
            "starting with a letter or digit (for example s1 or project-x)"
        )
    return session_id
