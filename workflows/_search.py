"""Publishing the typed search attributes (``errands.contracts.search``) from a task.

They must be registered on the namespace (``errands dev`` and the test servers do it; see deploy/
for a cluster). A task started with ``search_attributes=False`` never touches them.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from errands.contracts.search import COST, ROUND, SESSION, STATE, WAITING


def session_value(session_id: str) -> str:
    """What this task's ``ErrandsSession`` holds: the value its starter set (the session id, or
    its digest when payloads are encrypted: the workflow has no key to make one), else the id."""
    return workflow.info().typed_search_attributes.get(SESSION) or session_id


PUBLISHED = (STATE, WAITING, ROUND, COST, SESSION)
"""The attributes a task keeps current itself."""


class Publisher:
    """Upserts only what changed: one small history event per change, none per query."""

    def __init__(self, enabled: bool, session_id: str = "") -> None:
        self._enabled = enabled
        self._session_value = session_value(session_id) if enabled and session_id else ""
        self._last: dict[str, object] = {}

    def known_from_start(self) -> None:
        """Count the attributes the task started with as published (its frontend sets them:
        ``errands.contracts.search.initial``), so a change upserts only what differs. Runs
        since 0.3.0 (``RunPatches.records_on_steps``); an earlier run upserted them again."""
        if not self._enabled:
            return
        started = workflow.info().typed_search_attributes
        for key in PUBLISHED:
            value = started.get(key)
            if value is not None:
                self._last[key.name] = value

    def publish(self, *, state: str, round_: int, cost: float | None = None) -> None:
        if not self._enabled:
            return
        wanted: dict[str, object] = {
            STATE.name: state,
            WAITING.name: state == "waiting_for_user",
            ROUND.name: round_,
        }
        if cost is not None:
            wanted[COST.name] = cost
        if self._session_value:
            # Also set here for tasks a frontend started without the initial attributes.
            wanted[SESSION.name] = self._session_value
        changed = {k: v for k, v in wanted.items() if self._last.get(k) != v}
        if not changed:
            return
        keys: dict[str, Any] = {k.name: k for k in PUBLISHED}
        workflow.upsert_search_attributes(
            [keys[name].value_set(value) for name, value in changed.items()]
        )
        self._last.update(changed)
