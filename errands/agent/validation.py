"""What every frontend (CLI, HTTP gateway) checks before it starts a task, so each refuses the
same input with the same message, before anything is written.

A model spec is checked by ``check_model_spec``: the settings, the frontends and the worker (through
``errands.adapters.routing.parse_model``) all accept the same specs. This module imports
nothing heavy.
"""

from __future__ import annotations

import re

from errands.contracts.limits import MESSAGE_CHARS
from errands.contracts.limits import TASK_PATTERN as TASK_PATTERN

SESSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,79}$"
"""Session ids become part of task ids, workflow ids and a search attribute: keep them plain."""
MAX_TEXT = MESSAGE_CHARS
"""Characters of a task's text."""
DEMO_MODEL = "demo"
"""The offline model: the real OpenAI client against rules served on loopback."""
MODEL_PROVIDERS = ("openai", "anthropic", DEMO_MODEL)


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


def check_model_spec(spec: str) -> tuple[str, str]:
    """``openai:gpt-4.1`` → ("openai", "gpt-4.1"); ``demo`` → ("demo", "demo"); ``ValueError``
    saying what a model spec looks like otherwise."""
    if spec == DEMO_MODEL:
        return DEMO_MODEL, DEMO_MODEL
    provider, sep, model = spec.partition(":")
    if not sep or provider not in MODEL_PROVIDERS or not model:
        raise ValueError(
            f"model {spec!r} is not of the form provider:model with provider openai, anthropic "
            "or demo (e.g. openai:gpt-4.1-mini)"
        )
    return provider, model
