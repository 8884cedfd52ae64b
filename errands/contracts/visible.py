"""Which characters never show as themselves: the one table the terminal (``errands.cli``), the
approval canonicaliser (``errands.agent.approvals``) and the chaos checks share.

- ``never_raw``: a character a terminal must never print raw. C0 controls (but newline and
  tab), DEL and C1 (escape sequences, carriage return, bell); format characters (bidirectional
  overrides, zero-width marks), surrogates, private use and unassigned code points; line and
  paragraph separators; and every Unicode ``Default_Ignorable_Code_Point`` (variation selectors,
  Hangul fillers, tag characters: they render as nothing) with the blank braille cell, which
  renders as a space but is none.
- ``hidden_in_approval``: stricter, for the call a person approves. The same, plus tab and
  every space other than U+0020 (a no-break or an em space reads as a plain one).

The default-ignorable ranges are written out (Unicode 15.1, ``DerivedCoreProperties.txt``) so
they do not depend on the Python build; the categories come from ``unicodedata``.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right

DEFAULT_IGNORABLE: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
"""Inclusive ranges of ``Default_Ignorable_Code_Point``: characters a renderer shows as
nothing."""
BLANK_LOOKING = frozenset({0x2800})
"""Not default-ignorable, yet shown as a blank: the braille pattern with no dots."""

MAYBE_HIDDEN = re.compile(r"[^\x20-\x7e\n]")
"""Characters worth a closer look (anything but printable ASCII and newline): a text without
any needs no escaping."""

_NEVER_RAW_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_STARTS = tuple(start for start, _ in DEFAULT_IGNORABLE)


def default_ignorable(code: int) -> bool:
    at = bisect_right(_STARTS, code) - 1
    return at >= 0 and code <= DEFAULT_IGNORABLE[at][1]


def never_raw(char: str) -> bool:
    """Whether a terminal must print ``char`` as its escape (newline and tab print as they are)."""
    if char == "\n" or char == "\t":
        return False
    code = ord(char)
    if 0x20 <= code < 0x7F:
        return False
    return (
        unicodedata.category(char) in _NEVER_RAW_CATEGORIES
        or default_ignorable(code)
        or code in BLANK_LOOKING
    )


def hidden_in_approval(char: str) -> bool:
    """Whether the call a person approves shows ``char`` as its escape: what ``never_raw``
    escapes, tab, and every space but U+0020. Newline is the canonical JSON's own layout."""
    if char == "\n":
        return False
    if char == "\t":
        return True
    return never_raw(char) or (char != " " and unicodedata.category(char) == "Zs")
