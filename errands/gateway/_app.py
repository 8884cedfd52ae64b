"""The HTTP gateway: every operation of the CLI as JSON, a task's event log as server-sent
events, and the web page. ``create_app`` builds it around an
``errands.Client``; every handler is a call of it, and every refusal one of ``errands.errors``
(mapped to a status in ``_errors``).

Every API request acts as a principal (SPEC §10, DESIGN invariant 13): ``PrincipalGuard``
resolves it before the route runs, and the route works through ``client.as_principal(it)``, so
what it may see and do is decided in the client layer, never here: another's task or session
is a 404, word for word a missing one's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Path, Query, Request, Security
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPBearer
from fastapi.staticfiles import StaticFiles

from errands.client import Authenticator, Client, TaskHandle
from errands.contracts.events import StoredEvent
from errands.contracts.limits import SEQ_MAX
from errands.contracts.principals import Principal
from errands.contracts.workflows import MessageReceipt, TaskResult
from errands.errors import InvalidRequest
from errands.gateway._auth import PrincipalGuard
from errands.gateway._errors import install_handlers
from errands.gateway._guards import BrowserGuard
from errands.gateway._models import (
    SESSION_PATTERN,
    TASK_PATTERN,
    AnswerAccepted,
    AnswerRequest,
    ApprovalAccepted,
    ApprovalRequestBody,
    CancelRequested,
    GatewayInfo,
    Me,
    MessageOut,
    MessageRequest,
    Messages,
    NewTask,
    Notifications,
    NotifySecret,
    Problem,
    SideAnswerOut,
    SideQuestionRequest,
    TaskCreated,
    TaskList,
    TaskOut,
)
from errands.gateway._schedules import schedules_router
from errands.protocols.a2a import mount_a2a
from errands.protocols.mcp import mount_mcp

STATIC = FilePath(__file__).parent / "static"
KEEPALIVE_SECONDS = 15.0
RECHECK_SECONDS = 5.0
"""How often an open event stream asks its credential again (a revoked key ends it)."""

SessionId = Annotated[
    str,
    Path(pattern=SESSION_PATTERN, description="Letters, digits and _.:- (at most 80)."),
]
TaskId = Annotated[
    str, Path(pattern=TASK_PATTERN, description="A task id as returned by POST …/tasks.")
]
REFUSALS: dict[int | str, dict[str, Any]] = {
    code: {"model": Problem} for code in (400, 401, 403, 404, 409, 415, 422, 429, 502, 503)
}
BEARER = HTTPBearer(
    auto_error=False,  # PrincipalGuard refuses, with errands' own message
    scheme_name="bearer",
    description="Who calls: an errands API key (`errands principals add`), an OIDC JWT from "
    "ERRANDS_OIDC_ISSUER, or the value of ERRANDS_API_TOKEN (an admin). A gateway on loopback "
    "with none of them configured needs no token.",
)


async def _principal(request: Request) -> Principal:
    """Who the request acts as (resolved once per request: FastAPI caches a dependency)."""
    guard: PrincipalGuard = request.app.state.guard
    return await guard(request)


def _acting(request: Request, principal: Annotated[Principal, Depends(_principal)]) -> Client:
    """The gateway's client acting as the request's principal: a view sharing its connection and
    store, through which every route works (so no route can reach the unscoped client)."""
    client: Client = request.app.state.client
    return client.as_principal(principal)


Caller = Annotated[Principal, Depends(_principal)]
"""The request's principal."""
Acting = Annotated[Client, Depends(_acting)]
"""The client acting as the request's principal."""


def create_app(
    base: Client,
    *,
    token: str | None,
    authenticator: Authenticator | None = None,
    loopback_only: bool = True,
) -> FastAPI:
    """The gateway around ``base``, which no route uses as it is: every API call works through a
    view of it acting as the principal its ``Authorization: Bearer`` header names
    (``authenticator``; default: API keys in ``base``'s store, ERRANDS_OIDC_* of its
    settings, and ``token`` as ERRANDS_API_TOKEN); the page and the OpenAPI document stay
    public, they hold no data. ``loopback_only``: the gateway is reachable from this machine
    alone, so with no auth configured its one user is ``LOCAL``."""
    if authenticator is None:
        # The store is opened on the first request, not here: a gateway is built before it runs.
        authenticator = Authenticator.from_settings(base.settings, base.store, token=token)
    guard = PrincipalGuard(authenticator, loopback_only=loopback_only)
    app = FastAPI(
        title="errands gateway",
        version="1",
        description="Start tasks, follow them live, answer their questions, ask side questions.",
        docs_url=None,  # the interactive docs load scripts from a CDN; the document is enough
        redoc_url=None,
        redirect_slashes=False,  # `/v1/tasks/` is no task: a 404, not a redirect to the list
    )
    app.state.client, app.state.guard = base, guard
    install_handlers(app)
    app.add_middleware(BrowserGuard, allowed_hosts=base.settings.allowed_hosts)
    # Every API call acts as someone: the bearer scheme is declared in the OpenAPI document, and
    # a request is refused (with a Problem) before any route unless its principal is resolved.
    api = APIRouter(
        prefix="/v1", dependencies=[Security(BEARER), Depends(_principal)], responses=REFUSALS
    )

    @api.post(
        "/sessions/{session_id}/tasks",
        status_code=201,
        response_model=TaskCreated,
        summary="Start a task in a session",
    )
    async def start_task(session_id: SessionId, body: NewTask, client: Acting) -> TaskCreated:
        handle = await client.start(
            body.text,
            session=session_id,
            model=body.model,
            fallback_model=body.fallback_model,
            headless=body.headless,
            notify=body.notify,
        )
        given = [NotifySecret(**asdict(g)) for g in handle.notify_secrets]
        return TaskCreated(task_id=handle.task_id, session_id=session_id, notify=given)

    @api.get(
        "/tasks/{task_id}",
        responses={200: {"model": TaskResult}},
        summary="A task's state: the fields of `errands status --json`",
    )
    async def task_state(task_id: TaskId, client: Acting) -> JSONResponse:
        return JSONResponse((await client.task(task_id).status()).public())

    @api.get(
        "/tasks/{task_id}/notifications",
        response_model=Notifications,
        summary="The task's notifications: each delivery, sent, failed or still retrying",
    )
    async def notifications(task_id: TaskId, client: Acting) -> Notifications:
        found = await client.notifications(task_id)
        return Notifications.model_validate(
            {"task_id": task_id, "deliveries": [d.public() for d in found]}
        )

    @api.post(
        "/tasks/{task_id}/answer",
        response_model=AnswerAccepted,
        summary="Answer the task's pending question",
    )
    async def answer(task_id: TaskId, body: AnswerRequest, client: Acting) -> AnswerAccepted:
        cancelled = body.status == "cancelled"
        receipt = await client.task(task_id).answer(
            None if cancelled else body.answers,
            cancel=cancelled,
            question_set_id=body.question_set_id,
        )
        return AnswerAccepted(
            task_id=task_id, question_set_id=receipt.question_set_id, status=receipt.status
        )

    @api.post(
        "/tasks/{task_id}/messages",
        response_model=MessageReceipt,
        summary="Send a message into the running task (steer it, or queue the next task)",
    )
    async def message(task_id: TaskId, body: MessageRequest, client: Acting) -> MessageReceipt:
        return await client.task(task_id).say(body.text, mode=body.mode)

    @api.post(
        "/tasks/{task_id}/approval",
        response_model=ApprovalAccepted,
        summary="Approve or deny the task's tool call waiting for approval",
    )
    async def approval(
        task_id: TaskId, body: ApprovalRequestBody, client: Acting
    ) -> ApprovalAccepted:
        task = client.task(task_id)
        pinned = {"approval_id": body.approval_id, "arguments_sha256": body.arguments_sha256}
        if body.decision == "deny":
            receipt = await task.deny(body.reason, **pinned)
        else:
            always = body.decision == "approve_always"
            receipt = await task.approve(always=always, **pinned)
        return ApprovalAccepted(task_id=task_id, **receipt.model_dump())

    @api.post(
        "/tasks/{task_id}/btw",
        response_model=SideAnswerOut,
        summary="Ask a side question; the task is not disturbed",
    )
    async def side_question(
        task_id: TaskId, body: SideQuestionRequest, client: Acting
    ) -> SideAnswerOut:
        answer = await client.task(task_id).btw(body.question)
        return SideAnswerOut(task_id=task_id, **answer.model_dump())

    @api.post(
        "/tasks/{task_id}/cancel",
        status_code=202,
        response_model=CancelRequested,
        summary="Cancel a running task",
    )
    async def cancel(task_id: TaskId, client: Acting) -> CancelRequested:
        await client.task(task_id).cancel()
        return CancelRequested(task_id=task_id)

    @api.get(
        "/sessions/{session_id}/messages",
        response_model=Messages,
        summary="A session's messages, oldest first",
    )
    async def messages(
        session_id: SessionId,
        client: Acting,
        after: Annotated[
            int, Query(ge=0, le=SEQ_MAX, description="Only messages with a larger seq.")
        ] = 0,
    ) -> Messages:
        rows = await client.history(session_id, after=after)
        return Messages(
            session_id=session_id,
            messages=[
                MessageOut.model_validate(
                    r.model_dump() | {"kind": r.shown_kind, "covers": r.covers}
                )
                for r in rows
            ],
        )

    @api.get(
        "/tasks",
        response_model=TaskList,
        summary="The latest tasks, newest first (of one session, with `session`)",
    )
    async def tasks(
        client: Acting,
        session: Annotated[
            str | None, Query(pattern=SESSION_PATTERN, description="Only this session's.")
        ] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
    ) -> TaskList:
        found = await client.tasks(session=session, limit=limit)
        return TaskList(tasks=[TaskOut(**asdict(t)) for t in found])

    @api.get(
        "/info",
        response_model=GatewayInfo,
        summary="Where tasks run: the namespace, and the Temporal UI to link them to",
    )
    async def info(client: Acting) -> GatewayInfo:
        return GatewayInfo(namespace=client.namespace, temporal_ui=client.settings.temporal_ui())

    @api.get(
        "/me",
        response_model=Me,
        summary="Who this request acts as, and whether the gateway needs a token",
    )
    async def me(principal: Caller) -> Me:
        return Me(
            id=principal.id,
            role=principal.role,
            via=principal.via,
            # Whoever came with a credential needs one; the local user, while none is configured.
            auth_required=principal.via != "local" or await authenticator.configured(),
        )

    @api.get(
        "/tasks/{task_id}/events",
        responses={
            200: {"content": {"text/event-stream": {}}, "description": "The task's event log"},
            204: {"description": "The task has ended and has no event after Last-Event-ID"},
        },
        response_class=StreamingResponse,
        summary="The task's event log as server-sent events, from the start, then live",
        description="Every event of the task in order (types and fields: docs/events.md), each "
        "with `id:` its sequence number and `event:` its type; the stream ends after replied, "
        "failed or canceled. Send the last id back as Last-Event-ID (or `?after=`) to resume "
        "after it. Reading adds nothing to the task's history. The request's credential is "
        "asked again every 5 s: when it no longer works (a revoked key, an expired token) the "
        'stream ends with an `unauthorized` event, data `{"detail": "<why>"}`, no id.',
    )
    async def events(
        request: Request,
        task_id: TaskId,
        client: Acting,
        principal: Caller,
        last_event_id: Annotated[str | None, Header(max_length=20)] = None,
        after: Annotated[
            int | None, Query(ge=0, le=SEQ_MAX, description="Events with a larger seq.")
        ] = None,
    ) -> Response:
        handle = client.task(task_id)
        described = await handle.describe()  # an unknown task is a 404, not an empty stream
        seen = _resume_point(last_event_id, after)
        if seen and not described.running and not await handle.events_after(seen, limit=1):
            return Response(status_code=204)  # ended and all read: an EventSource stops
        return StreamingResponse(
            _log(handle, seen, lambda: guard.still(request, principal)),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    api.include_router(schedules_router(_acting))
    app.include_router(api)
    # A2A 1.0 (docs/a2a.md): every A2A request acts as the principal the API's routes resolve.
    mount_a2a(app, base, _principal)
    # MCP over Streamable HTTP (docs/mcp-server.md), authenticated and throttled as /v1.
    mount_mcp(app, base, principal_of=guard)

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def _resume_point(last_event_id: str | None, after: int | None) -> int:
    """Where a reader resumes: after the Last-Event-ID it sends (a reconnecting EventSource),
    else after ``?after=``, else from the start. An id that is no sequence number is refused."""
    if last_event_id is None:
        return after or 0
    seq = int(last_event_id) if last_event_id.isascii() and last_event_id.isdigit() else -1
    if not 0 <= seq <= SEQ_MAX:
        raise InvalidRequest(
            f"Last-Event-ID {last_event_id!r} is no event of this stream: send the id of the "
            "last event received (a sequence number), or leave it out to read from the start"
        )
    return seq


async def _log(
    handle: TaskHandle, after: int, still: Callable[[], Awaitable[str | None]]
) -> AsyncIterator[str]:
    """The task's events as server-sent events, keeping idle proxies awake. Every
    ``RECHECK_SECONDS`` the request's credential is asked again (``still``: why it no longer
    acts as its principal): a revoked key or an expired token ends the stream with an
    ``unauthorized`` event giving the reason, and a reconnection is refused with 401."""
    yield "retry: 2000\n\n"
    reading = handle.events(after=after, follow=True)
    nxt: asyncio.Future[StoredEvent] = asyncio.ensure_future(anext(reading))
    clock = asyncio.get_running_loop().time
    checked = written = clock()
    try:
        while True:
            done, _ = await asyncio.wait({nxt}, timeout=RECHECK_SECONDS)
            if clock() - checked >= RECHECK_SECONDS:
                checked = clock()
                if (reason := await still()) is not None:
                    data = json.dumps({"detail": reason}, separators=(",", ":"))
                    yield f"event: unauthorized\ndata: {data}\n\n"
                    return
            if not done:
                if clock() - written >= KEEPALIVE_SECONDS:
                    written = clock()
                    yield ": keep-alive\n\n"  # keeps proxies from closing an idle stream
                continue
            try:
                event = nxt.result()
            except StopAsyncIteration:
                return
            data = json.dumps(event.public(), separators=(",", ":"))
            written = clock()
            yield f"id: {event.seq}\nevent: {event.type}\ndata: {data}\n\n"
            nxt = asyncio.ensure_future(anext(reading))
    finally:
        # A stream cut off (the client left, the gateway stops) waits for the read under way
        # to stop before closing the reader it runs in.
        nxt.cancel()
        await asyncio.gather(nxt, return_exceptions=True)
        await reading.aclose()
