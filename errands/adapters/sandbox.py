"""temporalio's workflow sandbox, with the code it runs in each run's globals compiled once.

The sandbox runs a workflow by ``exec`` of short source strings in the run's own globals: one to
import the workflow, one to create it, one for every activation, and one for every payload the
worker's converter passes in and out (three passes each way, each asking the workflow for the
payload's serialization context). ``exec`` of a string compiles it each time: measured, 74 of
these a branch-with-a-tool task, 16 µs of compiling each. The strings are a handful, the same for
every run of a workflow type; compiled once, every run executes the same code as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import CodeType
from typing import Any

from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox._runner import _Instance

__all__ = ["CompiledSandboxRunner"]


@dataclass(frozen=True)
class CompiledSandboxRunner(SandboxedWorkflowRunner):
    """``SandboxedWorkflowRunner`` whose runs execute their sandbox code compiled once."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _CompiledInstance(det, self.runner_class, self.restrictions)


class _CompiledInstance(_Instance):
    def _run_code(self, code: str, **extra_globals: Any) -> None:
        # `exec` takes the code object as it takes the string, in the same globals.
        super()._run_code(_compiled(code), **extra_globals)  # type: ignore[arg-type]


@lru_cache(maxsize=256)
def _compiled(code: str) -> CodeType:
    """``code`` compiled as ``exec`` compiles a string (same file name, so the same
    tracebacks). The strings are the sandbox's own, a few per workflow type."""
    return compile(code, "<string>", "exec")
