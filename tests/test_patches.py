"""The patch list in docs/operations.md is the code's: every ``workflow.patched`` and
``workflow.deprecate_patch`` under ``workflows/`` is listed with how it is asked and the release
that added it, and a patch listed as removed is asked nowhere."""

from __future__ import annotations

import ast
import re

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.fast

ASKED = ("patched", "deprecate_patch")


def asked_in_code() -> dict[str, str]:
    """Each patch id the workflows ask, and how (``patched`` or ``deprecate_patch``)."""
    trees = [ast.parse(path.read_text()) for path in sorted((ROOT / "workflows").glob("*.py"))]
    constants = {
        target.id: node.value.value
        for tree in trees
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value.value, str)
    }
    asked: dict[str, str] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ASKED
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "workflow"
            ):
                continue
            (arg,) = node.args
            if isinstance(arg, ast.Constant):
                patch = arg.value
            else:
                assert isinstance(arg, ast.Name), ast.dump(arg)
                patch = constants[arg.id]
            assert asked.setdefault(patch, node.func.attr) == node.func.attr, (
                f"{patch} is asked both as patched and as deprecate_patch"
            )
    return asked


def documented() -> list[list[str]]:
    """The rows of the patch table: patch, asked as, added in, what it guards."""
    text = (ROOT / "docs" / "operations.md").read_text()
    table = text.split("<!-- patches:", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines()[1:] if line.startswith("| `")]
    return [[cell.strip().strip("`") for cell in row.strip("|").split("|")] for row in rows]


def test_the_documented_patches_are_the_ones_the_code_asks() -> None:
    listed = {row[0]: row[1] for row in documented() if row[1] in ASKED}
    assert listed == asked_in_code()


def test_a_patch_listed_as_removed_is_asked_nowhere() -> None:
    removed = {row[0] for row in documented() if row[1].startswith("removed in ")}
    assert removed, "the retired patches are listed"
    assert not removed & set(asked_in_code())


def test_every_listed_patch_says_when_it_came_and_what_it_guards() -> None:
    for patch, asked, added, guards in documented():
        assert asked in ASKED or re.fullmatch(r"removed in \d+\.\d+\.\d+", asked), patch
        assert re.fullmatch(r"r\d+( \(\d+\.\d+\.\d+\))?|\d+\.\d+\.\d+", added), patch
        assert guards, patch
