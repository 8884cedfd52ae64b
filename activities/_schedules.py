"""A schedule's fire becomes a task (SPEC §11): ``prepare_scheduled_task`` builds the task's input
exactly as ``errands.Client.start`` does, with the worker's settings at the time of the fire.

``build_input`` is ``errands.client.task_input``, given by the composition layer (activities do
not import the client). The fire's new session (or the schedule's named one) is claimed for the
schedule's owner first: a named session someone else has claimed since is refused, for good.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from errands.adapters.encryption import session_tags
from errands.adapters.store import SessionStore
from errands.contracts import search
from errands.contracts.schedules import PreparedFire, PrepareFire, fire_session_id, fire_task_id
from errands.contracts.workflows import TaskInput
from errands.errors import ErrandsError
from errands.settings import Settings

BuildInput = Callable[..., TaskInput]


class ScheduleActivities:
    """The activities of schedules, bound to one store and the worker's settings."""

    def __init__(self, store: SessionStore, settings: Settings, build_input: BuildInput) -> None:
        self._store = store
        self._settings = settings
        self._build_input = build_input

    @activity.defn
    async def prepare_scheduled_task(self, data: PrepareFire) -> PreparedFire:
        return await asyncio.to_thread(self._prepare, data)

    def _prepare(self, data: PrepareFire) -> PreparedFire:
        task = data.task
        session = task.session or fire_session_id(task.name, data.fired_at, data.nonce)
        options: dict[str, Any] = {
            "session": session,
            "headless": task.headless,
            "task_id": fire_task_id(task.name, data.fired_at),
        }
        if task.model is not None:
            options["model"] = task.model
        try:
            built = self._build_input(self._settings, task.text, **options)
        except ErrandsError as error:
            raise ApplicationError(
                f"schedule {task.name!r} cannot start its task: {error.message}; fix the "
                "schedule (delete it and add it again)",
                type="invalid_request",
                non_retryable=True,
            ) from None
        if task.owner is not None:
            owner = self._store.claim_session(session, task.owner)
            if owner != task.owner:
                raise ApplicationError(
                    f"schedule {task.name!r} works in session {session!r}, which another "
                    "principal owns now; delete the schedule and add it with a session of "
                    "its owner's",
                    type="permission",
                    non_retryable=True,
                )
        built = built.model_copy(
            update={
                "owner": task.owner,
                "owner_role": task.owner_role,
                "notify": list(task.notify),
                "schedule": task.name,
            }
        )
        tags = session_tags(self._settings)
        return PreparedFire(
            task=built,
            session_tag=tags.written(session),
            memo={search.SESSION_MEMO: session} if tags.keys else None,
        )
