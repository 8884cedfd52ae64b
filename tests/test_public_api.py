"""errands as a library: the public names, one home for every exception, and frontends that
reach Temporal only through ``errands.Client``."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import errands
from errands import errors
from tests.conftest import ROOT

PUBLIC = [
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
CODE = [ROOT / "errands", ROOT / "workflows", ROOT / "activities", ROOT / "worker.py"]


def python_files(*roots: Path) -> list[Path]:
    return sorted(
        path for root in roots for path in ([root] if root.is_file() else root.rglob("*.py"))
    )


@pytest.mark.fast
def test_the_public_api_is_pinned() -> None:
    assert errands.__all__ == PUBLIC
    for name in PUBLIC:
        assert getattr(errands, name) is not None, name


def test_importing_errands_loads_neither_the_temporal_client_nor_the_provider_sdks() -> None:
    """Workflow code imports errands' modules; the package itself must stay light."""
    probe = "import sys, errands; print(sorted(m for m in ('openai', 'anthropic', "
    probe += "'temporalio.client', 'errands.client') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.fast
def test_every_errands_exception_class_lives_in_errands_errors() -> None:
    known = {"Exception", "BaseException", "ValueError", "RuntimeError", "TypeError"}
    known |= {name for name in dir(errors) if isinstance(getattr(errors, name), type)}
    elsewhere = []
    for path in python_files(*CODE):
        if path == ROOT / "errands" / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases}
                if bases & known or any(b.endswith(("Error", "Exception")) for b in bases):
                    elsewhere.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert elsewhere == []


@pytest.mark.fast
def test_the_exception_tree_splits_by_blame() -> None:
    for cls in (errors.TemporalUnreachable, errors.StoreUnavailable, errors.NoWorker):
        assert issubclass(cls, errors.Unavailable)
    for cls in (errors.TaskNotFound, errors.TaskEnded, errors.AnswerRejected):
        assert issubclass(cls, errors.Refused)
    assert issubclass(errors.TaskFailed, errors.Failed)
    every = [getattr(errors, n) for n in errors.__all__ if isinstance(getattr(errors, n), type)]
    assert all(issubclass(cls, errors.ErrandsError) for cls in every)


@pytest.mark.fast
def test_the_failure_kinds_are_one_list_for_results_providers_and_retries() -> None:
    from errands.contracts.workflows import TaskError

    kinds = TaskError.model_fields["kind"].annotation
    assert set(errors.FAILURE_KINDS) == set(kinds.__args__)  # type: ignore[union-attr]
    assert set(errors.PROVIDER_KINDS) <= set(errors.FAILURE_KINDS)
    assert set(errors.NON_RECOVERABLE) <= set(errors.PROVIDER_KINDS)
    assert "transient" not in errors.NON_RECOVERABLE


@pytest.mark.fast
def test_nothing_under_the_cli_or_the_gateway_imports_the_temporal_client() -> None:
    offenders = []
    for path in python_files(ROOT / "errands" / "cli", ROOT / "errands" / "gateway"):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            if any(n == "temporalio.client" or n.startswith("temporalio.client.") for n in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


@pytest.mark.fast
def test_the_distribution_lists_every_package_of_the_source_tree() -> None:
    # setuptools packs only the packages pyproject.toml names: one left out is missing from a
    # wheel (an editable install maps the directories, so nothing else would notice).
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("errands", "workflows", "activities")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found == listed


@pytest.mark.fast
def test_names_outside_the_code_keep_their_spelling_wherever_the_code_moves() -> None:
    # Installed packages declare subtask types in this entry-point group, and operators filter
    # logs by these logger names: the package's layout is not theirs to follow.
    import logging

    from errands.agent import subtask_types

    assert subtask_types.ENTRY_POINTS == "errands.subtask_types"
    import errands.adapters.providers  # noqa: F401  (creates its logger)
    import errands.adapters.telemetry  # noqa: F401

    loggers = set(logging.Logger.manager.loggerDict)
    assert {"errands.providers", "errands.telemetry"} <= loggers


@pytest.mark.fast
def test_the_package_says_the_version_the_distribution_has() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert errands.__version__ == pyproject["project"]["version"]
