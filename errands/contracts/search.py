"""Typed search attributes: what operators filter on in the Temporal UI and in
``temporal workflow list --query``.

They must be registered on the namespace (``errands dev`` and the test servers do it; see deploy/
for a cluster). A task started with ``search_attributes=False`` never touches them.
"""

from __future__ import annotations

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

STATE = SearchAttributeKey.for_keyword("ErrandsState")
WAITING = SearchAttributeKey.for_bool("ErrandsWaitingForUser")
ROUND = SearchAttributeKey.for_int("ErrandsRound")
COST = SearchAttributeKey.for_float("ErrandsCost")
SESSION = SearchAttributeKey.for_keyword("ErrandsSession")


def initial(session_id: str) -> TypedSearchAttributes:
    """Set by the frontend at start, so an unregistered attribute fails the start, not the task."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(STATE, "running"),
            SearchAttributePair(WAITING, False),
            SearchAttributePair(ROUND, 0),
            SearchAttributePair(SESSION, session_id),
        ]
    )
