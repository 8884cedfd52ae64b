"""Every errands exception, split by who must act, and the one list of failure kinds.

::

    ErrandsError                  what happened and what to do next, in its message
    ├── ConfigError               the operator's configuration: fix the named setting
    │   └── UnreadablePayload     a payload's encryption key is not among the configured keys
    ├── Unavailable               a service did not answer or start: retry later
    │   ├── TemporalUnreachable   no Temporal frontend at the address
    │   ├── StoreUnavailable      the session store's database could not be opened
    │   ├── DevServerError        the embedded Temporal dev server could not start
    │   └── NoWorker              no worker took up the task in time (names the task queue)
    ├── Refused                   the caller's request: fix it and send it again
    │   ├── InvalidRequest        malformed input: blank text, a bad id, an unknown model
    │   │   └── AnswerRejected    an answer that does not fit the pending question
    │   ├── Unauthorized          no credential, or one refused (the reason says why)
    │   ├── NotFound              nothing the caller may see has that id (missing, or another's)
    │   │   ├── TaskNotFound      no such task for the caller
    │   │   ├── SessionNotFound   no such session for the caller
    │   │   └── ScheduleNotFound  no such schedule for the caller
    │   ├── QuotaExceeded         over a quota of the caller's: ``retry_after`` seconds
    │   └── Conflict              the task's state does not allow it (nothing pending, busy…)
    │       └── TaskEnded         the task has ended, so it cannot take the request
    ├── ModelMistake              a model's tool call is wrong; handed back to the model to repair
    ├── Failed                    the request ran and failed; ``kind`` says how
    │   ├── TaskFailed            a task ended failed or canceled; ``result`` is its result
    │   └── SideQuestionFailed    no model answered a side question
    ├── Stopped                   a command was stopped by a signal
    └── PickerClosed              the terminal picker closed without a choice (the picker's own)

Frontends map the tree, each in one place: the CLI's exit codes in ``errands.cli``
(``TaskFailed`` → 1, ``Stopped`` → 128 + the signal, everything else → 2) and the gateway's HTTP
statuses in ``errands.gateway._errors``.

``FailureKind`` names why a task (or one of its model calls) failed. The same ``Literal`` types
task results, the provider error classifier and the activity retry policy, so the three cannot
drift apart. This module imports nothing but the standard library: workflow code uses it.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:
    from errands.contracts.workflows import TaskResult

FailureKind = Literal[
    "exhausted",
    "credential",
    "permission",
    "unknown_model",
    "invalid_request",
    "payload_too_large",
    "context",
    "transient",
    "internal",
    "canceled",
    "terminated",
    "timed_out",
]
"""Why a task failed.

- ``transient``: timeouts, connection errors, 408/409/429/5xx; retried, then the task fails.
- ``credential``, ``permission``, ``unknown_model``, ``invalid_request``, ``payload_too_large``:
  a provider refused the request; no retry or fallback can clear it.
- ``context``: the conversation did not fit the model's context window, even after compacting
  it (SPEC §7); a larger window (``ERRANDS_MODELS``), another model or a new session clears it.
- ``exhausted``: no model produced a usable decision within the repairs and the step budget.
- ``internal``: a bug in errands (or a plugin); report it.
- ``canceled``, ``terminated``, ``timed_out``: the task was stopped from outside: cancelled, an
  operator's termination, a workflow timeout.
"""

FAILURE_KINDS: tuple[FailureKind, ...] = get_args(FailureKind)

NON_RECOVERABLE: tuple[FailureKind, ...] = (
    "credential",
    "permission",
    "unknown_model",
    "invalid_request",
    "payload_too_large",
    "context",
    "internal",
)
"""Kinds no retry or fallback can clear: the same dead credential would be presented again.
Model activities' retry policy names them as non-retryable error types."""

PROVIDER_KINDS: tuple[FailureKind, ...] = ("transient", *NON_RECOVERABLE)
"""The kinds the provider error classifier gives a failed model call."""


class ErrandsError(Exception):
    """Every errands exception. The message says what happened, which id, what to do next."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# -- the operator's configuration -------------------------------------------------------------


class ConfigError(ErrandsError):
    """A setting has a value errands cannot use. ``setting`` names it (an environment variable
    or a flag) when one setting is to blame."""

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


class UnreadablePayload(ConfigError, ValueError):
    """A payload names an encryption key this process does not hold, or does not decrypt with
    the key of its id. The message names key ids only, never a key or what the payload holds,
    so it stays readable where the key is missing. Also a ValueError, as a codec's failure to
    decode is."""

    def __init__(self, message: str) -> None:
        super().__init__(message, setting="ERRANDS_ENCRYPTION_KEYS")


# -- a service that did not answer: retry later -----------------------------------------------


class Unavailable(ErrandsError, RuntimeError):
    """A service errands needs did not answer or could not start; trying later may work. Also
    a RuntimeError, as what the SDKs raise for the same trouble is."""


class TemporalUnreachable(Unavailable):
    """No Temporal frontend answered at the address; the message says where and what to check."""


class StoreUnavailable(Unavailable):
    """The database behind a usable store URL could not be opened (a URL errands cannot use at
    all is a ``ConfigError``)."""


class DevServerError(Unavailable):
    """The embedded dev server could not start. ``port`` is set when the reason is a port that
    something else already listens on."""

    def __init__(self, message: str, *, port: int | None = None) -> None:
        super().__init__(message)
        self.port = port


class NoWorker(Unavailable):
    """A running task's worker did not answer in time; ``task_queue`` is the queue that lacks
    one (or whose worker is stuck)."""

    def __init__(self, message: str, *, task_queue: str) -> None:
        super().__init__(message)
        self.task_queue = task_queue


# -- a refused request: the caller's fix ------------------------------------------------------


class Refused(ErrandsError):
    """The request cannot be carried out as sent; nothing was changed."""


class InvalidRequest(Refused):
    """Malformed input: blank text, an id errands cannot address, an unknown model spec, bad
    command-line arguments. ``field`` names the argument at fault when one is (``model``,
    ``fallback_model``, …), so a frontend can name it its own way (a flag, a JSON field)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class AnswerRejected(InvalidRequest, ValueError):
    """An answer that does not fit the pending question: unknown question id, a label not
    offered, several labels for a single choice, a blank required answer. Also a ValueError:
    the workflow's update validator raises it, and its signal handler records it."""


class Unauthorized(Refused):
    """The HTTP gateway needs ``Authorization: Bearer <token>`` and got none or a wrong one;
    ``challenge`` is the ``WWW-Authenticate`` value to answer with. ``guess``: the credential
    proves nothing (a wrong secret, a bad signature, garbage), so it counts towards slowing its
    sender; a revoked key or an expired token whose secret or signature verified does not."""

    def __init__(self, message: str, *, challenge: str = "Bearer", guess: bool = True) -> None:
        super().__init__(message)
        self.challenge = challenge
        self.guess = guess


class NotFound(Refused):
    """Nothing the caller may see has that id: it does not exist, or it is someone else's
    (SPEC §10: another principal's task or session is answered exactly as a missing one)."""


class TaskNotFound(NotFound):
    """No task has that id (or the id names a workflow that is not a task), or the task is not
    the caller's to see."""


class SessionNotFound(NotFound):
    """No session the caller may see has that id."""


class ScheduleNotFound(NotFound):
    """No schedule the caller may see has that name: none exists (Temporal's own not-found of
    ``errands-NAME``), or it is someone else's."""


class QuotaExceeded(Refused):
    """A start over one of the acting principal's quotas (``ERRANDS_QUOTAS``): nothing was
    started. ``retry_after``: seconds until the quota allows it again (the HTTP ``Retry-After``);
    ``quota``: which one (``running_tasks``, ``starts_per_hour``, ``cost_per_day_usd``)."""

    def __init__(self, message: str, *, quota: str, retry_after: int) -> None:
        super().__init__(message)
        self.quota = quota
        self.retry_after = retry_after


class Conflict(Refused):
    """The task's state does not allow the request: it has no question pending, is already
    answering a side question, or a task with that id exists already."""


class TaskEnded(Conflict):
    """The task has ended (``ended``: how Temporal closed it, e.g. ``completed``), so it cannot
    take the request (``consequence``: what that means for it); its result is still there to
    read, and each frontend says how."""

    def __init__(self, task_id: str, ended: str, consequence: str) -> None:
        super().__init__(f"task {task_id} has ended ({ended}); {consequence}")
        self.task_id = task_id
        self.ended = ended
        self.consequence = consequence


# -- the model's fix --------------------------------------------------------------------------


class ModelMistake(ErrandsError, ValueError):
    """A model's tool call cannot be used as made. The message is written for the model, which
    gets it back as an error tool result and repairs the call; no frontend ever sees it."""


# -- the request ran and failed ---------------------------------------------------------------


class Failed(ErrandsError):
    """What was asked ran, and failed; ``kind`` is one of ``FailureKind``."""

    def __init__(self, message: str, *, kind: FailureKind) -> None:
        super().__init__(message)
        self.kind = kind


class TaskFailed(Failed):
    """A task ended without a reply (failed or canceled); ``result`` is its full result."""

    def __init__(self, result: TaskResult) -> None:
        error = result.error
        kind: FailureKind = error.kind if error else "internal"
        message = error.message if error else f"task {result.task_id} ended {result.status}"
        super().__init__(f"task {result.task_id} {result.status}: {message}", kind=kind)
        self.result = result


class SideQuestionFailed(Failed):
    """No model answered a side question (the task itself is not affected)."""


# -- a command stopped from outside -----------------------------------------------------------


class Stopped(ErrandsError):
    """SIGTERM or SIGHUP stopped a command; ``signum`` is the signal's number."""

    def __init__(self, signum: int, name: str) -> None:
        super().__init__(f"stopped by {name}")
        self.signum = signum


class PickerClosed(ErrandsError):
    """The question picker on a terminal was left without a choice: ``dismissed`` (the ``d``
    key: answered with nothing chosen) or cancelled (Esc, Ctrl-C, the terminal went away).
    Raised and caught inside ``errands.cli._picker``, which turns it into the answer it sends."""

    def __init__(self, *, dismissed: bool) -> None:
        super().__init__("dismissed" if dismissed else "cancelled")
        self.dismissed = dismissed


def failure_kind(value: Any) -> FailureKind:
    """``value`` as a failure kind; anything unknown is ``internal`` (a bug to report)."""
    return value if value in FAILURE_KINDS else "internal"


# -- inside the session store: never raised to a caller of errands ------------------------------


class TransactionLost(sqlite3.OperationalError):
    """A SQLite store's transaction spanning several calls (``SqliteStore.begin_at_once``) was
    not committed: SQLite rolled it back after an error (an I/O error, out of memory), or the
    commit failed. None of its writes stayed, including those of calls that had returned;
    ``errands.adapters.store.store_work`` runs the work again on a thread."""


# -- inside the MCP client: never raised to a caller of errands ---------------------------------


class McpUnsent(Exception):  # noqa: N818 - what happened to the request, not an error kind
    """An MCP request failed before it reached the server (over HTTP: the connection was refused,
    or the server forgot the session): it did not run. ``cause`` is the failure, worded."""

    def __init__(self, cause: ConnectionError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class McpBroken(Exception):  # noqa: N818 - as McpUnsent
    """An MCP connection failed after the request was sent: it may have run. ``cause`` is the
    failure, worded."""

    def __init__(self, cause: ConnectionError) -> None:
        super().__init__(str(cause))
        self.cause = cause


# -- inside the webhook adapter: a delivery's outcome, or a 422 where a URL is given ----------


class WebhookRefused(InvalidRequest):
    """A notification URL the delivery policy refuses (SPEC §11): not https (http only for an
    allowed host), a user name or password in it, or a host that is, or resolves to, a private,
    loopback, link-local or otherwise non-public address the policy does not allow. Nothing was
    sent, and the same URL is refused until it or the policy changes. ``reason`` is one line
    naming the host and address, never the URL's path or query (they may hold a token)."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"notification URL refused: {reason}. Give a public https:// URL, or allow its "
            "host in the notification policy",
            field="notify",
        )
        self.reason = reason


__all__ = [
    "FAILURE_KINDS",
    "NON_RECOVERABLE",
    "PROVIDER_KINDS",
    "AnswerRejected",
    "ConfigError",
    "Conflict",
    "DevServerError",
    "ErrandsError",
    "Failed",
    "FailureKind",
    "InvalidRequest",
    "ModelMistake",
    "NoWorker",
    "NotFound",
    "PickerClosed",
    "QuotaExceeded",
    "Refused",
    "ScheduleNotFound",
    "SessionNotFound",
    "SideQuestionFailed",
    "Stopped",
    "StoreUnavailable",
    "TaskEnded",
    "TaskFailed",
    "TaskNotFound",
    "TemporalUnreachable",
    "Unauthorized",
    "Unavailable",
    "UnreadablePayload",
    "failure_kind",
]
