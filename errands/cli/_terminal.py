"""Text that is safe to print on a terminal.

Everything the CLI prints that came from a model, a tool or a person passes through ``shown``
(or ``one_line`` for a field that must stay on one line): a terminal obeys escape sequences and
control characters, so a reply could otherwise clear the screen, recolour or rewrite earlier
lines (``\\r``, cursor up), write the clipboard (OSC 52) or hide a link (OSC 8). Each such
character is printed as its escape (``\\x1b``, ``\\r``, ``\\u202e``) instead, so the reader sees
that it was there; so is every character that renders as nothing or as a blank that is no space
(variation selectors, Hangul fillers, tag characters: ``errands.contracts.visible``).
``--json`` output does not pass through here: it stays byte-exact.
"""

from __future__ import annotations

from errands.contracts.visible import MAYBE_HIDDEN, never_raw


def _escape(char: str) -> str:
    code = ord(char)
    if char == "\r":
        return "\\r"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def shown(text: str) -> str:
    """``text`` with every control character and escape sequence made visible (``\\x1b[2J``
    prints as those five characters, not as a cleared screen). Newlines and tabs stay."""
    if not MAYBE_HIDDEN.search(text):
        return text
    return "".join(_escape(c) if never_raw(c) else c for c in text)


def one_line(text: str) -> str:
    """``shown``, with newlines and tabs escaped too: a label, a header or an id."""
    return shown(text).replace("\n", "\\n").replace("\t", "\\t")


def indented(text: str, indent: str = "    ") -> str:
    """``shown``, with every line after the first indented: a multi-line text inside the CLI's
    own lines cannot start a line that passes for one of them."""
    return shown(text).replace("\n", "\n" + indent)
