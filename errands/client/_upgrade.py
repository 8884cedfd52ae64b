"""Draining an old worker version (``Client.upgrade``, ``errands upgrade``): the running tasks
still pinned to a build of the worker deployment, each woken so it moves to the current version.

A pinned task notices that a newer version is current only in a workflow task of its own: one
working does at its next round boundary; one parked on a question or a tool approval would sleep
until the person answers, maybe for days, holding the old version up. The wake is a signal that
does nothing but start a workflow task: a task parked on a question moves in it (the question
still pending), any other at its next round boundary (one waiting for an approval, after the
verdict).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentRequest
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecution
from temporalio.service import RPCError, RPCStatusCode

from errands.client._task_calls import TASK_WORKFLOW
from errands.contracts import search
from errands.contracts.versions import BUILD_ID, DEPLOYMENT_NAME
from errands.contracts.workflows import WAKE_SIGNAL
from errands.errors import ConfigError, InvalidRequest, TemporalUnreachable
from errands.settings import Settings

if TYPE_CHECKING:
    from errands.client._client import Client


@dataclass(frozen=True)
class TaskOnOldVersion:
    """A running task pinned to the build being drained (``Client.upgrade``)."""

    task_id: str
    version: str
    """``deployment:build``, as Temporal's ``TemporalWorkerDeploymentVersion`` holds it."""
    waiting_for_user: bool
    """Parked on a question or an approval (``ErrandsWaitingForUser``): a question moves it at
    once when woken, an approval after its verdict."""
    woken: bool
    """The wake was delivered (False in a dry run, or when the task ended meanwhile)."""

    def public(self) -> dict[str, Any]:
        return asdict(self)


async def upgrade(
    client: Client, from_build: str, *, deployment: str | None = None, dry_run: bool = False
) -> list[TaskOnOldVersion]:
    """The running tasks pinned to ``from_build`` of ``deployment`` (default
    ``ERRANDS_DEPLOYMENT_NAME``), each woken unless ``dry_run``. Refused (``InvalidRequest``)
    while ``from_build`` is still the deployment's current version: they would stay on it."""
    name = deployment_of(client.settings, from_build, deployment)
    current = await current_build(client, name)
    if current == from_build:
        raise InvalidRequest(
            f"build {from_build} is still the current version of worker deployment {name}, so "
            "its tasks would stay on it; make the new build current first: temporal worker "
            f"deployment set-current-version --deployment-name {name} --build-id NEW_BUILD"
        )
    version = f"{name}:{from_build}"
    query = (
        f"WorkflowType = '{TASK_WORKFLOW}' AND ExecutionStatus = 'Running' "
        f"AND TemporalWorkerDeploymentVersion = '{version}'"
    )
    temporal = client.temporal
    found: list[WorkflowExecution] = []
    try:
        async for execution in temporal.list_workflows(query):
            found.append(execution)
    except RPCError as error:
        raise TemporalUnreachable(
            f"Temporal could not list the tasks on {version} in namespace "
            f"{client.namespace}: {error.message}"
        ) from None
    tasks = []
    for execution in found:
        woken = False if dry_run else await _wake(client, execution)
        tasks.append(
            TaskOnOldVersion(
                task_id=execution.id,
                version=version,
                waiting_for_user=bool(execution.typed_search_attributes.get(search.WAITING)),
                woken=woken,
            )
        )
    return tasks


def deployment_of(settings: Settings, from_build: str, deployment: str | None) -> str:
    """The deployment to drain (``deployment``, else ``ERRANDS_DEPLOYMENT_NAME``), with it and
    ``from_build`` checked: a frontend calls it first to refuse bad input before connecting."""
    name = deployment or settings.deployment_name
    if name is None:
        raise ConfigError(
            "no worker deployment to upgrade: set ERRANDS_DEPLOYMENT_NAME to the one the "
            "workers declare (or pass --deployment)",
            setting="ERRANDS_DEPLOYMENT_NAME",
        )
    if not DEPLOYMENT_NAME.fullmatch(name):
        raise InvalidRequest(
            f"{name!r} is not a deployment name: give 1 to 100 letters, digits, '_' or '-' "
            "starting with a letter or digit"
        )
    if not BUILD_ID.fullmatch(from_build):
        raise InvalidRequest(
            f"{from_build!r} is not a build id: give 1 to 100 letters, digits, '.', '_' or '-' "
            "starting with a letter or digit"
        )
    return name


async def routed_builds(temporal: TemporalClient, deployment: str) -> tuple[str | None, str | None]:
    """The build ids of ``deployment``'s current and ramping versions, the ones new tasks go to
    (None: none, or unversioned workers). The server's ``RPCError`` as it raised it."""
    request = DescribeWorkerDeploymentRequest(
        namespace=temporal.namespace, deployment_name=deployment
    )
    described = await temporal.workflow_service.describe_worker_deployment(request)
    routing = described.worker_deployment_info.routing_config
    current = routing.current_deployment_version.build_id
    ramping = routing.ramping_deployment_version.build_id
    return (
        current if routing.HasField("current_deployment_version") and current else None,
        ramping if routing.HasField("ramping_deployment_version") and ramping else None,
    )


async def current_build(client: Client, deployment: str) -> str | None:
    """The build id of ``deployment``'s current version (None: unversioned is current)."""
    try:
        current, _ = await routed_builds(client.temporal, deployment)
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise InvalidRequest(
                f"namespace {client.namespace} has no worker deployment {deployment!r}; check "
                "ERRANDS_DEPLOYMENT_NAME (or --deployment) against `temporal worker deployment "
                "list`"
            ) from None
        raise TemporalUnreachable(
            f"Temporal could not describe worker deployment {deployment!r}: {error.message}"
        ) from None
    return current


async def _wake(client: Client, execution: WorkflowExecution) -> bool:
    """Signal the task's latest run; False when it ended since it was listed."""
    handle = client.temporal.get_workflow_handle(execution.id)
    try:
        await handle.signal(WAKE_SIGNAL)
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return False
        raise TemporalUnreachable(
            f"Temporal could not wake task {execution.id}: {error.message}"
        ) from None
    return True
