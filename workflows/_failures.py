"""Reading an activity or child failure: its kind, whether time may clear it, and its words."""

from __future__ import annotations

import re
from dataclasses import dataclass

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    RetryState,
    TimeoutError,
)

from workflows._options import raise_if_cancelled

with workflow.unsafe.imports_passed_through():
    from errands.errors import NON_RECOVERABLE


@dataclass(frozen=True)
class Failure:
    kind: str
    message: str
    attempts: int = 1

    @property
    def non_recoverable(self) -> bool:
        return self.kind in NON_RECOVERABLE

    @property
    def transient(self) -> bool:
        return self.kind == "transient"


def describe(error: BaseException, max_attempts: int = 1) -> Failure:
    """The innermost application failure behind an activity or child error.

    A cancellation is not a failure to describe: it is raised on as ``asyncio.CancelledError`` so
    the workflow ends canceled instead of recording the branch or round as failed.
    """
    raise_if_cancelled(error)
    cause: BaseException | None = error
    attempts = 1
    if (
        isinstance(error, ActivityError)
        and error.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED
    ):
        attempts = max_attempts
    while isinstance(cause, (ActivityError, ChildWorkflowError)) and cause.cause is not None:
        cause = cause.cause
    if isinstance(cause, ApplicationError):
        return Failure(cause.type or "internal", cause.message, attempts)
    if isinstance(cause, TimeoutError):
        return Failure(
            "transient", f"timed out ({cause.type.name if cause.type else 'timeout'})", attempts
        )
    return Failure("internal", str(cause), attempts)


_WILL_RETRY = re.compile(r"the activity retry policy will try again")


def settled(message: str) -> str:
    """``message`` once nothing will try again: the provider classifier writes its errors for
    an attempt that will be retried, which a task or branch that gave up must not repeat."""
    return _WILL_RETRY.sub("retrying did not help", message)


def attempts_failed(error: BaseException, max_attempts: int) -> str:
    """Why a work-tool call whose every attempt failed (its worker kept dying) has no result,
    for the model to read. A cancellation is raised on, as by ``describe``."""
    failure = describe(error, max_attempts)
    tries = "attempt" if failure.attempts == 1 else "attempts"
    return f"{failure.attempts} {tries} failed: {settled(failure.message)}"
