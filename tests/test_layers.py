"""The layers of errands, pinned: every import points down (docs/architecture.md draws them).

A module may import its own layer and the layers below it, never one above. Only the composition
modules (``errands.plugin``, ``errands.workers``) reach ``workflows`` and ``activities``; workflow
code reads only the contracts and the agent's rules; the payload models import no rule.
"""

from __future__ import annotations

import ast
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
    ("gateway", ("errands.gateway",)),
    ("composition", ("errands.plugin", "errands.workers")),
    ("cli", ("errands.cli",)),
    ("public face", ("errands",)),
]
"""Lowest first. ``errands`` itself is the package's ``__init__``: the public names, on top."""

OUTSIDE = {
    # what the top-level packages of the repository may import of the library, by layer
    "workflows": "agent",
    "activities": "adapters",
    "worker": "composition",
}
APPLICATION = ("workflows", "activities", "worker")
"""Modules of the repository's top level that only the composition layer imports."""


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (rank, len(prefix))
    return None if best is None else best[0]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports at run time. ``from errands import ids`` imports the module
    ``errands.ids``, not the package's face. An import under ``if TYPE_CHECKING:`` only names a
    type for an annotation (``TaskFailed.result``) and loads nothing, so it is not counted."""
    found: list[tuple[int, str]] = []
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for inner in ast.walk(node)
    }
    parent = path.parent if path.parent != ROOT else None
    package = (
        module_name(path) if path.name == "__init__.py" else module_name(parent) if parent else ""
    )
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level and package:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            folder = ROOT.joinpath(*base.split(".")) if base else ROOT
            for alias in node.names:
                sub = folder / alias.name
                is_module = sub.is_dir() or (folder / f"{alias.name}.py").is_file()
                found.append((node.lineno, f"{base}.{alias.name}" if is_module else base))
    return found


def wrong_imports(files: list[Path]) -> list[str]:
    names = [name for name, _ in LAYERS]
    wrong = []
    for path in files:
        me = module_name(path)
        top = me.split(".")[0]
        mine = layer_of(me) if top == "errands" else names.index(OUTSIDE[top])
        assert mine is not None, f"{me} belongs to no layer: add it to LAYERS"
        for line, target in imports_of(path):
            head = target.split(".")[0]
            where = f"{path.relative_to(ROOT)}:{line} imports {target}"
            if head in APPLICATION:
                if top == "errands" and names[mine] != "composition":
                    wrong.append(f"{where} (only errands.plugin and errands.workers may)")
                continue
            theirs = layer_of(target) if head == "errands" else None
            if theirs is not None and theirs > mine:
                wrong.append(f"{where}: {names[mine]} may not import {names[theirs]}")
    return wrong


def source_files() -> list[Path]:
    roots = [ROOT / "errands", ROOT / "workflows", ROOT / "activities", ROOT / "worker.py"]
    return sorted(p for r in roots for p in ([r] if r.is_file() else r.rglob("*.py")))


def test_every_import_points_down_the_layers() -> None:
    assert wrong_imports(source_files()) == []


def test_the_layer_rule_catches_an_import_that_points_up(tmp_path: Path) -> None:
    # A payload model that imports a rule, and a rule that imports the workflows: both refused.
    bad = ROOT / "errands" / "contracts" / "_layer_probe.py"
    bad.write_text("from errands.agent import prompts\nimport workflows\n")
    try:
        found = wrong_imports([bad])
    finally:
        bad.unlink()
    assert len(found) == 2, found
    assert "contracts may not import agent" in found[0]
    assert "only errands.plugin and errands.workers may" in found[1]
