"""A branch's thread in the session store: its opening, its messages, and its row in the task's
session. Blocking functions: activities call them through ``store_work``."""

from __future__ import annotations

from collections.abc import Sequence

from activities._context import session_view
from activities._events import branch_of, event, preview
from errands.adapters.store import SessionStore
from errands.agent import prompts, reading
from errands.agent.catalog import CatalogEntry, referenced_messages, render_session, subtask_id
from errands.contracts import ids
from errands.contracts.activities import OpenBranchInput, RecordBranchInput
from errands.contracts.events import NewEvent
from errands.contracts.messages import Message, NewMessage, StoredMessage
from errands.contracts.rows import BranchMeta, StepMeta, ToolResultMeta


def open_threads(store: SessionStore, openings: Sequence[OpenBranchInput]) -> None:
    """Start each branch's thread with its instructions and the messages it cites, verbatim.
    A thread already opened is left as it is; the catalog is rendered once for all of them."""
    todo = [o for o in openings if store.get(ids.thread_instructions_id(o.thread_id)) is None]
    catalogs: dict[tuple[str, str, int, str | None], list[CatalogEntry]] = {}
    for opening in todo:
        pinned = opening.view.summary_id if opening.view else None
        key = (opening.session_id, opening.task_id, opening.catalog_upto_seq, pinned)
        if key not in catalogs:
            view = session_view(store, opening.session_id, opening.catalog_upto_seq, opening.view)
            catalogs[key] = render_session(view.rows, opening.task_id, view.summary).catalog
        cited = referenced_messages(catalogs[key], opening.references)
        store.append_once(
            NewMessage(
                id=ids.thread_instructions_id(opening.thread_id),
                session_id=opening.thread_id,
                role="user",
                kind="note",
                text=prompts.branch_opening(opening.prompt, cited),
                task_id=opening.task_id,
            ),
            [branch_started(opening)],
        )


def branch_started(opening: OpenBranchInput) -> NewEvent:
    """The ``branch_started`` event, written with the thread's opening."""
    branch = branch_of(opening.thread_id)
    round_, _, ordinal = branch.partition("/")
    return event(
        opening.task_id,
        f"branch:{branch}:started",
        "branch_started",
        opening.thread_id,
        round=int(round_.removeprefix("r") or 0),
        ordinal=int(ordinal.removeprefix("b") or 0),
    )


def thread_messages(rows: list[StoredMessage]) -> list[Message]:
    """A branch thread's rows as model messages."""
    out: list[Message] = []
    for row in rows:
        if row.kind == "step":
            out.append(
                Message(
                    role="assistant",
                    text=row.text,
                    tool_calls=StepMeta.of(row).tool_calls,
                )
            )
        elif row.kind == "tool_result":
            result = ToolResultMeta.of(row)
            out.append(
                Message(
                    role="tool",
                    text=row.text,
                    tool_call_id=result.tool_call_id,
                    tool_name=result.tool_name,
                    is_error=result.is_error,
                )
            )
        else:
            out.append(Message(role=row.role, text=row.text))
    return out


def write_branch_row(
    store: SessionStore, data: RecordBranchInput, last_step: str | None = None
) -> None:
    """A branch's row in the task's session; a completed branch's text is its thread's last
    step (``last_step`` when the caller has it at hand, else read from the thread)."""
    text = data.error or ""
    if data.status == "completed":
        if last_step is None:
            steps = [r for r in store.list_session(data.thread_id) if r.kind == "step"]
            last_step = steps[-1].text if steps else ""
        text = last_step
    store.append_once(
        NewMessage(
            id=ids.branch_row_id(data.task_id, data.round, data.ordinal),
            session_id=data.session_id,
            role="tool",
            kind="branch",
            text=text,
            task_id=data.task_id,
            round=data.round,
            meta=BranchMeta(
                ordinal=data.ordinal,
                subtask_id=subtask_id(data.round, data.ordinal),
                thread_id=data.thread_id,
                status=data.status,
                **data.draft.model_dump(),
            ).stored(),
        ),
        [
            event(
                data.task_id,
                f"branch:r{data.round}/b{data.ordinal}:finished",
                "branch_finished",
                data.thread_id,
                round=data.round,
                ordinal=data.ordinal,
                subtask_type=data.draft.type,
                status=data.status,
                output=preview(text),
            )
        ],
    )


def read_stored(
    store: SessionStore, session_id: str, results: str, arguments: str
) -> tuple[str, bool]:
    """A ``read_message`` call on ``session_id`` (a session or a branch's thread): the page it
    asks for, or what is wrong with the call; and whether it is an error. A call that names a
    ``result`` reads the session ``results``: the main agent's own tool results (apart from its
    session), or a branch's thread itself, where its tool results are rows. Blocking."""
    parsed = reading.parse_read(arguments)
    if isinstance(parsed, str):
        return parsed, True
    where = results if parsed.result else session_id
    found = store.list_session(where, after_seq=parsed.number - 1, upto_seq=parsed.number)
    return reading.read_page(found[0] if found else None, parsed)
