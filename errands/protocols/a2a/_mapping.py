"""errands' tasks in A2A's words: the state of a task read from its event log (``Progress``),
each logged event as the A2A stream event it becomes, a task's messages as A2A ``Message`` s, and
what an incoming A2A message asks of a task (``Incoming``).

::

    errands (status / event)                 A2A
    running                                  working
    question_asked, approval_requested       input-required (status message: the question set or
                                             the tool call as a DataPart, and a text part)
    question_answered, approval_answered     working
    reply_delta of the main agent            artifact "reply": append=true; a new attempt or a
                                             superseded marker: append=false (a reset)
    replied                                  artifact "reply" whole (append=false, last_chunk),
                                             then completed
    failed                                   failed (status message: the error)
    canceled                                 canceled
    any other event                          a status update in the current state

Every stream event carries the errands event it came from in its metadata: ``errands.seq`` (a
string: protobuf's Struct would make a number a float), ``errands.type`` and, for status
updates, ``errands.event`` (the event as ``errands watch --json`` shows it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from a2a.helpers import get_data_parts, get_text_parts, new_data_part, new_text_part
from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf.json_format import MessageToDict

from errands.contracts.asking import OTHER_PREFIX
from errands.contracts.events import TERMINAL, StoredEvent
from errands.contracts.messages import StoredMessage
from errands.errors import InvalidRequest

SEQ = "errands.seq"
TYPE = "errands.type"
EVENT = "errands.event"
MODE = "errands.mode"
MODEL = "errands.model"
FALLBACK_MODEL = "errands.fallback_model"
HEADLESS = "errands.headless"
REPLY = "reply"
"""The name and id of the one artifact of a task: its reply."""

PAUSES = frozenset({"question_asked", "approval_requested"})
"""The events after which a task waits for its user: a stream ends there (input-required)."""

WORKING = TaskState.TASK_STATE_WORKING
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
COMPLETED = TaskState.TASK_STATE_COMPLETED
FAILED = TaskState.TASK_STATE_FAILED
CANCELED = TaskState.TASK_STATE_CANCELED
ENDED = frozenset({COMPLETED, FAILED, CANCELED, TaskState.TASK_STATE_REJECTED})

STATES: dict[str, TaskState] = {
    "running": WORKING,
    "waiting_for_user": INPUT_REQUIRED,
    "replied": COMPLETED,
    "failed": FAILED,
    "canceled": CANCELED,
}
"""errands' task status (``errands status``) → A2A task state."""

StreamEvent = TaskStatusUpdateEvent | TaskArtifactUpdateEvent


def _timestamp(status: TaskStatus, at: str | None) -> None:
    if at:
        try:
            status.timestamp.FromDatetime(datetime.fromisoformat(at))
        except ValueError:
            pass  # a time errands did not write; the status stands without one


def agent_message(task_id: str, context_id: str, key: str, parts: Sequence[Part]) -> Message:
    """A message of the agent's, under an id derived from what it says (``key``)."""
    return Message(
        message_id=f"{task_id}:{key}",
        role=Role.ROLE_AGENT,
        task_id=task_id,
        context_id=context_id,
        parts=list(parts),
    )


def question_parts(pending: dict[str, Any] | None, event: dict[str, Any]) -> list[Part]:
    """The question set a task waits on: a text part to read and a DataPart to render
    (``{"pending_question": …}`` as ``errands status --json`` shows it). ``pending``: the view
    of the waiting question set; None when it is no longer at hand (then what the log says)."""
    if pending is None:
        headers = ", ".join(str(h) for h in event.get("headers") or [])
        text = f"The task asked: {headers or 'a question'}."
        return [new_text_part(text), new_data_part({"question_asked": event})]
    asked = [str(q.get("question", "")) for q in pending.get("questions", [])]
    text = (
        "The task asks: "
        + " ".join(asked)
        + (
            ' Answer with a DataPart {"answers": {QUESTION_ID: [LABEL, …]}}, or in plain text '
            "when it asks one question."
        )
    )
    return [new_text_part(text), new_data_part({"pending_question": pending})]


def approval_parts(pending: dict[str, Any]) -> list[Part]:
    """A tool call waiting for approval: a text part and the call as a DataPart."""
    text = (
        f"The task waits for approval of a call of {pending.get('tool', 'a tool')}. Answer "
        'with a DataPart {"decision": "approve" | "approve_always" | "deny", "reason"?, '
        '"arguments_sha256"?}.'
    )
    return [new_text_part(text), new_data_part({"pending_approval": pending})]


def reply_artifact(text: str) -> Artifact:
    return Artifact(artifact_id=REPLY, name=REPLY, parts=[new_text_part(text)])


class Progress:
    """A task as its event log shows it so far, read in order with ``apply``: its A2A state,
    the reply text written live (the latest attempt of the main agent's reply, as
    ``errands.contracts.events.LiveText`` reads it) and the last ``seq`` read. ``apply`` also
    says what each event becomes on an A2A stream, so a stream resumed anywhere continues the
    state of one read from the start."""

    def __init__(self, task_id: str, context_id: str) -> None:
        self.task_id, self.context_id = task_id, context_id
        self.seq = 0
        self.text = ""
        self.ended: TaskState | None = None
        self.paused_at = 0
        """The seq of the latest question or approval request."""
        self.message: Message | None = None
        """The status message of the latest pause or ending."""
        self._question: str | None = None
        self._approvals: set[str] = set()
        self._shown: tuple[int, int] | None = None
        """(step, attempt) of the main reply's text shown."""

    @property
    def state(self) -> TaskState:
        if self.ended is not None:
            return self.ended
        return INPUT_REQUIRED if self._question or self._approvals else WORKING

    def answered(self) -> None:
        """What waited has been answered (the answer was accepted; its event may not be
        logged yet): the task works on."""
        self._question, self._approvals = None, set()
        if self.ended is None:
            self.message = None

    def apply(self, event: StoredEvent, detail: Any = None) -> list[StreamEvent]:
        """Take the next event of the log; return what it becomes on a stream. ``detail``: for
        ``question_asked`` the view of the waiting question set, for ``replied`` the reply."""
        self.seq = max(self.seq, event.seq)
        data = event.data
        if event.type == "task_started" and data.get("session_id"):
            self.context_id = str(data["session_id"])
        if event.type == "reply_delta" and data.get("where") == "main":
            artifact = self._delta(data)
            if artifact is not None:
                return [self._mark(artifact, event)]
        elif event.type == "question_asked":
            self._question = str(data.get("question_set_id") or "?")
            self._paused(event, question_parts(detail, data))
        elif event.type == "question_answered":
            self._question = None
        elif event.type == "approval_requested":
            self._approvals.add(str(data.get("approval_id")))
            self._paused(event, approval_parts(data))
        elif event.type == "approval_answered":
            self._approvals.discard(str(data.get("approval_id")))
        elif event.type in TERMINAL:
            return self._end(event, detail)
        return [self._status(event)]

    def _delta(self, data: dict[str, Any]) -> TaskArtifactUpdateEvent | None:
        key = (int(data.get("step", 0)), int(data.get("attempt", 1)))
        if self._shown is not None and key < self._shown:
            return None  # a late delta of an earlier attempt: shown as nothing
        text = "" if data.get("superseded") else str(data.get("text", ""))
        append = key == self._shown and not data.get("superseded")
        self._shown = key
        self.text = self.text + text if append else text
        return TaskArtifactUpdateEvent(
            task_id=self.task_id,
            context_id=self.context_id,
            artifact=reply_artifact(text),
            append=append,
        )

    def _paused(self, event: StoredEvent, parts: list[Part]) -> None:
        self.paused_at = event.seq
        self.message = agent_message(self.task_id, self.context_id, f"{event.seq}", parts)

    def _end(self, event: StoredEvent, detail: Any) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if event.type == "replied":
            self.ended, self.message = COMPLETED, None
            if isinstance(detail, str):
                self.text = detail
            whole = TaskArtifactUpdateEvent(
                task_id=self.task_id,
                context_id=self.context_id,
                artifact=reply_artifact(self.text),
                append=False,
                last_chunk=True,
            )
            out.append(self._mark(whole, event))
        elif event.type == "failed":
            self.ended = FAILED
            said = str(event.data.get("message") or "the task failed")
            self.message = agent_message(
                self.task_id, self.context_id, f"{event.seq}", [new_text_part(said)]
            )
        else:
            self.ended = CANCELED
            self.message = agent_message(
                self.task_id, self.context_id, f"{event.seq}", [new_text_part("canceled")]
            )
        out.append(self._status(event))
        return out

    def status(self, at: str | None = None) -> TaskStatus:
        """The task's status as read so far."""
        status = TaskStatus(state=self.state)
        if self.message is not None and self.state != WORKING:
            status.message.CopyFrom(self.message)
        _timestamp(status, at)
        return status

    def _status(self, event: StoredEvent) -> TaskStatusUpdateEvent:
        update = TaskStatusUpdateEvent(
            task_id=self.task_id, context_id=self.context_id, status=self.status(event.at)
        )
        update.metadata.update({EVENT: event.public()})
        return self._mark(update, event)

    def _mark(self, update: Any, event: StoredEvent) -> Any:
        update.metadata.update({SEQ: str(event.seq), TYPE: event.type})
        return update

    def task(self, *, history: Sequence[Message] = ()) -> Task:
        """The task as read so far (its reply, or the text written so far, as the artifact)."""
        task = Task(id=self.task_id, context_id=self.context_id, status=self.status())
        if self.text or self.state == COMPLETED:
            task.artifacts.append(reply_artifact(self.text))
        task.history.extend(history)
        task.metadata.update({SEQ: str(self.seq)})
        return task


def history(rows: Sequence[StoredMessage], task_id: str, last: int | None) -> list[Message]:
    """The task's messages of its session (the user's, acknowledgements, the reply) as A2A
    messages, oldest first; ``last``: only the newest that many."""
    shown = [
        Message(
            message_id=row.id,
            role=Role.ROLE_USER if row.role == "user" else Role.ROLE_AGENT,
            task_id=task_id,
            context_id=row.session_id,
            parts=[new_text_part(row.text)],
        )
        for row in rows
        if row.task_id == task_id and row.role in ("user", "assistant") and row.text
    ]
    if last is not None:
        shown = shown[len(shown) - last :] if last else []
    return shown


@dataclass(frozen=True)
class Incoming:
    """What an A2A message says to errands: its text, its first JSON object (an answer or a
    decision), and the errands options in its metadata (or the request's)."""

    text: str
    data: dict[str, Any] | None
    options: dict[str, Any]

    @classmethod
    def read(cls, request: SendMessageRequest) -> Incoming:
        message = request.message
        text = "\n".join(t for t in get_text_parts(message.parts) if t)
        objects = [d for d in get_data_parts(message.parts) if isinstance(d, dict)]
        options = {**MessageToDict(request.metadata), **MessageToDict(message.metadata)}
        return cls(text, objects[0] if objects else None, options)

    def option(self, name: str, kind: type) -> Any:
        value = self.options.get(name)
        if value is not None and not isinstance(value, kind):
            raise InvalidRequest(f"metadata {name} is a {kind.__name__}, not {value!r}")
        return value

    def answers(self, pending: dict[str, Any]) -> dict[str, Any]:
        """The answer to the waiting question set: the ``answers`` of the DataPart, or the
        text as the "Other" answer of its one question (a text question takes it as it is)."""
        if self.data is not None and "answers" in self.data:
            given = self.data["answers"]
            if not isinstance(given, dict):
                raise InvalidRequest(
                    'answers is an object {QUESTION_ID: [LABEL, …] or "text"}; send it so'
                )
            return given
        questions = pending.get("questions") or []
        if not self.text.strip():
            raise InvalidRequest(
                'the task waits for an answer: send {"answers": {QUESTION_ID: [LABEL, …]}} as '
                "a DataPart, or plain text when it asks one question"
            )
        if len(questions) != 1:
            ids = ", ".join(str(q.get("id")) for q in questions)
            raise InvalidRequest(
                f"the task asks {len(questions)} questions ({ids}); plain text answers one "
                'question only: send {"answers": {QUESTION_ID: [LABEL, …]}} as a DataPart'
            )
        [question] = questions
        if question.get("type") == "text":
            return {question["id"]: self.text.strip()}
        return {question["id"]: [f"{OTHER_PREFIX} {self.text.strip()}"]}
