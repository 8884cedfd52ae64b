"""temporalio's workflow sandbox, with the code it runs compiled once and the SDK's own
bookkeeping read without entering it.

The sandbox runs a workflow by ``exec`` of short source strings in the run's own globals: one to
import the workflow, one to create it, one for every activation. ``exec`` of a string compiles it
each time; the strings are a handful, the same for every run of a workflow type, so they are
compiled once and every run executes the same code as before.

temporalio's instance also enters the sandbox (its import hooks and restricted builtins, put in
place and taken down again) for every payload the worker's converter passes in and out, three
passes each way, to ask the run which serialization and storage context the payload's command
has. The answer is the SDK's own bookkeeping (the run's pending activities, children and signals
by command sequence), computed by temporalio's own code: no workflow code runs, and it imports
nothing the SDK has not loaded already. So it is read directly, when that code is temporalio's
own (the stock runner class) and the sandbox shares temporalio's modules with the worker (passed
through, as by default); otherwise the question is asked inside the sandbox, as temporalio does.

The same visits go through the worker's external storage, an asyncio task each by default;
``visit_payloads_in_order`` makes them in order when the client has none (they do nothing).

Measured (2026-12-05) on a task whose branch calls one tool: 74 such questions and 11 activations
a task; compiling took 16 µs a string, entering the sandbox about 40 µs a question.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import lru_cache
from types import CodeType
from typing import Any, cast

from temporalio.converter import SerializationContext
from temporalio.converter._extstore import StorageDriverStoreContext
from temporalio.worker import (
    UnsandboxedWorkflowRunner,
    Worker,
    WorkerConfig,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowRunner,
)
from temporalio.worker._command_aware_visitor import CommandInfo
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.worker.workflow_sandbox._in_sandbox import InSandbox
from temporalio.worker.workflow_sandbox._runner import _Instance

__all__ = ["CompiledSandboxRunner", "visit_payloads_in_order"]

_SDK_STORAGE_CONCURRENCY = (
    inspect.signature(Worker).parameters["max_workflow_task_external_storage_concurrency"].default
)


@dataclass(frozen=True)
class CompiledSandboxRunner(SandboxedWorkflowRunner):
    """``SandboxedWorkflowRunner`` whose runs execute their sandbox code compiled once."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _CompiledInstance(det, self.runner_class, self.restrictions)


class _CompiledInstance(_Instance):
    def __init__(
        self,
        det: WorkflowInstanceDetails,
        runner_class: type[WorkflowRunner],
        restrictions: SandboxRestrictions,
    ) -> None:
        super().__init__(det, runner_class, restrictions)
        self._reads_directly = (
            runner_class is UnsandboxedWorkflowRunner
            and "temporalio" in restrictions.passthrough_modules
        )

    def _run_code(self, code: str, **extra_globals: Any) -> None:
        # `exec` takes the code object as it takes the string, in the same globals.
        super()._run_code(_compiled(code), **extra_globals)  # type: ignore[arg-type]

    def get_serialization_context(
        self, command_info: CommandInfo | None
    ) -> SerializationContext | None:
        if not self._reads_directly:
            return super().get_serialization_context(command_info)
        return self._in_sandbox().get_serialization_context(command_info)

    def get_external_store_context(
        self, command_info: CommandInfo | None
    ) -> StorageDriverStoreContext:
        if not self._reads_directly:
            return super().get_external_store_context(command_info)
        return self._in_sandbox().get_external_store_context(command_info)

    def _in_sandbox(self) -> InSandbox:
        """The run's own instance, created in its globals when the run was."""
        return cast(InSandbox, self.globals_and_locals["__temporal_in_sandbox"])


def visit_payloads_in_order(config: WorkerConfig) -> None:
    """With no external storage on the worker's client, its payload visits for it made one after
    another (``max_workflow_task_external_storage_concurrency=1``) instead of as an asyncio task
    each, the SDK's default: with nothing stored outside, each visit does nothing. A value other
    than the SDK's default was set by the user, and stays."""
    client = config.get("client")
    if (
        client is not None
        and client.data_converter.external_storage is None
        and config.get("max_workflow_task_external_storage_concurrency") == _SDK_STORAGE_CONCURRENCY
    ):
        config["max_workflow_task_external_storage_concurrency"] = 1


@lru_cache(maxsize=256)
def _compiled(code: str) -> CodeType:
    """``code`` compiled as ``exec`` compiles a string (same file name, so the same
    tracebacks). The strings are the sandbox's own: an import per workflow type, then the
    same few for every run; past the bound one is only compiled again."""
    return compile(code, "<string>", "exec")
