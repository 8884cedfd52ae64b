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

from dataclasses import dataclass

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


def result_preview(text: str, number: int, limit_bytes: int) -> str:
    """A tool result too big for its request (over ``limit_bytes`` of UTF-8), as the request
    shows it: its head and its tail, what was left out between them, and the ``read_message``
    call (``result`` = ``number``) that pages through the whole of it. Fits in ``limit_bytes``."""
    pages = max(1, -(-len(text) // PAGE_CHARS))
    head_chars = max(200, min(limit_bytes // 2, 8_000))
    tail_chars = max(100, min(limit_bytes // 4, 2_000))
    head_chars, tail_chars = _fitting(text, head_chars, tail_chars, limit_bytes)
    left_out = len(text) - head_chars - tail_chars
    marker = (
        f"\n… [{left_out:,} of this result's {len(text):,} characters are left out here; "
        f"read_message(result {number}) shows all of it in {pages:,} page(s) of "
        f'{PAGE_CHARS:,} characters: call read_message with {{"result": {number}, "page": 1}} '
        "and go on with the next page] …\n"
    )
    return text[:head_chars] + marker + text[len(text) - tail_chars :]


def utf8_over(text: str, limit: int) -> bool:
    """Whether ``text`` takes more than ``limit`` bytes of UTF-8 (counted only when it might)."""
    if len(text) > limit:
        return True
    return len(text) * 4 > limit and len(text.encode("utf-8", "surrogatepass")) > limit


def _fitting(text: str, head: int, tail: int, limit_bytes: int) -> tuple[int, int]:
    """As many characters of head and tail as asked while they take at most three quarters of
    ``limit_bytes`` in UTF-8 (the marker takes the rest), halved until they do."""
    while head > 50 and len((text[:head] + text[-tail:]).encode()) > limit_bytes * 3 // 4:
        head, tail = head // 2, max(50, tail // 2)
    return head, tail


def read_message_spec() -> ToolSpec:
    return ToolSpec(
        name=READ_MESSAGE,
        description=(
            "Show the full text of an earlier output shown shortened, with a marker like "
            "'read_message(ref 12) shows all'. `ref` is the number in that marker (not a "
            "[ref N] citation); for a marker like 'read_message(result 3)', send `result` "
            f"instead. Texts longer than {PAGE_CHARS:,} characters come in pages: ask for the "
            "next `page` to go on."
        ),
        parameters={
            "type": "object",
            "properties": {
                "ref": {"type": "integer", "minimum": 1},
                "result": {"type": "integer", "minimum": 1},
                "page": {"type": "integer", "minimum": 1},
            },
            "additionalProperties": False,
        },
    )


@dataclass(frozen=True)
class Read:
    """What a ``read_message`` call asks for: page ``page`` of the output numbered ``number``,
    a stored row (``ref``) or, with ``result``, a tool result a request showed shortened (the
    main agent numbers those in the task's own results; a branch in its thread, as its refs)."""

    number: int
    page: int = 1
    result: bool = False

    @property
    def name(self) -> str:
        return f"{'result' if self.result else 'ref'} {self.number}"


def parse_read(arguments: str) -> Read | str:
    """What a call's arguments ask for, or what is wrong with them."""
    try:
        raw = parse_arguments(arguments, tool=READ_MESSAGE, send='an object like {"ref": 12}')
    except ModelMistake as error:
        return str(error)
    page = raw.get("page", 1)
    if "result" in raw and "ref" not in raw:
        number = raw["result"]
        if not isinstance(number, int) or isinstance(number, bool) or number < 1:
            return "`result` must be the number a 'read_message(result N)' marker names, such as 3."
        if not isinstance(page, int) or isinstance(page, bool) or page < 1:
            return "`page` must be a whole number from 1."
        return Read(number, page, result=True)
    ref = raw.get("ref")
    if not isinstance(ref, int) or isinstance(ref, bool) or ref < 1:
        return "`ref` must be the number a 'read_message(ref N)' marker names, such as 12."
    if not isinstance(page, int) or isinstance(page, bool) or page < 1:
        return "`page` must be a whole number from 1."
    return Read(ref, page)


def read_page(row: StoredMessage | None, read: Read) -> tuple[str, bool]:
    """The page of a stored output ``read`` asks for, headed by where it stands; and whether
    it is an error (``row`` None: nothing is stored under that number)."""
    page, name = read.page, read.name
    if row is None or not row.text:
        missing = f"There is no output with {name}; use the number a read_message marker names."
        return missing, True
    pages = max(1, -(-len(row.text) // PAGE_CHARS))
    if page > pages:
        beyond = f"{name} has {pages} page(s) of {PAGE_CHARS:,} characters: ask for 1-{pages}."
        return beyond, True
    start = (page - 1) * PAGE_CHARS
    text = row.text[start : start + PAGE_CHARS]
    if pages == 1:
        return text, False
    more = f"; page {page + 1} goes on" if page < pages else "; the last page"
    head = (
        f"({name}, page {page} of {pages}: characters {start + 1:,}-{start + len(text):,} of "
        f"{len(row.text):,}{more})\n"
    )
    return head + text, False


def capped_result(
    text: str, max_bytes: int, *, read_bytes: int | None = None, more: bool = False
) -> str:
    """A tool result as it is stored: ``text`` itself when it takes at most ``max_bytes`` of
    UTF-8, else its start cut to fit, ending with a note that tells the model how much was
    dropped (the dropped part is gone: not even ``read_message`` shows it). ``read_bytes``: the
    size of the whole result when more was sent than ``text`` holds (a transport that stopped
    reading); ``more``: the transport stopped before the end, so the whole was longer still."""
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    if size <= max_bytes and read_bytes is None:
        return text
    longer = "more than " if more else ""
    what = (
        f"the tool's answer was {longer}{read_bytes:,}"
        if read_bytes
        else f"this result was {size:,}"
    )

    def note(kept: int) -> str:
        return (
            f"\n[errands: {what} bytes long; only the first {kept:,} bytes of its text were "
            "kept (ERRANDS_TOOL_RESULT_MAX_BYTES) and the rest was dropped: nothing can show "
            "it. If you need more of it, ask the tool for a narrower or paged answer.]"
        )

    room = max(0, max_bytes - len(note(max_bytes).encode()))
    if size > room:
        text = text.encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore")
    return text + note(len(text.encode("utf-8", "surrogatepass")))


TRUNCATION_MARK = " […truncated]"


def cap_text(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, the cut marked so the reader knows."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(TRUNCATION_MARK))] + TRUNCATION_MARK
