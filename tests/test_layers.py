"""The layers of errands, pinned: every import points down (docs/architecture.md draws them).

A module may import its own layer and the layers below it, never one above. Only the composition
modules (``errands.plugin``, ``errands.workers``) reach ``workflows`` and ``activities``;
``activities`` never reach ``workflows``; workflow code and the agent's rules import nothing that
does I/O; the payload models import only pydantic, ``temporalio.common``, the standard library
and ``errands.errors``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.fast

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("errors", ("errands.errors",)),
    ("contracts", ("errands.contracts",)),
    ("agent", ("errands.agent",)),
    ("adapters", ("errands.adapters", "errands.settings")),
    ("client", ("errands.client",)),
    ("protocols", ("errands.protocols",)),
    ("gateway", ("errands.gateway",)),
    ("composition", ("errands.plugin", "errands.workers")),
    ("cli", ("errands.cli",)),
    ("public face", ("errands",)),
]
"""Lowest first. ``errands`` itself is the package's ``__init__``: the public names, on top."""

OUTSIDE = {"workflows": "agent", "activities": "adapters", "worker": "composition"}
"""The layer of the library each top-level package of the repository stands on."""
APPLICATION = {
    # who may import each top-level package of the application
    "workflows": {"composition"},
    "activities": {"composition", "workflows"},  # workflows name activities as method references
    "worker": set(),
}
CONTRACTS_MAY_IMPORT = {"pydantic", "pydantic_core", "temporalio.common", "typing_extensions"}
"""Beyond the standard library and errands' own contracts and errors."""
NO_IO = {
    "anthropic",
    "httpx",
    "mcp",
    "openai",
    "psycopg",
    "requests",
    "socket",
    "sqlite3",
    "subprocess",
    "temporalio.client",
    "temporalio.worker",
}
"""What neither workflow code nor the agent's pure rules may import."""


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (rank, len(prefix))
    return None if best is None else best[0]


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """Every module ``path`` imports at run time. ``from errands import ids`` imports the module
    ``errands.ids``, not the package's face. The body of ``if TYPE_CHECKING:`` only names types
    for annotations (``TaskFailed.result``) and loads nothing, so it is not counted; its ``else``
    is."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for statement in node.body
        for inner in ast.walk(statement)
    }
    me = module_name(path, root)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            folder = root.joinpath(*base.split(".")) if base else root
            for alias in node.names:
                is_module = (folder / alias.name).is_dir() or (
                    folder / f"{alias.name}.py"
                ).is_file()
                found.append((node.lineno, f"{base}.{alias.name}" if is_module else base))
    return found


def _third_party(target: str) -> bool:
    head = target.split(".")[0]
    return head not in sys.stdlib_module_names and head not in ("errands", *OUTSIDE)


def _matches(target: str, names: set[str]) -> bool:
    return any(target == n or target.startswith(n + ".") for n in names)


def wrong_imports(files: list[Path], root: Path = ROOT) -> list[str]:
    names = [name for name, _ in LAYERS]
    wrong = []
    for path in files:
        me = module_name(path, root)
        top = me.split(".")[0]
        mine = layer_of(me) if top == "errands" else names.index(OUTSIDE[top])
        assert mine is not None, f"{me} belongs to no layer: add it to LAYERS"
        mine_name = names[mine] if top == "errands" else top
        for line, target in imports_of(path, root):
            head = target.split(".")[0]
            where = f"{path.relative_to(root)}:{line} imports {target}"
            if head in APPLICATION and head != top:
                if mine_name not in APPLICATION[head]:
                    wrong.append(f"{where}: {mine_name} may not import {head}")
                continue
            if mine_name == "contracts" and _third_party(target):
                if not _matches(target, CONTRACTS_MAY_IMPORT):
                    wrong.append(f"{where}: contracts import only pydantic and temporalio.common")
            if mine_name in ("agent", "workflows") and _matches(target, NO_IO):
                wrong.append(f"{where}: {mine_name} does no I/O")
            theirs = layer_of(target) if head == "errands" else None
            if theirs is not None and theirs > mine:
                wrong.append(f"{where}: {mine_name} may not import {names[theirs]}")
    return wrong


def source_files(root: Path = ROOT) -> list[Path]:
    roots = [root / "errands", root / "workflows", root / "activities", root / "worker.py"]
    return sorted(p for r in roots for p in ([r] if r.is_file() else r.rglob("*.py")))


def test_every_import_points_down_the_layers() -> None:
    assert wrong_imports(source_files()) == []


def _probe(root: Path, where: str, text: str) -> list[str]:
    path = root / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return wrong_imports([path], root)


def test_the_layer_rule_catches_an_import_that_points_up(tmp_path: Path) -> None:
    found = _probe(
        tmp_path,
        "errands/contracts/probe.py",
        "from errands.agent import prompts\nimport workflows\nimport httpx\n",
    )
    assert len(found) == 3, found
    assert "contracts may not import agent" in found[0]
    assert "contracts may not import workflows" in found[1]
    assert "contracts import only pydantic" in found[2]


def test_the_layer_rule_keeps_activities_off_workflows_and_io_out_of_the_rules(
    tmp_path: Path,
) -> None:
    assert (
        "activities may not import workflows"
        in _probe(tmp_path, "activities/probe.py", "from workflows import _loop\n")[0]
    )
    assert (
        "workflows does no I/O"
        in _probe(tmp_path, "workflows/probe.py", "from temporalio.client import Client\n")[0]
    )
    assert "agent does no I/O" in _probe(tmp_path, "errands/agent/probe.py", "import openai\n")[0]
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import workflows\n"
    assert _probe(tmp_path, "errands/contracts/typed.py", typed) == []
    otherwise = typed + "else:\n    import workflows\n"
    assert len(_probe(tmp_path, "errands/contracts/otherwise.py", otherwise)) == 1
