"""Render a session for one round: the messages the model sees and the catalog it cites.

Markers and catalog come from the same single pass, so ``[ref N]`` can never drift from what
``delegate`` references resolve to. A pure function of the stored rows and the task id: the
round's model call, its branches and a later side question all rebuild the same view.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from itertools import groupby

from errands.agent import prompts, reading
from errands.agent.control import DELEGATE
from errands.contracts import ids
from errands.contracts.messages import Message, StoredMessage, ToolCall
from errands.contracts.rows import BranchMeta


@dataclass(frozen=True)
class CatalogEntry:
    index: int
    message_id: str
    role: str
    text: str


@dataclass(frozen=True)
class RenderedSession:
    messages: list[Message]
    catalog: list[CatalogEntry]
    previewed: int = 0
    """Outputs rendered as previews (``errands.agent.reading``): ``read_message`` shows them."""


def subtask_id(round_: int, ordinal: int) -> str:
    return f"r{round_}-b{ordinal}"


def render_session(
    rows: list[StoredMessage],
    task_id: str,
    summary: StoredMessage | None = None,
    *,
    previews: int = reading.NONE,
) -> RenderedSession:
    """Turn the session's rows (in seq order) into model messages and the round's catalog.

    With a compaction ``summary``, ``rows`` are those after the stretch it covers: the summary
    opens the conversation, and the catalog numbers only what follows it (what the model sees).
    ``previews`` (``errands.agent.reading``): which bulky branch outputs render as previews.
    """
    branches = _branches_by_round(rows, task_id)
    latest = max(branches, default=None)
    shortened = {
        b.id
        for round_, group in branches.items()
        if previews == reading.ALL or (previews == reading.OLDER and round_ != latest)
        for b in group
        if len(b.text) > reading.PREVIEW_OVER
    }
    acks = {r.round: r for r in rows if r.kind == "ack" and r.task_id == task_id}
    messages: list[Message] = []
    if summary is not None:
        messages.append(Message(role="user", text=prompts.summary_message(summary.text)))
    catalog: list[CatalogEntry] = []
    restored: set[int] = set()
    for row in rows:
        if row.kind == "ack" and row.task_id == task_id:
            assert row.round is not None
            if row.round in branches:
                messages += delegate_exchange(
                    task_id, row.round, row, branches[row.round], shortened
                )
                restored.add(row.round)
            # An acknowledgement with no branches behind it is a crash between the two writes:
            # dropped, so the retried round decides afresh.
            continue
        if row.kind == "ack":
            # Another task's acknowledgement: context, but nothing to cite.
            messages.append(Message(role="assistant", text=row.text))
            continue
        if row.kind == "summary":
            # Only the one the rendering starts from is shown; the others it folded in.
            continue
        if row.kind not in ("user", "reply") or not row.text.strip():
            continue
        entry = CatalogEntry(len(catalog) + 1, row.id, row.role, row.text)
        catalog.append(entry)
        messages.append(Message(role=row.role, text=f"[ref {entry.index}] {row.text}"))
    # Rounds whose acknowledgement was compacted away still happened: their exchanges go last.
    for round_ in sorted(set(branches) - restored):
        messages += delegate_exchange(
            task_id, round_, acks.get(round_), branches[round_], shortened
        )
    return RenderedSession(messages=messages, catalog=catalog, previewed=len(shortened))


def delegate_exchange(
    task_id: str,
    round_: int,
    ack: StoredMessage | None,
    branches: list[StoredMessage],
    shortened: Collection[str] = (),
) -> list[Message]:
    """An earlier round's ``delegate`` call, as the model made it, with its real results (those
    in ``shortened`` as previews)."""
    metas = [BranchMeta.of(b) for b in branches]
    subtasks = [
        {
            key: getattr(meta, key)
            for key in ("type", "prompt", "references", "params")
            if key in meta.model_fields_set and getattr(meta, key) not in (None, [], {})
        }
        for meta in metas
    ]
    reply = ack.text if ack is not None else "(acknowledgement no longer in the conversation)"
    call_id = ids.delegate_call_id(task_id, round_)
    results = [
        {
            "subtask_id": subtask_id(round_, meta.ordinal),
            "type": meta.type if "type" in meta.model_fields_set else None,
            "status": meta.status if "status" in meta.model_fields_set else None,
            "output": reading.preview(b.text, b.seq) if b.id in shortened else b.text,
        }
        for b, meta in zip(branches, metas, strict=True)
    ]
    return [
        Message(
            role="assistant",
            tool_calls=[
                ToolCall(
                    id=call_id,
                    name=DELEGATE,
                    arguments=json.dumps(
                        {"reply": reply, "subtasks": subtasks}, ensure_ascii=False
                    ),
                )
            ],
        ),
        Message(
            role="tool",
            tool_call_id=call_id,
            tool_name=DELEGATE,
            text=json.dumps(results, ensure_ascii=False, indent=1),
        ),
    ]


def _branches_by_round(rows: list[StoredMessage], task_id: str) -> dict[int, list[StoredMessage]]:
    mine = [r for r in rows if r.kind == "branch" and r.task_id == task_id and r.round is not None]
    mine.sort(key=lambda r: (r.round or 0, BranchMeta.of(r).ordinal))
    return {round_: list(group) for round_, group in groupby(mine, key=lambda r: r.round or 0)}


def referenced_messages(catalog: list[CatalogEntry], references: list[int]) -> list[CatalogEntry]:
    """The cited entries, in index order, verbatim (no ``[ref`` marker)."""
    by_index = {e.index: e for e in catalog}
    return [by_index[i] for i in sorted(references) if i in by_index]
