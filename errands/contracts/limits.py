"""Timeouts and limits that payloads carry as defaults and several layers agree on."""

HEARTBEAT_TIMEOUT_SECONDS = 30.0
"""A model or tool activity that has not heartbeaten for this long has failed (its worker died)."""
TOOL_TIMEOUT_SECONDS = 120.0
"""How long one work-tool call may run before it is stopped and reported to the model."""
TOOL_MAX_ATTEMPTS = 3
"""Attempts of one work-tool call whose server cannot be reached (or whose worker died)."""

SIDE_TIMEOUT_SECONDS = 180
"""A side question's model-call timeout unless the task's settings say otherwise."""
