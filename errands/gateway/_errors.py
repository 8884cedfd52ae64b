"""How the gateway says no: every refusal is a JSON body ``{"detail": "<what to fix>"}``.

::

    ApiError                 raised by our handlers with the status and the message
    ├── 401  no or wrong bearer token
    ├── 404  unknown task, unknown path
    ├── 409  the task is not in a state that allows the request
    ├── 422  a malformed body, path or query (pydantic's errors kept under "errors")
    └── 502/503/504  Temporal or a model could not be reached: never the client's fault

A client error is never a 5xx: validation, routing and Temporal's own refusals (``NOT_FOUND``,
``INVALID_ARGUMENT``, ``ALREADY_EXISTS``) are mapped here, in one place.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from temporalio.service import RPCError, RPCStatusCode

log = logging.getLogger("errands.gateway")
SEND_JSON = "send a JSON object (UTF-8) with the header `Content-Type: application/json`"


class ApiError(Exception):
    """A refusal with its HTTP status; ``message`` says what happened and what to do next."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


def from_rpc(error: RPCError, what: str) -> ApiError:
    """Temporal's refusal of a call about ``what`` (a task id, a session), as an ``ApiError``."""
    if error.status == RPCStatusCode.NOT_FOUND:
        return ApiError(404, f"no task {what!r}; check the task id (POST a task to create one)")
    if error.status == RPCStatusCode.INVALID_ARGUMENT:
        return ApiError(422, f"Temporal rejected {what!r}: {error.message}")
    if error.status == RPCStatusCode.ALREADY_EXISTS:
        return ApiError(409, f"{what!r} already exists: {error.message}")
    if error.status == RPCStatusCode.DEADLINE_EXCEEDED:
        return ApiError(
            504,
            f"no worker answered about {what!r} in time ({error.message}); check that an "
            "`errands worker` is running on this task queue",
        )
    return ApiError(503, f"Temporal could not be reached about {what!r}: {error.message}")


def install_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RPCError, _rpc_error)


async def _api_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, ApiError)
    return JSONResponse({"detail": error.message}, error.status, headers=error.headers)


async def _validation_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    errors = [_plain(e) for e in error.errors()]
    lines = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors]
    detail = "the request is malformed; fix " + "; ".join(lines)
    if any(e["loc"] == ["body"] or e["type"] == "json_invalid" for e in errors):
        detail += f"; {SEND_JSON}"
    return JSONResponse({"detail": detail + " (see /openapi.json)", "errors": errors}, 422)


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    if error.status_code == 404:
        detail = f"no endpoint {request.method} {request.url.path}; see /openapi.json"
    elif error.status_code == 405:
        detail = f"{request.method} is not allowed on {request.url.path}; see /openapi.json"
    elif error.status_code == 400:
        # FastAPI's answer to a body it could not decode at all (not UTF-8, say).
        return JSONResponse({"detail": f"the body could not be read; {SEND_JSON}"}, 422)
    else:
        detail = str(error.detail)
    return JSONResponse({"detail": detail}, error.status_code, headers=error.headers)


async def _rpc_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RPCError)
    api = from_rpc(error, request.url.path)
    log.warning("Temporal call failed for %s %s: %s", request.method, request.url.path, error)
    return JSONResponse({"detail": api.message}, api.status)


def _plain(error: dict[str, Any]) -> dict[str, Any]:
    """Pydantic's error without ``ctx``/``url``: ``ctx`` may hold exception objects JSON can't
    carry, and the message already says it."""
    return {
        "loc": list(error.get("loc", ())),
        "msg": error.get("msg", ""),
        "type": error.get("type", ""),
    }
