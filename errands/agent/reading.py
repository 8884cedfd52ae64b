"""Previews of bulky outputs, and the ``read_message`` work tool that shows them in full
(SPEC §7). The first and cheapest way to fit a window: tool results and branch outputs over
``PREVIEW_OVER`` characters render as their first ``PREVIEW_KEEP`` characters and a marker
naming ``read_message(ref N)``, N being the row's position in its session (or branch thread).
The full text stays in the store. ``OLDER`` shortens those older than the latest round (or
step); when that is not enough, ``ALL`` shortens the latest round's too, before anything is
summarised away.

Pure functions: the workflows import this module.
"""

from __future__ import annotations

from errands.agent.arguments import parse_arguments
from errands.contracts.messages import StoredMessage, ToolSpec
from errands.errors import ModelMistake

READ_MESSAGE = "read_message"

NONE, OLDER, ALL = 0, 1, 2
"""Preview levels: nothing shortened; outputs older than the latest round (or step); all."""
PREVIEW_OVER = 2_000
"""Characters past which an old output renders as a preview."""
PREVIEW_KEEP = 1_200
"""Characters a preview keeps from the start of the output."""
PAGE_CHARS = 16_000
"""Characters one ``read_message`` result shows: a longer text comes in pages."""


def preview(text: str, ref: int) -> str:
    """``text`` itself when it is short, else its start and the marker that shows the rest."""
    if len(text) <= PREVIEW_OVER:
        return text
    omitted = len(text) - PREVIEW_KEEP
    return (
        f"{text[:PREVIEW_KEEP]}\n… {omitted:,} characters omitted; read_message(ref {ref}) "
        "shows all"
    )


def read_message_spec() -> ToolSpec:
    return ToolSpec(
        name=READ_MESSAGE,
        description=(
            "Show the full text of an earlier output shown shortened, with a marker like "
            "'read_message(ref 12) shows all'. `ref` is the number in that marker (not a "
            f"[ref N] citation). Texts longer than {PAGE_CHARS:,} characters come in pages: "
            "ask for the next `page` to go on."
        ),
        parameters={
            "type": "object",
            "properties": {
                "ref": {"type": "integer", "minimum": 1},
                "page": {"type": "integer", "minimum": 1},
            },
            "required": ["ref"],
            "additionalProperties": False,
        },
    )


def parse_read(arguments: str) -> tuple[int, int] | str:
    """``(ref, page)`` from a call's arguments, or what is wrong with them."""
    try:
        raw = parse_arguments(arguments, tool=READ_MESSAGE, send='an object like {"ref": 12}')
    except ModelMistake as error:
        return str(error)
    ref, page = raw.get("ref"), raw.get("page", 1)
    if not isinstance(ref, int) or isinstance(ref, bool) or ref < 1:
        return "`ref` must be the number a 'read_message(ref N)' marker names, such as 12."
    if not isinstance(page, int) or isinstance(page, bool) or page < 1:
        return "`page` must be a whole number from 1."
    return ref, page


def read_page(row: StoredMessage | None, ref: int, page: int) -> tuple[str, bool]:
    """One page of a stored output, headed by where it stands; and whether it is an error."""
    if row is None or not row.text:
        missing = f"There is no output with ref {ref}; use the number a read_message marker names."
        return missing, True
    pages = max(1, -(-len(row.text) // PAGE_CHARS))
    if page > pages:
        beyond = f"ref {ref} has {pages} page(s) of {PAGE_CHARS:,} characters: ask for 1-{pages}."
        return beyond, True
    start = (page - 1) * PAGE_CHARS
    text = row.text[start : start + PAGE_CHARS]
    if pages == 1:
        return text, False
    more = f"; page {page + 1} goes on" if page < pages else "; the last page"
    head = (
        f"(ref {ref}, page {page} of {pages}: characters {start + 1:,}-{start + len(text):,} of "
        f"{len(row.text):,}{more})\n"
    )
    return head + text, False


TRUNCATION_MARK = " […truncated]"


def cap_text(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, the cut marked so the reader knows."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(TRUNCATION_MARK))] + TRUNCATION_MARK
