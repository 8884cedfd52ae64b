"""``errands.Client``: the one way a frontend talks to errands (the CLI, the HTTP gateway and any
Python program go through it).

::

    client = await errands.Client.connect()            # TEMPORAL_*, temporal.toml or `errands dev`
    task = await client.start("Compare three databases", session="s1")
    async for event in task.events():                   # the event log: docs/events.md
        print(event.seq, event.type, event.data)        # task_started, …, replied
    result = await task.wait()                          # a TaskResult, whatever the outcome
    result.raise_for_status()                           # TaskFailed unless it replied

Every refusal is one of ``errands.errors``: ``TaskNotFound``, ``TaskEnded``, ``Conflict``,
``InvalidRequest``/``AnswerRejected``, ``NoWorker`` (a running task nobody serves: every query
and update start is bounded by ``query_timeout``), ``TemporalUnreachable``, ``SideQuestionFailed``.

A frontend serving many users resolves each request's principal with ``Authenticator`` (an API
key, an OIDC JWT, ERRANDS_API_TOKEN, or the one local user) and acts through
``client.as_principal(principal)``: ownership is checked there, never by the frontend.
"""

from errands.client._client import (
    QUERY_TIMEOUT,
    Client,
    StartOptions,
    TaskSummary,
    connect,
    new_session_id,
    new_task_id,
    task_input,
)
from errands.client._handle import TaskHandle, TaskInfo
from errands.client._identify import Authenticator
from errands.client._notify import Delivery, GivenTarget
from errands.client._push import PushTarget, add_target, remove_target, targets_of
from errands.client._upgrade import TaskOnOldVersion

__all__ = [
    "QUERY_TIMEOUT",
    "Authenticator",
    "Client",
    "Delivery",
    "GivenTarget",
    "PushTarget",
    "StartOptions",
    "TaskHandle",
    "TaskInfo",
    "TaskOnOldVersion",
    "TaskSummary",
    "add_target",
    "connect",
    "new_session_id",
    "new_task_id",
    "remove_target",
    "targets_of",
    "task_input",
]
