"""Timeouts and limits that payloads carry as defaults and several layers agree on."""

HEARTBEAT_TIMEOUT_SECONDS = 30.0
"""A model or tool activity that has not heartbeaten for this long has failed (its worker died)."""
TOOL_TIMEOUT_SECONDS = 120.0
"""How long one work-tool call may run before it is stopped and reported to the model."""
TOOL_MAX_ATTEMPTS = 3
"""Attempts of one work-tool call whose server cannot be reached (or whose worker died)."""

SIDE_TIMEOUT_SECONDS = 180
"""A side question's model-call timeout unless the task's settings say otherwise."""

MODEL_SPEC_CHARS = 200
"""Characters of a ``provider:model`` spec (the longest real model names are under 100)."""
TASK_ID_CHARS = 300
"""Characters of a task id a caller chooses (the gateway's task paths take no longer one)."""
TASK_PATTERN = rf"^[^/\s\x00-\x1f\x7f-\x9f]{{1,{TASK_ID_CHARS}}}$"
"""A task id a caller chooses, from the client or in a gateway path: no slash, no white space,
no control character (C0, DEL, C1), so it prints as itself and is one path segment."""
MESSAGE_CHARS = 100_000
"""Characters of a task's text, and of a message sent into a running task."""
SIDE_QUESTION_CHARS = 10_000
"""Characters of a side question."""
ANSWER_CHARS = 10_000
"""Characters of one answer to one question (an offered label, ``Other: …`` or free text)."""
ANSWER_ITEMS = 100
"""Question ids in one answer, and labels chosen for one question."""
ID_CHARS = 200
"""Characters of an id a caller echoes back: a question set's, an approval's, a question's."""
REASON_CHARS = 2_000
"""Characters of the reason given with a denied tool call."""

SEQ_MAX = 2**63 - 1
"""The largest position (``seq``) in a session or an event log: both stores hold 64-bit signed
integers, so a position past it is refused where it comes in (gateway, CLI)."""
