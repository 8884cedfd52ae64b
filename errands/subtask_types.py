"""Subtask types: the plugins a round can delegate to.

Each type declares everything the main agent is told about its domain (description and
delegation guidance), the schema of its params, the work tools its branches may use and,
optionally, the model its branches run on. The round loop names no domain itself.

Types come from three places, later ones overriding earlier keys: the built-in ``general`` type,
the ``errands.subtask_types`` entry-point group, and ``ERRANDS_SUBTASK_TYPES`` (comma-separated
``module:attribute`` paths, each a ``SubtaskType`` or a list of them).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from pydantic import BaseModel

from errands.contracts import ToolSpec

ToolFunction = Callable[[dict[str, Any]], "str | Awaitable[str]"]


@dataclass(frozen=True)
class WorkTool:
    """A tool a branch may call; it runs as an activity and returns text for the model."""

    spec: ToolSpec
    run: ToolFunction

    async def __call__(self, arguments: dict[str, Any]) -> str:
        result = self.run(arguments)
        if inspect.isawaitable(result):
            result = await result
        return str(result)


@dataclass(frozen=True)
class SubtaskType:
    key: str
    description: str
    """One line the main agent reads in the ``delegate`` tool's schema."""
    guidance: str
    """What the main agent is told, in its instructions, about when and how to delegate here."""
    instructions: str
    """The system text of this type's branches."""
    params_schema: dict[str, Any] | None = None
    """JSON schema of ``params``; ``None`` means the type takes no params."""
    tools: list[WorkTool] = field(default_factory=list)
    model: str | None = None
    """``provider:model`` for this type's branches; ``None`` runs them on the task's model."""

    def info(self) -> SubtaskTypeInfo:
        return SubtaskTypeInfo(
            key=self.key,
            description=self.description,
            params_schema=self.params_schema,
            model=self.model,
        )


class SubtaskTypeInfo(BaseModel):
    """What a workflow needs to know of a type: enough to validate a delegation, no code."""

    key: str
    description: str
    params_schema: dict[str, Any] | None = None
    model: str | None = None


GENERAL = SubtaskType(
    key="general",
    description="A self-contained piece of work answered in prose: research, analysis, drafting.",
    guidance=(
        "`general` subtasks suit work that splits into independent parts, each answerable "
        "on its own from its instructions and the messages you cite. Write each prompt so a "
        "colleague who never saw this conversation could do it."
    ),
    instructions=(
        "You are working on one part of a larger task. Do exactly what your instructions ask, "
        "using the quoted messages as your only context, and answer in plain text. Be concrete "
        "and complete: your answer is handed back verbatim to the agent that delegated to you."
    ),
)


def load_types(paths: str | None = None) -> dict[str, SubtaskType]:
    """Every installed subtask type by key, in a stable order."""
    found: dict[str, SubtaskType] = {GENERAL.key: GENERAL}
    for entry in sorted(entry_points(group="errands.subtask_types"), key=lambda e: e.name):
        _add(found, entry.load(), entry.value)
    for path in filter(None, (p.strip() for p in (paths or "").split(","))):
        module_name, _, attribute = path.partition(":")
        if not attribute:
            raise ValueError(
                f"subtask type path {path!r} must look like 'package.module:attribute'"
            )
        _add(found, getattr(importlib.import_module(module_name), attribute), path)
    return found


def _add(found: dict[str, SubtaskType], loaded: object, origin: str) -> None:
    items = loaded if isinstance(loaded, (list, tuple)) else [loaded]
    for item in items:
        if not isinstance(item, SubtaskType):
            raise TypeError(f"{origin} is not a SubtaskType (got {type(item).__name__})")
        found[item.key] = item
