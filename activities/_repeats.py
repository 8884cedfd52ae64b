"""A server error that answers the same request the same way twice is not an outage.

A persistent 500 (a server that cannot process this one request) was sent 36 times over 18.6
minutes before the task failed. The classifier sees one attempt; this remembers, per activity,
what the previous attempt's 5xx said, so the first repeat ends the retries as an invalid request.
Kept in the worker's memory: an attempt retried on another worker just retries as before.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from temporalio import activity
from temporalio.exceptions import ApplicationError

REQUEST_ERRORS = (500, 501)
"""Statuses that speak of the request. 502, 503, 504 and 529 speak of the server's state: an
outage repeats its words too, and waiting is what helps there."""
REMEMBERED = 2_000
"""Activities whose last 5xx is remembered; the oldest are forgotten first."""

_last: OrderedDict[tuple[str, str], str] = OrderedDict()


def settle_server_error(error: ApplicationError) -> ApplicationError:
    """``error`` as the activity raises it: unchanged, unless it is a 5xx with the same words as
    the previous attempt's, which is a refusal of this request, not worth retrying."""
    details = error.details[0] if error.details else None
    status = details.get("status") if isinstance(details, dict) else None
    info = activity.info()
    key = (info.workflow_id or "", info.activity_id)
    if error.type != "transient" or status not in REQUEST_ERRORS:
        _last.pop(key, None)
        return error
    digest = hashlib.sha256(error.message.encode()).hexdigest()
    if _last.pop(key, None) == digest:
        said = error.message.removesuffix("; the activity retry policy will try again")
        return ApplicationError(
            f"{said}; the same answer came on two attempts in a row, so the server refuses "
            "this request rather than being down: retrying cannot help",
            *error.details,
            type="invalid_request",
            non_retryable=True,
        )
    _last[key] = digest
    while len(_last) > REMEMBERED:
        _last.popitem(last=False)
    return error
