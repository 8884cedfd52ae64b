"""``/v1/schedules``: scheduled tasks over HTTP (docs/schedules.md), the same operations as
``errands schedule``. Included in the gateway's ``/v1`` router, so every route acts as the
request's principal (a schedule someone else owns is a 404, as a missing one) and its refusals
are the gateway's Problems.

No ``from __future__ import annotations`` here: FastAPI reads the routes' annotations, and
``Acting`` is local to ``schedules_router``."""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from errands.client import Client
from errands.client._schedules import (
    add_schedule,
    delete_schedule,
    list_schedules,
    parse_duration,
    pause_schedule,
    resume_schedule,
    show_schedule,
    trigger_schedule,
)
from errands.contracts.schedules import NAME_PATTERN, Overlap

Name = Annotated[str, Path(pattern=NAME_PATTERN, description="1 to 64 of A-Z a-z 0-9 _ -")]


class NewSchedule(BaseModel):
    """``POST /v1/schedules``: exactly one of ``cron`` and ``every``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    text: str
    cron: str | None = None
    every: str | None = Field(default=None, description="e.g. 15m, 1h, 1d")
    timezone: str = "UTC"
    session: str | None = Field(default=None, description="None: a new session per fire")
    headless: bool = False
    model: str | None = None
    notify: list[str] | None = None
    overlap: Overlap = "skip"
    catchup: str = Field(default="1h", description="at least 10s")
    paused: bool = False


class PauseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str | None = Field(default=None, max_length=500)


def schedules_router(acting: Callable[..., Client]) -> APIRouter:
    """The routes, each with ``acting`` (the gateway's dependency giving the client acting as
    the request's principal)."""
    router = APIRouter(prefix="/schedules", tags=["schedules"])
    Acting = Annotated[Client, Depends(acting)]  # noqa: N806 - a type, as the gateway's

    @router.post("", status_code=201, summary="Add a schedule whose every fire starts a task")
    async def add(body: NewSchedule, client: Acting) -> JSONResponse:
        added = await add_schedule(
            client,
            body.name,
            body.text,
            cron=body.cron,
            every=parse_duration(body.every, "every") if body.every is not None else None,
            timezone=body.timezone,
            session=body.session,
            headless=body.headless,
            model=body.model,
            notify=body.notify,
            overlap=body.overlap,
            catchup=parse_duration(body.catchup, "catchup"),
            paused=body.paused,
        )
        return JSONResponse(added.public(), status_code=201)

    @router.get("", summary="The caller's schedules (an admin's: every one)")
    async def listed(client: Acting) -> dict[str, Any]:
        return {"schedules": [view.public() for view in await list_schedules(client)]}

    @router.get("/{name}", summary="A schedule: next fires, recent fires and their tasks")
    async def show(name: Name, client: Acting) -> dict[str, Any]:
        return (await show_schedule(client, name)).public()

    @router.post("/{name}/pause", status_code=204, summary="Stop the schedule's fires")
    async def pause(name: Name, client: Acting, body: PauseRequest | None = None) -> Response:
        await pause_schedule(client, name, body.note if body is not None else None)
        return Response(status_code=204)

    @router.post("/{name}/resume", status_code=204, summary="Resume a paused schedule")
    async def resume(name: Name, client: Acting) -> Response:
        await resume_schedule(client, name)
        return Response(status_code=204)

    @router.post("/{name}/trigger", status_code=202, summary="Fire the schedule once now")
    async def trigger(name: Name, client: Acting) -> Response:
        await trigger_schedule(client, name)
        return Response(status_code=202)

    @router.delete("/{name}", status_code=204, summary="Delete the schedule")
    async def delete(name: Name, client: Acting) -> Response:
        await delete_schedule(client, name)
        return Response(status_code=204)

    return router
