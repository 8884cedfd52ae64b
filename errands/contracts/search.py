"""Typed search attributes: what operators filter on in the Temporal UI and in
``temporal workflow list --query``.

With payload encryption on, ``ErrandsSession`` holds a keyed digest of the session id, never the
id (``errands.adapters.encryption.SessionTags``): search with ``session_filter``.

They must be registered on the namespace (``errands dev`` and the test servers do it; see deploy/
for a cluster). A task started with ``search_attributes=False`` never touches them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

STATE = SearchAttributeKey.for_keyword("ErrandsState")
WAITING = SearchAttributeKey.for_bool("ErrandsWaitingForUser")
ROUND = SearchAttributeKey.for_int("ErrandsRound")
COST = SearchAttributeKey.for_float("ErrandsCost")
SESSION = SearchAttributeKey.for_keyword("ErrandsSession")
OWNER = SearchAttributeKey.for_keyword("ErrandsOwner")
"""The id of the principal the task belongs to (SPEC §10); absent on a task nobody owns."""
SCHEDULE = SearchAttributeKey.for_keyword("ErrandsSchedule")
"""The name of the schedule whose fire started the task (SPEC §11), on the task, on the fire's
workflow and on the schedule itself (``errands-{NAME}``); absent on a task started otherwise."""


SESSION_MEMO = "errands_session"
"""The memo entry holding a task's session id: a payload, so encrypted with the others, and read
back where the search attribute holds only a digest."""


def initial(session_value: str, owner: str | None = None) -> TypedSearchAttributes:
    """Set by the frontend at start, so an unregistered attribute fails the start, not the task.
    ``session_value``: the session id, or its digest with encryption on; ``owner``: the id of
    the principal the task belongs to, if anyone's."""
    pairs: list[SearchAttributePair[Any]] = [
        SearchAttributePair(STATE, "running"),
        SearchAttributePair(WAITING, False),
        SearchAttributePair(ROUND, 0),
        SearchAttributePair(COST, 0.0),
        SearchAttributePair(SESSION, session_value),
    ]
    if owner is not None:
        pairs.append(SearchAttributePair(OWNER, owner))
    return TypedSearchAttributes(pairs)


def owner_filter(owner: str) -> str:
    """The visibility query clause for the tasks of principal ``owner`` (a checked principal
    id: no quote can be in it)."""
    return f"{OWNER.name} = '{owner}'"


def session_filter(values: Sequence[str]) -> str:
    """The visibility query clause for tasks whose ``ErrandsSession`` is one of ``values``
    (checked session ids or digests: no quote can be in them)."""
    if len(values) == 1:
        return f"{SESSION.name} = '{values[0]}'"
    quoted = ", ".join(f"'{v}'" for v in values)
    return f"{SESSION.name} IN ({quoted})"
