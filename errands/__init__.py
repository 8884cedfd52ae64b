"""errands: durable, delegated LLM tasks on Temporal.

From Python::

    import errands

    client = await errands.Client.connect()
    result = await client.run("Compare three databases")
    print(result.reply)

``errands.Client`` talks to tasks (acting as an ``errands.Principal`` when it serves several
people); ``errands.ErrandsPlugin`` puts errands' workflows and activities on your own Temporal
worker, with your subtask types (``errands.SubtaskType``), work tools (``errands.tool``) and MCP
servers (``errands.McpServerConfig``). Every exception is in ``errands.errors``.

Names load on first use: workflow code imports ``errands`` submodules, and importing this
package must not drag the Temporal client, the provider SDKs or the store along.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from errands.adapters.mcp.config import McpServerConfig
    from errands.agent.subtask_types import SubtaskType, WorkTool
    from errands.agent.tools import tool
    from errands.client import Client, TaskHandle, TaskInfo
    from errands.contracts.activities import SideAnswer
    from errands.contracts.events import StoredEvent
    from errands.contracts.messages import StoredMessage, ToolSpec
    from errands.contracts.principals import Principal
    from errands.contracts.workflows import AnswerReceipt, TaskError, TaskResult
    from errands.errors import (
        AnswerRejected,
        ConfigError,
        Conflict,
        DevServerError,
        ErrandsError,
        Failed,
        FailureKind,
        InvalidRequest,
        ModelMistake,
        NotFound,
        NoWorker,
        QuotaExceeded,
        Refused,
        SessionNotFound,
        SideQuestionFailed,
        Stopped,
        StoreUnavailable,
        TaskEnded,
        TaskFailed,
        TaskNotFound,
        TemporalUnreachable,
        Unauthorized,
        Unavailable,
    )
    from errands.plugin import ErrandsPlugin
    from errands.settings import Settings, load_settings

__version__ = "0.2.0"

_ERRORS = (
    "AnswerRejected",
    "ConfigError",
    "Conflict",
    "DevServerError",
    "ErrandsError",
    "Failed",
    "FailureKind",
    "InvalidRequest",
    "ModelMistake",
    "NoWorker",
    "NotFound",
    "QuotaExceeded",
    "Refused",
    "SessionNotFound",
    "SideQuestionFailed",
    "Stopped",
    "StoreUnavailable",
    "TaskEnded",
    "TaskFailed",
    "TaskNotFound",
    "TemporalUnreachable",
    "Unauthorized",
    "Unavailable",
)
_HOMES: dict[str, str] = {
    "Client": "errands.client",
    "TaskHandle": "errands.client",
    "TaskInfo": "errands.client",
    "ErrandsPlugin": "errands.plugin",
    "McpServerConfig": "errands.adapters.mcp.config",
    "SubtaskType": "errands.agent.subtask_types",
    "WorkTool": "errands.agent.subtask_types",
    "tool": "errands.agent.tools",
    "ToolSpec": "errands.contracts.messages",
    "StoredMessage": "errands.contracts.messages",
    "Settings": "errands.settings",
    "load_settings": "errands.settings",
    "TaskResult": "errands.contracts.workflows",
    "TaskError": "errands.contracts.workflows",
    "AnswerReceipt": "errands.contracts.workflows",
    "SideAnswer": "errands.contracts.activities",
    "StoredEvent": "errands.contracts.events",
    "Principal": "errands.contracts.principals",
    **{name: "errands.errors" for name in _ERRORS},
}

__all__ = [
    "AnswerReceipt",
    "AnswerRejected",
    "Client",
    "ConfigError",
    "Conflict",
    "DevServerError",
    "ErrandsError",
    "ErrandsPlugin",
    "Failed",
    "FailureKind",
    "InvalidRequest",
    "McpServerConfig",
    "ModelMistake",
    "NoWorker",
    "NotFound",
    "Principal",
    "QuotaExceeded",
    "Refused",
    "SessionNotFound",
    "Settings",
    "SideAnswer",
    "SideQuestionFailed",
    "Stopped",
    "StoreUnavailable",
    "StoredEvent",
    "StoredMessage",
    "SubtaskType",
    "TaskEnded",
    "TaskError",
    "TaskFailed",
    "TaskHandle",
    "TaskInfo",
    "TaskNotFound",
    "TaskResult",
    "TemporalUnreachable",
    "ToolSpec",
    "Unauthorized",
    "Unavailable",
    "WorkTool",
    "load_settings",
    "tool",
]
"""Pinned by tests/test_public_api.py; ``_HOMES`` says where each name lives."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'errands' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
