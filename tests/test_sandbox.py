"""errands' workflow sandbox (errands.adapters.sandbox): temporalio's, its code compiled once.

It must still be the sandbox: a run's globals its own, a forbidden call trapped; the context each
payload is converted in, read without entering it, must be the one read inside. And the plugin's
worker must use it, with the converter's payload visits made in order when nothing is stored
outside Temporal.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import temporalio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.converter import (
    ActivitySerializationContext,
    SerializationContext,
    WorkflowSerializationContext,
)
from temporalio.converter._extstore import StorageDriverStoreContext
from temporalio.worker import (
    UnsandboxedWorkflowRunner,
    Worker,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowRunner,
)
from temporalio.worker._command_aware_visitor import CommandInfo
from temporalio.worker.workflow_sandbox import SandboxRestrictions
from temporalio.worker.workflow_sandbox._runner import _Instance

from errands.adapters import sandbox
from errands.adapters.devserver import DevServer
from errands.adapters.sandbox import CompiledSandboxRunner, _CompiledInstance
from errands.plugin import ErrandsPlugin
from errands.settings import Settings
from errands.workers import build_worker
from tests.helpers import eventually
from tests.sandbox_workflows import RUNS, Clock, Counter, Listener, OwnRunner, Parent, echo


def runner() -> CompiledSandboxRunner:
    # This module is imported afresh in each run, so its globals are the run's own.
    return CompiledSandboxRunner(restrictions=SandboxRestrictions.default)


async def test_each_run_has_its_own_globals_and_the_code_is_compiled_once(
    dev_server: DevServer,
) -> None:
    client = await Client.connect(dev_server.address)
    queue = f"sandbox-{uuid.uuid4().hex[:6]}"
    sandbox._compiled.cache_clear()
    async with Worker(client, task_queue=queue, workflows=[Counter], workflow_runner=runner()):
        for name in ("first", "second", "third"):
            counted = await client.execute_workflow(
                Counter.run, name, id=f"{queue}-{name}", task_queue=queue
            )
            assert counted == 1, "a run saw another run's module state"
    cached = sandbox._compiled.cache_info()
    # Import, create, activate: compiled at the first run, reused by the others.
    assert cached.misses >= 3
    assert cached.hits > cached.misses
    assert RUNS == [], "the sandbox ran the workflow in this process's own module"


async def test_a_forbidden_call_is_still_trapped(dev_server: DevServer) -> None:
    client = await Client.connect(dev_server.address)
    queue = f"sandbox-{uuid.uuid4().hex[:6]}"
    async with Worker(client, task_queue=queue, workflows=[Clock], workflow_runner=runner()):
        handle = await client.start_workflow(
            Clock.run,
            id=f"{queue}-clock",
            task_queue=queue,
            execution_timeout=timedelta(seconds=30),
        )

        async def failed_task() -> str | None:
            async for event in handle.fetch_history_events():
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                    return event.workflow_task_failed_event_attributes.failure.message
            return None

        message = await eventually(failed_task, "the workflow task to fail")
        assert "datetime.datetime.now" in message
        await handle.terminate("test over")
        with pytest.raises(WorkflowFailureError):
            await handle.result()


READ_DIRECTLY: set[bool] = set()
"""Whether the runs read their answers directly (not inside the sandbox)."""
ANSWERS: list[tuple[object, object]] = []
"""Each context question a run was asked: (its answer, the answer from inside the sandbox)."""


class Checking(CompiledSandboxRunner):
    """The compiled sandbox, asking temporalio's own instance each question too."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _Checked(det, self.runner_class, self.restrictions)


class _Checked(_CompiledInstance):
    def get_serialization_context(
        self, command_info: CommandInfo | None
    ) -> SerializationContext | None:
        READ_DIRECTLY.add(self._reads_directly)
        ours = super().get_serialization_context(command_info)
        ANSWERS.append((ours, _Instance.get_serialization_context(self, command_info)))
        return ours

    def get_external_store_context(
        self, command_info: CommandInfo | None
    ) -> StorageDriverStoreContext:
        ours = super().get_external_store_context(command_info)
        ANSWERS.append((ours, _Instance.get_external_store_context(self, command_info)))
        return ours


@pytest.mark.parametrize(
    ("runner_class", "directly"), [(UnsandboxedWorkflowRunner, True), (OwnRunner, False)]
)
async def test_a_payloads_context_is_the_one_the_sandbox_would_give(
    dev_server: DevServer, runner_class: type[WorkflowRunner], directly: bool
) -> None:
    client = await Client.connect(dev_server.address)
    queue = f"sandbox-{uuid.uuid4().hex[:6]}"
    ANSWERS.clear()
    READ_DIRECTLY.clear()
    async with Worker(
        client,
        task_queue=queue,
        workflows=[Parent, Listener],
        activities=[echo],
        workflow_runner=Checking(
            restrictions=SandboxRestrictions.default, runner_class=runner_class
        ),
    ):
        heard = await client.execute_workflow(Parent.run, id=f"{queue}-parent", task_queue=queue)
    assert heard == "hello"
    mismatched = [(ours, theirs) for ours, theirs in ANSWERS if ours != theirs]
    assert mismatched == []
    contexts = [ours for ours, _ in ANSWERS]
    # The activity's input, the child's, the signal's: each asked with its own context.
    assert any(isinstance(c, ActivitySerializationContext) for c in contexts)
    assert any(
        isinstance(c, WorkflowSerializationContext) and c.workflow_id.endswith("-child")
        for c in contexts
    )
    assert any(
        isinstance(c, StorageDriverStoreContext)
        and c.target is not None
        and c.target.id.endswith("-child")
        for c in contexts
    )
    # A runner class of the user's own runs its own code for them, inside the sandbox.
    assert READ_DIRECTLY == {directly}


async def test_the_plugins_worker_runs_compiled_and_visits_payloads_in_order(
    dev_server: DevServer, settings: Settings
) -> None:
    mine = settings.model_copy(update={"task_queue": f"sandbox-{uuid.uuid4().hex[:6]}"})
    client = await Client.connect(dev_server.address, plugins=[ErrandsPlugin(mine)])
    config = build_worker(client, mine).config(active_config=True)
    assert isinstance(config.get("workflow_runner"), CompiledSandboxRunner)
    assert config.get("max_workflow_task_external_storage_concurrency") == 1
    # A value the user set is theirs.
    other = mine.model_copy(update={"task_queue": f"{mine.task_queue}-theirs"})
    theirs = build_worker(client, other, max_workflow_task_external_storage_concurrency=5)
    kept = theirs.config(active_config=True).get("max_workflow_task_external_storage_concurrency")
    assert kept == 5


@pytest.mark.fast
def test_errands_sandbox_was_checked_against_this_temporalio() -> None:
    # errands.adapters.sandbox subclasses temporalio's private sandbox instance and reads the
    # SDK's bookkeeping directly: a new temporalio must be checked against it (and the replay
    # tests run in both runners), then this version moved.
    assert temporalio.__version__ == "1.35.0", "re-check errands.adapters.sandbox"
