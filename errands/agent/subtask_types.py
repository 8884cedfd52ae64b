"""Subtask types: the plugins a round can delegate to.

Each type declares everything the main agent is told about its domain (description and
delegation guidance), the schema of its params, the work tools its branches may use and,
optionally, the model its branches run on. The round loop names no domain itself.

Types come from four places, later ones overriding earlier keys: the built-in ``general`` type,
the ``errands.agent.subtask_types`` entry-point group, ``ERRANDS_SUBTASK_TYPES`` (comma-separated
``module:attribute`` paths, each a ``SubtaskType`` or a list of them), and the types given to
``ErrandsPlugin(subtask_types=...)``. Work tools are usually made from typed Python functions with
``errands.tool`` (``errands/agent/tools.py``).

Workflows import this module (for ``SubtaskTypeInfo``): it stays free of I/O and heavy imports.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from errands.contracts.messages import ToolSpec
from errands.contracts.subtasks import SubtaskTypeInfo
from errands.errors import ConfigError

ToolFunction = Callable[[dict[str, Any]], "str | Awaitable[str]"]


@dataclass(frozen=True)
class WorkTool:
    """A tool a branch may call; it runs as an activity and returns text for the model."""

    spec: ToolSpec
    run: ToolFunction
    """Takes the model's arguments (a JSON object) and returns the text the model reads; an
    exception becomes an error result the model can react to."""
    function: Callable[..., Any] | None = None
    """The typed Python function behind a tool made with ``errands.tool``, to call directly
    (in your own tests, say); ``None`` for a tool written against ``run``."""

    async def __call__(self, arguments: dict[str, Any]) -> str:
        if inspect.iscoroutinefunction(self.run):
            result = await self.run(arguments)
        else:
            # A plain function runs in a thread: the activity keeps heartbeating meanwhile.
            result = await asyncio.to_thread(self.run, arguments)
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


SETTING = "ERRANDS_SUBTASK_TYPES"
ENTRY_POINTS = "errands.subtask_types"
"""The entry-point group installed packages declare their subtask types in (a public name: it
keeps its spelling wherever the module that reads it lives)."""
"""The setting every subtask-type loading error names."""


def load_types(
    paths: str | None = None, extra: Sequence[SubtaskType] = ()
) -> dict[str, SubtaskType]:
    """Every installed subtask type by key, in a stable order: ``general``, the entry points,
    ``paths`` (the value of ``ERRANDS_SUBTASK_TYPES``), then ``extra`` (a plugin's own).

    A type that cannot be loaded raises ``ConfigError`` naming the entry that is to blame.
    """
    found: dict[str, SubtaskType] = {GENERAL.key: GENERAL}
    for entry in sorted(entry_points(group=ENTRY_POINTS), key=lambda e: e.name):
        origin = f"the {ENTRY_POINTS} entry point {entry.name!r} ({entry.value})"
        try:
            loaded = entry.load()
        except Exception as error:  # noqa: BLE001 - any failure of a plugin's import is named
            raise ConfigError(
                f"{origin} does not load ({_one_line(error)}); fix or uninstall the package "
                "that declares it",
                setting=SETTING,
            ) from error
        _add(found, loaded, origin, fix="fix the package that declares it")
    for path in filter(None, (p.strip() for p in (paths or "").split(","))):
        origin = f"{SETTING} entry {path!r}"
        _add(found, _import_path(path, origin), origin, fix=f"fix {SETTING}")
    for item in unique_types(extra):
        found[item.key] = item
    return found


def _import_path(path: str, origin: str) -> object:
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigError(
            f"{origin} must look like 'package.module:attribute'; fix {SETTING}", setting=SETTING
        )
    try:
        loaded: object = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - an import that fails in any way is named
        raise ConfigError(
            f"{origin} does not import ({_one_line(error)}); fix {SETTING} or install the module",
            setting=SETTING,
        ) from error
    for name in attribute.split("."):
        if not hasattr(loaded, name):
            raise ConfigError(
                f"{origin}: module {module_name!r} has no attribute {attribute!r}; fix {SETTING}",
                setting=SETTING,
            )
        loaded = getattr(loaded, name)
    return loaded


def _add(found: dict[str, SubtaskType], loaded: object, origin: str, *, fix: str) -> None:
    items = loaded if isinstance(loaded, (list, tuple)) else [loaded]
    for item in items:
        if not isinstance(item, SubtaskType):
            raise ConfigError(
                f"{origin} is a {type(item).__name__}, not a SubtaskType or a list of them; {fix}",
                setting=SETTING,
            )
        found[item.key] = item


def unique_types(types: Sequence[SubtaskType]) -> list[SubtaskType]:
    """A plugin's own types, checked: the same key twice is a mistake, not an override."""
    seen: set[str] = set()
    for item in types:
        if not isinstance(item, SubtaskType):
            raise ConfigError(
                f"ErrandsPlugin(subtask_types=...) holds a {type(item).__name__}, not a "
                "SubtaskType; pass SubtaskType objects",
                setting=SETTING,
            )
        if item.key in seen:
            raise ConfigError(
                f"subtask type {item.key!r} is given twice to ErrandsPlugin(subtask_types=...); "
                "give each key once",
                setting=SETTING,
            )
        seen.add(item.key)
    return list(types)


def _one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())
