"""How errands' refusals reach an A2A client: each ``errands.errors`` refusal as the A2A error
a client of either binding expects, its message kept word for word (another principal's task is
``TaskNotFoundError`` exactly as a missing one)::

    TaskNotFound                        TaskNotFoundError          -32001
    TaskEnded                           (as the call says: UnsupportedOperationError, or
                                        TaskNotCancelableError for CancelTask)
    InvalidRequest, AnswerRejected,     InvalidParamsError         -32602  (nothing changed)
    Conflict, SessionNotFound
    QuotaExceeded                       InvalidRequestError        -32600  data.retry_after
    Unavailable, NoWorker, any other    InternalError              -32603
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from errands.errors import (
    Conflict,
    ErrandsError,
    InvalidRequest,
    NotFound,
    QuotaExceeded,
    Refused,
    TaskEnded,
    TaskNotFound,
)


@contextmanager
def as_a2a(*, ended: type[A2AError] = UnsupportedOperationError) -> Iterator[None]:
    """Raise errands' refusals inside the block as A2A errors; ``ended``: what a task that has
    ended is for the call."""
    try:
        yield
    except TaskNotFound as error:
        raise TaskNotFoundError(message=error.message) from None
    except TaskEnded as error:
        raise ended(message=error.message, data={"task_id": error.task_id}) from None
    except (InvalidRequest, Conflict, NotFound) as error:
        raise InvalidParamsError(message=error.message) from None
    except QuotaExceeded as error:
        raise InvalidRequestError(
            message=error.message, data={"retry_after": error.retry_after, "quota": error.quota}
        ) from None
    except Refused as error:
        raise InvalidRequestError(message=error.message) from None
    except ErrandsError as error:
        raise InternalError(message=error.message) from None
    except ValueError as error:  # a session id the store's rules refuse
        raise InvalidParamsError(message=str(error)) from None


def resume_point(header: str | None) -> int | None:
    """The ``Last-Event-ID`` a resuming client sends (the ``errands.seq`` of the last event it
    received), or None; anything but a sequence number is ``InvalidParamsError``."""
    if header is None:
        return None
    value = header.strip()
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        raise InvalidParamsError(
            message=f"Last-Event-ID {header!r} is no event of this task: send the errands.seq "
            "of the last event received, or leave the header out for a snapshot and what follows"
        )
    return int(value)
