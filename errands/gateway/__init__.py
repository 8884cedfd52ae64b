"""The HTTP gateway (``errands serve``): the CLI's operations as JSON with an OpenAPI document at
``/openapi.json``, a task's event log as server-sent events, and a web page at ``/``.

::

    POST /v1/sessions/{session_id}/tasks    {text, model?, fallback_model?, headless?} → 201
    GET  /v1/tasks/{task_id}                the fields of `errands status --json`
    POST /v1/tasks/{task_id}/answer         {answers, status?, question_set_id?}
    POST /v1/tasks/{task_id}/approval       {decision, reason?, approval_id?}
    POST /v1/tasks/{task_id}/messages       {text, mode?}
    POST /v1/tasks/{task_id}/btw            {question}
    POST /v1/tasks/{task_id}/cancel         → 202
    GET  /v1/sessions/{session_id}/messages ?after=SEQ
    GET  /v1/tasks/{task_id}/events         text/event-stream
    GET  /v1/tasks                          ?session=&limit= (the caller's own)
    GET  /v1/me                             who the request acts as: {id, role, via, auth_required}
    GET  /v1/info                           the namespace and the Temporal UI's address

Every ``/v1`` call acts as a principal (SPEC §10): ``Authorization: Bearer`` with an errands
API key, an OIDC JWT or ERRANDS_API_TOKEN (an admin); a user sees and acts on their own tasks
and sessions only, and anyone else's answer exactly as a missing one (404). Refused bearers,
repeated, are slowed with 429. With none of the three configured the gateway binds to loopback
only and its one user is ``local``, an admin. It answers only to its own
address (or ``ERRANDS_ALLOWED_HOSTS``), takes changes only as ``application/json`` and never
from another site's page, and sends the security headers on every response (``_guards``).
Refusals are 4xx with ``{"detail": "<what to fix>"}``.

``errands codec-server`` (``_codec``) is the Temporal UI's and CLI's remote codec: ``POST
/encode`` and ``/decode`` with the keys, behind the same token.
"""

from errands.gateway._app import create_app
from errands.gateway._auth import is_loopback
from errands.gateway._codec import codec_origins, codec_serving, create_codec_app
from errands.gateway._serve import check_binding, serve, serving

__all__ = [
    "check_binding",
    "codec_origins",
    "codec_serving",
    "create_codec_app",
    "create_app",
    "is_loopback",
    "serve",
    "serving",
]
