"""The house's census: how many modules sit flat at the top of ``errands/``, which production
modules pass 450 lines, and which workflow or activity functions pass 60 lines.

``make census`` prints it; tests/test_census.py holds the limits.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION = ("errands", "workflows", "activities", "worker.py")
MODULE_LINES = 450
FUNCTION_LINES = 60
FLAT_MODULES = 10


@dataclass(frozen=True)
class Long:
    where: str
    lines: int


def production_files() -> list[Path]:
    found: list[Path] = []
    for name in PRODUCTION:
        path = ROOT / name
        found += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return found


def flat_modules() -> list[str]:
    """The ``.py`` files directly under ``errands/`` (packages are the layers)."""
    return sorted(p.name for p in (ROOT / "errands").glob("*.py"))


def long_modules(limit: int = MODULE_LINES) -> list[Long]:
    sized = [(p, len(p.read_text().splitlines())) for p in production_files()]
    return [Long(str(p.relative_to(ROOT)), n) for p, n in sized if n > limit]


def long_functions(limit: int = FUNCTION_LINES) -> list[Long]:
    """Functions and methods in ``workflows/`` and ``activities/`` longer than ``limit`` lines
    (decorators and docstrings included: what a reader scrolls through)."""
    found: list[Long] = []
    for path in production_files():
        if path.relative_to(ROOT).parts[0] not in ("workflows", "activities"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - start + 1
                if lines > limit:
                    where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
                    found.append(Long(where, lines))
    return found


def layer_sizes() -> dict[str, tuple[int, int]]:
    """Modules and lines per top-level part of the package (and the application's folders)."""
    sizes: dict[str, tuple[int, int]] = {}
    for path in production_files():
        parts = path.relative_to(ROOT).parts
        key = "/".join(parts[:2]) if parts[0] == "errands" and len(parts) > 2 else parts[0]
        if parts[0] == "errands" and len(parts) == 2:
            key = "errands/ (flat)"
        modules, lines = sizes.get(key, (0, 0))
        sizes[key] = (modules + 1, lines + len(path.read_text().splitlines()))
    return sizes


def report() -> str:
    out = ["errands' census", ""]
    for key, (modules, lines) in sorted(layer_sizes().items()):
        out.append(f"  {key:<24} {modules:>3} modules {lines:>6} lines")
    flat = flat_modules()
    out += [
        "",
        f"flat at the top of errands/: {len(flat)} (at most {FLAT_MODULES}): {', '.join(flat)}",
    ]
    modules = long_modules()
    out.append(f"production modules over {MODULE_LINES} lines: {len(modules)}")
    out += [f"  {m.where} {m.lines}" for m in modules]
    functions = long_functions()
    out.append(f"workflow and activity functions over {FUNCTION_LINES} lines: {len(functions)}")
    out += [f"  {f.where} {f.lines}" for f in functions]
    return "\n".join(out)


if __name__ == "__main__":
    print(report())
