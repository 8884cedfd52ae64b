"""How the gateway says no: every refusal is a JSON body ``{"detail": "<what to fix>"}``, and
errands' errors map to HTTP statuses here and nowhere else::

    InvalidRequest, AnswerRejected      422  (and pydantic's own, with its errors under "errors")
    Unauthorized                        401  with WWW-Authenticate
    NotFound (a task, a session)        404  missing, or someone else's (and unknown paths)
    QuotaExceeded                       429  with Retry-After
    Conflict, TaskEnded                 409  the task is not in a state that allows the request
    SideQuestionFailed, Failed          502  a model could not answer
    Unavailable, NoWorker               503  Temporal, the store or a worker did not answer
    ConfigError                         500  the gateway itself is misconfigured
    too many wrong tokens               429  with Retry-After (``_auth.Throttle``)

Before any route, ``_guards.BrowserGuard`` answers a foreign Host 400, another site's page 403
and a body that is not JSON 415, in the same shape. A client error is never a 5xx.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from errands.errors import (
    ConfigError,
    Conflict,
    ErrandsError,
    Failed,
    InvalidRequest,
    NotFound,
    QuotaExceeded,
    TaskEnded,
    Unauthorized,
    Unavailable,
)

log = logging.getLogger("errands.gateway")
SEND_JSON = "send a JSON object (UTF-8) with the header `Content-Type: application/json`"
UNPAIRED = (
    "the text holds an unpaired surrogate (a JSON escape \\ud800-\\udfff with no partner), "
    "which errands cannot store; remove it and send the text again"
)
"""Pydantic's ``string_unicode`` error in the project's words (errands.contracts.text)."""

STATUSES: list[tuple[type[ErrandsError], int]] = [
    (InvalidRequest, 422),
    (Unauthorized, 401),
    (NotFound, 404),
    (QuotaExceeded, 429),
    (Conflict, 409),
    (Failed, 502),
    (Unavailable, 503),
    (ConfigError, 500),
]
"""Checked in order; the first class the error is an instance of gives its status."""


def http_status(error: ErrandsError) -> int:
    return next((status for kind, status in STATUSES if isinstance(error, kind)), 500)


def detail(error: ErrandsError) -> str:
    """The error's message, with what to read next in this API's terms."""
    if isinstance(error, TaskEnded):
        return (
            f"task {error.task_id} has ended ({error.ended}); {error.consequence}. "
            f"GET /v1/tasks/{error.task_id} shows its result"
        )
    return error.message


def install_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ErrandsError, _errands_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)


async def _errands_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, ErrandsError)
    status = http_status(error)
    if status >= 500:
        log.warning("%s %s: %s", request.method, request.url.path, error.message)
    headers = None
    if isinstance(error, Unauthorized):
        headers = {"WWW-Authenticate": error.challenge}
    elif isinstance(error, QuotaExceeded):
        headers = {"Retry-After": str(error.retry_after)}
    return JSONResponse({"detail": detail(error)}, status, headers=headers)


async def _validation_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    errors = [_plain(e) for e in error.errors()]
    lines = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors]
    text = "the request is malformed; fix " + "; ".join(lines)
    if any(e["loc"] == ["body"] or e["type"] == "json_invalid" for e in errors):
        text += f"; {SEND_JSON}"
    return JSONResponse({"detail": text + " (see /openapi.json)", "errors": errors}, 422)


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    if error.status_code == 404:
        text = f"no endpoint {request.method} {request.url.path}; see /openapi.json"
    elif error.status_code == 405:
        text = f"{request.method} is not allowed on {request.url.path}; see /openapi.json"
    elif error.status_code == 400:
        # FastAPI's answer to a body it could not decode at all (not UTF-8, say).
        return JSONResponse({"detail": f"the body could not be read; {SEND_JSON}"}, 422)
    else:
        text = str(error.detail)
    return JSONResponse({"detail": text}, error.status_code, headers=error.headers)


def _plain(error: dict[str, Any]) -> dict[str, Any]:
    """Pydantic's error without ``ctx``/``url``: ``ctx`` may hold exception objects JSON can't
    carry, and the message already says it."""
    return {
        "loc": list(error.get("loc", ())),
        "msg": UNPAIRED if error.get("type") == "string_unicode" else error.get("msg", ""),
        "type": error.get("type", ""),
    }
