"""How the workflow modules load: the sandbox imports a workflow's module afresh for every run it
starts, so that import must stay small and must not compile source each time."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import workflows
from errands.workers import cache_workflow_bytecode

ROOT = Path(__file__).resolve().parent.parent


def test_importing_one_workflow_leaves_the_others_unloaded() -> None:
    probe = (
        "import json, sys, workflows._subtask; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('workflows'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded = json.loads(out.stdout)
    assert "workflows._subtask" in loaded
    assert "workflows._task" not in loaded and "workflows._side" not in loaded


@pytest.mark.fast
def test_the_package_still_names_every_workflow() -> None:
    from workflows import SideQuestionWorkflow, SubtaskWorkflow, TaskWorkflow

    assert [c.__name__ for c in (TaskWorkflow, SubtaskWorkflow, SideQuestionWorkflow)] == [
        "TaskWorkflow",
        "SubtaskWorkflow",
        "SideQuestionWorkflow",
    ]
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = workflows.Nothing  # type: ignore[attr-defined]


@pytest.mark.fast
def test_the_worker_writes_the_workflow_modules_bytecode_even_when_python_would_not() -> None:
    source = Path(workflows.__file__).parent / "_side.py"
    cached = Path(importlib.util.cache_from_source(str(source)))
    cached.unlink(missing_ok=True)
    cache_workflow_bytecode()
    assert cached.is_file()
    assert cached.stat().st_mtime >= source.stat().st_mtime
