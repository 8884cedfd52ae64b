"""Worker Versioning (SPEC §9): a task runs pinned to the worker build that started it and moves
to a new current build by continuing as new, between rounds or at once when woken while parked
on a question, so a change to the round logic with no ``patched`` guard only ever runs new runs;
``errands upgrade --from`` wakes what is left on the old build, which then drains.

The new build is real different code: a copy of this checkout whose round loop takes one more
step per round (a durable timer) with no guard, run as its own worker process. Replaying a v1
history with it would fail as nondeterministic.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.deployment.v1 import WorkerDeploymentVersion
from temporalio.api.enums.v1 import EventType, VersionDrainageStatus
from temporalio.api.enums.v1 import VersioningBehavior as VersioningBehaviorProto
from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentVersionRequest
from temporalio.client import Client
from temporalio.common import VersioningBehavior
from temporalio.common import WorkerDeploymentVersion as CommonVersion
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker, WorkerDeploymentConfig

from errands.adapters.devserver import DevServer, free_port, temporal_cli_path
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.client import Client as ErrandsClient
from errands.contracts.workflows import TaskResult
from errands.plugin import ErrandsPlugin
from errands.settings import Settings
from errands.workers import build_worker, warn_unless_routed
from tests.conftest import ROOT, kill_worker, read_stderr_until, run_cli, running_cli, worker_env
from tests.helpers import DATABASE, ask, delegate, eventually, final, start_task, until_waiting

DEPLOYMENT = "errands-test"
V2_STEP = "v2: one more step each round"
"""The summary of the timer the v2 build's round loop starts before each round."""

DRAINAGE = {
    "matching.wv.VersionDrainageStatusRefreshInterval": '"1s"',
    "matching.wv.VersionDrainageStatusVisibilityGracePeriod": '"1s"',
}
"""So the server reports a drained version within seconds (the defaults are minutes)."""


@pytest.fixture(scope="module")
def versioned_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    directory = tmp_path_factory.mktemp("versioning")
    server = DevServer(
        port=free_port(),
        ui_port=None,
        db_file=str(directory / "temporal.db"),
        log_file=str(directory / "temporal.log"),
        dynamic_config=DRAINAGE,
    )
    with server:
        yield server


def v2_checkout(directory: Path) -> Path:
    """This checkout's code with one unguarded change to the round loop: a timer before each
    round's decision."""
    for package in ("errands", "workflows", "activities"):
        shutil.copytree(
            ROOT / package, directory / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "worker.py", directory / "worker.py")
    loop = directory / "workflows" / "_loop.py"
    code = loop.read_text()
    anchor = "                await self._continue_as_new_if_due()\n"
    assert code.count(anchor) == 1, "the round loop changed: move the v2 change"
    change = f"            await workflow.sleep(timedelta(milliseconds=1), summary={V2_STEP!r})\n"
    loop.write_text(code.replace(anchor, anchor + change))
    return directory


@asynccontextmanager
async def v2_worker(env: dict[str, str], checkout: Path) -> AsyncIterator[None]:
    """`python worker.py` of the v2 checkout, in its own process (killed -9 at the end)."""
    log = (checkout / "worker.log").open("wb")
    worker = subprocess.Popen(
        [sys.executable, "worker.py"],
        cwd=checkout,
        env={**env, "PYTHONPATH": str(checkout), "ERRANDS_BUILD_ID": "v2"},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield
    finally:
        kill_worker(worker)
        log.close()


REPLAY = """
import asyncio, os, sys
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from errands.plugin import WORKFLOWS

async def main():
    with open(sys.argv[2]) as recorded:
        history = WorkflowHistory.from_json(sys.argv[1], recorded.read())
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    failure = result.replay_failure
    print(type(failure).__name__ if failure else "replayed", flush=True)

asyncio.run(main())
os._exit(0)  # no interpreter teardown (temporalio/sdk-python#300)
"""
"""Replays the history at ``argv[2]`` with the workflows of the checkout it runs in."""


async def replayed_by(checkout: Path, workflow_id: str, recorded: Path) -> str:
    """What replaying the history in ``recorded`` with ``checkout``'s code gives: "replayed",
    or the failure's type."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", REPLAY, workflow_id, str(recorded),
        cwd=checkout,
        env={**os.environ, "PYTHONPATH": str(checkout)},
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    return out.decode().splitlines()[-1]  # after the SDK core's own log lines


async def temporal_cli(server: DevServer, *args: str) -> int:
    """The Temporal CLI against ``server``, as an operator runs it: its exit code."""
    proc = await asyncio.create_subprocess_exec(
        temporal_cli_path(), *args,
        "--address", server.address, "--command-timeout", "10s",
        "--disable-config-file", "--disable-config-env",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    return await asyncio.wait_for(proc.wait(), 30)


async def make_current(server: DevServer, build: str, deployment: str = DEPLOYMENT) -> None:
    """`temporal worker deployment set-current-version`, once the build's workers poll."""

    async def made() -> bool:
        code = await temporal_cli(
            server,
            "worker", "deployment", "set-current-version",
            "--deployment-name", deployment, "--build-id", build, "--yes",
        )  # fmt: skip
        return code == 0

    await eventually(made, f"{deployment}:{build} to become current", interval=0.5)


async def runs_of(client: Client, workflow_id: str, first_run_id: str) -> list[list[Any]]:
    """The history events of each run of ``workflow_id``, first to latest."""
    runs, run_id = [], first_run_id
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        runs.append(list(history.events))
        run_id = ""
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                run_id = (
                    event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                )
    return runs


def builds(events: list[Any]) -> set[str]:
    """The builds whose workers completed the run's workflow tasks."""
    return {
        e.workflow_task_completed_event_attributes.deployment_version.build_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    }


def v2_steps(events: list[Any]) -> int:
    """How many of the v2 build's extra timers the run started."""
    return sum(
        1
        for e in events
        if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
        and V2_STEP.encode() in e.user_metadata.summary.data
    )


def failed_tasks(runs: list[list[Any]]) -> list[Any]:
    return [
        e
        for events in runs
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]


async def drainage(client: Client, build: str) -> int:
    request = DescribeWorkerDeploymentVersionRequest(
        namespace=client.namespace,
        deployment_version=WorkerDeploymentVersion(deployment_name=DEPLOYMENT, build_id=build),
    )
    described = await client.workflow_service.describe_worker_deployment_version(request)
    return described.worker_deployment_version_info.drainage_info.status


async def test_tasks_move_to_the_new_build_without_patches_and_the_old_build_drains(
    versioned_server: DevServer,
    model_server: ScriptedModelServer,
    scripted: ScriptedModelServer,
    settings: Settings,
    store: SessionStore,
    database_url: str,
    tmp_path: Path,
) -> None:
    queue = f"versioned-{uuid.uuid4().hex[:6]}"
    v1 = settings.model_copy(
        update={"task_queue": queue, "deployment_name": DEPLOYMENT, "build_id": "v1"}
    )
    env = {
        **worker_env(versioned_server, queue, database_url, model_server),
        "ERRANDS_DEPLOYMENT_NAME": DEPLOYMENT,
        "ERRANDS_BUILD_ID": "v1",
    }
    checkout = v2_checkout(tmp_path / "v2")
    temporal = await Client.connect(
        versioned_server.address, data_converter=pydantic_data_converter
    )
    tasks = ErrandsClient(temporal, v1, store=store)
    scripted.script(
        "gpt-t1", ask(DATABASE), delegate("look it up"), Reply(text="found"), final("T1 done")
    )
    scripted.script("gpt-t2", final("T2 done"))
    scripted.script("gpt-t3", ask(DATABASE), final("T3 done"))
    router = ModelRouter(v1)
    async with build_worker(temporal, v1, store=store, router=router):
        await make_current(versioned_server, "v1")
        t1 = await start_task(temporal, queue, "first", model="openai:gpt-t1")
        t3 = await start_task(temporal, queue, "third", model="openai:gpt-t3")
        await until_waiting(t1)
        pending = (await until_waiting(t3)).pending_question
        assert pending is not None

        async with v2_worker(env, checkout):
            await make_current(versioned_server, "v2")

            # The dry run lists both parked tasks, and wakes neither.
            async def listed() -> list[dict[str, Any]] | None:
                result = await run_cli(env, "upgrade", "--from", "v1", "--dry-run", "--json")
                assert result.code == 0, result.stderr
                found = result.json()
                return found if {t["task_id"] for t in found} == {t1.id, t3.id} else None

            for task in await eventually(listed, "the dry run to list T1 and T3"):
                assert task["waiting_for_user"] and not task["woken"]
                assert task["version"] == f"{DEPLOYMENT}:v1"

            # T1, answered, finishes its round on v1 (its branch too), then moves to v2 at the
            # round boundary and replies from there.
            await tasks.task(t1.id).answer({"q1": ["SQLite"]})
            result = await temporal.get_workflow_handle(t1.id, result_type=TaskResult).result()
            assert result.reply == "T1 done"
            runs = await runs_of(temporal, t1.id, t1.first_execution_run_id or "")
            assert [builds(events) for events in runs] == [{"v1"}, {"v2"}]
            assert [v2_steps(events) for events in runs] == [0, 1]
            assert failed_tasks(runs) == []
            branch = await temporal.get_workflow_handle(f"{t1.id}/r0/b1").fetch_history()
            assert builds(list(branch.events)) == {"v1"}
            # The change is one a patch would have had to guard: v2 cannot replay T1's v1 run.
            first = await temporal.get_workflow_handle(
                t1.id, run_id=t1.first_execution_run_id
            ).fetch_history()
            recorded = tmp_path / "t1-first-run.json"
            recorded.write_text(first.to_json())
            assert await replayed_by(checkout, t1.id, recorded) == "NondeterminismError"
            assert await replayed_by(ROOT, t1.id, recorded) == "replayed"

            # A new task starts on v2.
            t2 = await start_task(temporal, queue, "second", model="openai:gpt-t2")
            assert (await t2.result()).reply == "T2 done"
            (only_run,) = await runs_of(temporal, t2.id, t2.first_execution_run_id or "")
            assert builds(only_run) == {"v2"} and v2_steps(only_run) == 1

            # T3 would wait on v1 until answered: the upgrade wakes it and it moves at once,
            # its question still pending.
            woken = await run_cli(env, "upgrade", "--from", "v1")
            assert woken.code == 0, woken.stderr
            assert woken.stdout.splitlines() == [
                f"{t3.id}: {DEPLOYMENT}:v1, woken: moves now if it waits on a question, after "
                "the verdict on an approval"
            ]

            async def moved() -> bool:
                runs = await runs_of(temporal, t3.id, t3.first_execution_run_id or "")
                return len(runs) == 2 and builds(runs[1]) == {"v2"}

            await eventually(moved, "T3 to move to v2")
            still = await until_waiting(t3)
            assert still.pending_question == pending
            # Auto-upgrade was for the new run's first workflow task only: it is pinned again.
            info = (await t3.describe()).raw_description.workflow_execution_info.versioning_info
            assert info.behavior == VersioningBehaviorProto.VERSIONING_BEHAVIOR_PINNED
            assert info.deployment_version.build_id == "v2"
            await tasks.task(t3.id).answer({"q1": ["PostgreSQL"]})
            result = await temporal.get_workflow_handle(t3.id, result_type=TaskResult).result()
            assert result.reply == "T3 done"
            runs = await runs_of(temporal, t3.id, t3.first_execution_run_id or "")
            assert [builds(events) for events in runs] == [{"v1"}, {"v2"}]
            assert failed_tasks(runs) == []

            # Draining the current build would move nothing: refused.
            refused = await run_cli(env, "upgrade", "--from", "v2")
            assert refused.code == 2
            assert refused.stderr.count("\n") == 1
            assert "build v2 is still the current version of worker deployment" in refused.stderr
            assert "set-current-version" in refused.stderr

            # Nothing runs on v1 any more: visibility counts none, the deployment says drained.
            on_v1 = (
                f"TemporalWorkerDeploymentVersion = '{DEPLOYMENT}:v1' "
                "AND ExecutionStatus = 'Running'"
            )

            async def none_on_v1() -> bool:
                return (await temporal.count_workflows(on_v1)).count == 0

            await eventually(none_on_v1, "no running workflow on v1")

            async def drained() -> bool:
                status = await drainage(temporal, "v1")
                return status == VersionDrainageStatus.VERSION_DRAINAGE_STATUS_DRAINED

            await eventually(drained, "v1 to be reported drained")
    await router.aclose()


@pytest.mark.parametrize(
    ("arguments", "variables", "says"),
    [
        (
            ["--from", "v1;drop"],
            {"ERRANDS_DEPLOYMENT_NAME": DEPLOYMENT, "ERRANDS_BUILD_ID": "v2"},
            "is not a build id",
        ),
        (["--from", "v1"], {}, "set ERRANDS_DEPLOYMENT_NAME"),
        (["--from", "v1", "--deployment", "a b"], {}, "is not a deployment name"),
        (["--from", "v1", "--deployment", "errands.prod"], {}, "is not a deployment name"),
    ],
    ids=["bad-build-id", "no-deployment", "bad-deployment", "dotted-deployment"],
)
async def test_upgrade_refuses_bad_input_in_one_line_before_connecting(
    arguments: list[str], variables: dict[str, str], says: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ERRANDS_", "TEMPORAL_"))}
    # Nothing listens there: a refusal that came after connecting would say so instead.
    env.update(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}", PYTHONPATH=str(ROOT), **variables)
    result = await run_cli(env, "upgrade", *arguments)
    assert result.code == 2
    assert result.stderr.count("\n") == 1 and says in result.stderr
    assert result.stdout == ""


async def test_upgrade_refuses_a_deployment_the_namespace_does_not_have(
    versioned_server: DevServer,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ERRANDS_", "TEMPORAL_"))}
    env.update(TEMPORAL_ADDRESS=versioned_server.address, PYTHONPATH=str(ROOT))
    result = await run_cli(env, "upgrade", "--from", "v1", "--deployment", "nowhere")
    assert result.code == 2
    assert result.stderr.count("\n") == 1
    assert "has no worker deployment 'nowhere'" in result.stderr


async def test_a_worker_of_the_plugin_pins_errands_workflows_whatever_version_it_declares(
    versioned_server: DevServer, settings: Settings, store: SessionStore
) -> None:
    temporal = await Client.connect(
        versioned_server.address, data_converter=pydantic_data_converter
    )
    router = ModelRouter(settings)
    plugin = ErrandsPlugin(settings, store=store, router=router)
    own = WorkerDeploymentConfig(
        version=CommonVersion("mine", "b7"), use_worker_versioning=True
    )  # no default behavior: Temporal would refuse errands' workflows, which declare none
    worker = Worker(temporal, task_queue="mine", plugins=[plugin], deployment_config=own)
    declared = worker.config(active_config=True)["deployment_config"]
    assert declared is not None
    assert declared.version == CommonVersion("mine", "b7")
    assert declared.default_versioning_behavior == VersioningBehavior.PINNED
    from_settings = settings.model_copy(update={"deployment_name": "ours", "build_id": "b8"})
    worker = Worker(
        temporal,
        task_queue="ours",
        plugins=[ErrandsPlugin(from_settings, store=store, router=router)],
    )
    declared = worker.config(active_config=True)["deployment_config"]
    assert declared is not None and declared.version == CommonVersion("ours", "b8")
    assert declared.default_versioning_behavior == VersioningBehavior.PINNED
    await router.aclose()


async def test_a_worker_whose_build_gets_no_new_tasks_says_how_to_make_it_current(
    versioned_server: DevServer,
    model_server: ScriptedModelServer,
    settings: Settings,
    database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    deployment, queue = f"warned-{uuid.uuid4().hex[:6]}", f"warned-{uuid.uuid4().hex[:6]}"
    env = {
        **worker_env(versioned_server, queue, database_url, model_server),
        "ERRANDS_DEPLOYMENT_NAME": deployment,
        "ERRANDS_BUILD_ID": "b1",
        "ERRANDS_LOG_JSON": "false",
    }
    command = (
        f"temporal worker deployment set-current-version --deployment-name {deployment} "
        "--build-id b1"
    )
    temporal = await Client.connect(versioned_server.address)
    async with running_cli(env, "worker") as worker:
        # A deployment no version of which was ever made current: the worker says so, and runs.
        said = await read_stderr_until(worker, "set-current-version")
        [warning] = [line for line in said.splitlines() if "set-current-version" in line]
        assert "WARNING" in warning and command in warning
        assert "tasks already pinned to it still run here" in warning
        assert worker.returncode is None

        await make_current(versioned_server, "b1", deployment)
        b1 = settings.model_copy(update={"deployment_name": deployment, "build_id": "b1"})
        b2 = b1.model_copy(update={"build_id": "b2"})
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="errands"):
            await warn_unless_routed(temporal, b1)
            assert not ours(caplog), "the current build is not warned about"
            await warn_unless_routed(temporal, b2)
        [record] = ours(caplog)
        assert record.levelno == logging.WARNING
        assert "--build-id b2" in record.getMessage()


def ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("errands")]
