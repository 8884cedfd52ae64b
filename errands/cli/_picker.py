"""An interactive terminal picker for a pending question set, for ``errands run`` on a TTY.

``pick_answer`` walks the questions one by one and returns the answer in the wire form of
``errands.agent.asking`` (offered labels as offered, ``Other: <text>``, or the text of a text
question). Keys: Up/Down or k/j move, Space toggles (multi-select), Enter picks or confirms,
``d`` dismisses the whole set (all answers empty), Esc or Ctrl-C cancels it.

The terminal is put in raw mode so single keys arrive at once, and its settings are always
restored. Free text is read by a small line editor in the same raw mode rather than in cooked
mode: in cooked mode Ctrl-C becomes SIGINT, which Python delivers only to the main thread, so a
picker run under ``asyncio.to_thread`` would be left blocked in ``read``; raw mode also lets Esc
cancel while typing. Output is plain ANSI (no curses); raw mode turns off output processing, so
every line ends in an explicit CR LF. The only escape sequences written are the picker's own: the
model's header, question, labels and descriptions go through ``one_line`` first.
"""

from __future__ import annotations

import os
import select
import sys
import termios
import textwrap
import tty
from collections.abc import Callable
from typing import Any, TextIO

from errands.cli._terminal import one_line
from errands.contracts.asking import OTHER_PREFIX
from errands.errors import PickerClosed

BOLD, DIM, YELLOW, RESET = "\x1b[1m", "\x1b[2m", "\x1b[33m", "\x1b[0m"
HIDE_CURSOR, SHOW_CURSOR, CLEAR_BELOW = "\x1b[?25l", "\x1b[?25h", "\x1b[J"
ESC_WAIT = 0.05  # a bare Esc has no bytes after it; an arrow key's arrive together
OTHER_SHOWN = "Other (type your own answer)"
CHOICE_KEYS = "Up/Down move, Enter pick, d dismiss, Esc cancel"
MULTI_KEYS = "Up/Down move, Space toggle, Enter confirm, d dismiss, Esc cancel"
NAMED_KEYS = {b"\r": "enter", b"\n": "enter", b" ": "space", b"\x7f": "backspace",
              b"\x08": "backspace", b"\x15": "ctrl-u"}  # fmt: skip


def pick_answer(
    pending: dict[str, Any], *, stdin_fd: int | None = None, out: TextIO | None = None
) -> dict[str, Any]:
    """Ask every question of ``pending`` (a ``pending_view`` entry, wrapped or not) on the
    terminal behind ``stdin_fd`` (default: stdin), drawing on ``out`` (default: stdout)."""
    view = pending.get("pending_question", pending)
    questions = view["questions"]
    fd = sys.stdin.fileno() if stdin_fd is None else stdin_fd
    screen = _Screen(fd, out or sys.stdout)
    status, answers = "answered", {}
    saved = termios.tcgetattr(fd)
    try:
        # TCSANOW, not the default TCSAFLUSH: keys typed ahead must not be thrown away.
        tty.setraw(fd, termios.TCSANOW)
        screen.write(HIDE_CURSOR)
        for n, question in enumerate(questions, 1):
            header = one_line(question["header"])
            title = BOLD + screen.fit(f"{header}  ({n}/{len(questions)})")
            if question.get("type") == "text":
                values = _ask_text(screen, question, title)
            else:
                values = _ask_choice(screen, question, title)
            answers[question["id"]] = values
            screen.done(screen.fit(one_line(f"{header}: " + (", ".join(values) or "-"))))
    except PickerClosed as closed:
        if closed.dismissed:  # "don't decide for me, let's talk"
            answers = {question["id"]: [] for question in questions}
            screen.done(f"{DIM}Dismissed without choosing anything.")
        else:  # Esc, Ctrl-C, or the terminal went away: nothing is answered
            status, answers = "cancelled", {}
            screen.done(f"{DIM}Question cancelled; nothing was answered.")
    finally:
        screen.write(SHOW_CURSOR)
        termios.tcsetattr(fd, termios.TCSANOW, saved)
    return {"question_set_id": view["id"], "status": status, "answers": answers}


def _ask_choice(screen: _Screen, question: dict[str, Any], title: str) -> list[str]:
    options = list(question.get("options") or [])
    if not any(option.get("free_text") for option in options):
        # pending_view already lists the automatic Other last; add it only if a view lacks it.
        options.append({"label": "Other", "free_text": True})
    multi = bool(question.get("multi_select"))
    keys = MULTI_KEYS if multi else CHOICE_KEYS
    cursor, note = 0, ""
    chosen: dict[int, str] = {}  # option index -> its wire value

    def lines(hint: str) -> list[str]:
        rows = [title, *screen.wrap(question["question"])]
        for i, option in enumerate(options):
            label = one_line(
                chosen.get(i) or (OTHER_SHOWN if option.get("free_text") else option["label"])
            )
            mark = ("[x] " if i in chosen else "[ ] ") if multi else ""
            head = ("> " if i == cursor else "  ") + mark + label
            head = screen.fit(head)
            rest = screen.width - len(head) - 3
            description = option.get("description") if not option.get("free_text") else None
            tail = (
                f"{DIM}  {screen.fit(one_line(description), rest)}{RESET}"
                if description and rest > 8
                else ""
            )
            rows.append((BOLD + head + RESET if i == cursor else head) + tail)
        return [*rows, hint]

    while True:
        hint = YELLOW + screen.fit(note) if note else DIM + screen.fit(keys)
        screen.draw(lines(hint))
        key, note = screen.key(), ""
        if key in ("up", "k"):
            cursor = (cursor - 1) % len(options)
        elif key in ("down", "j"):
            cursor = (cursor + 1) % len(options)
        elif key == "d":
            raise PickerClosed(dismissed=True)
        elif multi and key == "space":
            if cursor in chosen:
                chosen.pop(cursor)
            elif options[cursor].get("free_text"):
                text = _other_text(screen, lines)
                if text:
                    chosen[cursor] = text
            else:
                chosen[cursor] = options[cursor]["label"]
        elif key == "enter" and multi:
            if chosen or not question.get("required", True):
                return [chosen[i] for i in sorted(chosen)]  # in the order offered
            note = "Choose at least one with Space first (or d to dismiss, Esc to cancel)."
        elif key == "enter" and options[cursor].get("free_text"):
            text = _other_text(screen, lines)
            if text:
                return [text]
        elif key == "enter":
            return [options[cursor]["label"]]


def _other_text(screen: _Screen, lines: Callable[[str], list[str]]) -> str:
    """The free Other as ``Other: <text>``, or "" (back to the list) when nothing was typed."""
    hint = "Type your own answer, Enter confirm (empty: back to the list), Esc cancel"
    text = screen.read_line(lines(DIM + screen.fit(hint)), f"{OTHER_PREFIX} ")
    return f"{OTHER_PREFIX} {text}" if text else ""


def _ask_text(screen: _Screen, question: dict[str, Any], title: str) -> list[str]:
    required = question.get("required", True)
    hint = "Type your answer, Enter submit" + ("" if required else " (empty: skip)")
    rows = [title, *screen.wrap(question["question"]), DIM + screen.fit(hint + ", Esc cancel")]
    while True:
        text = screen.read_line(rows, "> ")
        if text or not required:
            return [text] if text else []


class _Screen:
    """Keys in, a redrawable block of lines out. The block is redrawn in place, so each line
    is cut to the terminal width: a wrapped line would throw off the count of lines to erase."""

    def __init__(self, fd: int, out: TextIO) -> None:
        self.fd, self.out, self.pending, self.drawn = fd, out, b"", 0
        try:
            self.width = os.get_terminal_size(fd).columns or 80
        except OSError:
            self.width = 80

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def draw(self, lines: list[str]) -> None:
        """Replace the previous block; the cursor is left at the end of the last line."""
        up = f"\x1b[{self.drawn - 1}A" if self.drawn > 1 else ""
        self.write("\r" + up + CLEAR_BELOW + "\r\n".join(line + RESET for line in lines))
        self.drawn = len(lines)

    def done(self, summary: str) -> None:
        """Collapse the block into one summary line that stays in the scrollback."""
        self.draw([summary])
        self.write("\r\n")
        self.drawn = 0

    def fit(self, text: str, width: int | None = None) -> str:
        width = (self.width - 1) if width is None else width
        return text if len(text) <= width else text[: max(width - 3, 0)] + "..."

    def wrap(self, text: str) -> list[str]:
        """``text`` (the model's) in rows of the width, its lines kept, every control character
        and escape sequence made visible."""
        rows = (textwrap.wrap(one_line(line), self.width - 1) for line in text.split("\n"))
        return [row for line in rows for row in line]

    def read_line(self, rows: list[str], prompt: str) -> str:
        """A one-line editor (Backspace, Ctrl-U) below ``rows``; Enter returns the trimmed text."""
        text = ""
        self.write(SHOW_CURSOR)
        try:
            while True:
                room = self.width - len(prompt) - 1  # show the end of a long text, never wrap
                self.draw([*rows, prompt + text[-room:]])
                key = self.key()
                if key == "enter":
                    return text.strip()
                if key == "backspace":
                    text = text[:-1]
                elif key == "ctrl-u":
                    text = ""
                elif key == "space":
                    text += " "
                elif len(key) == 1:
                    text += key
        finally:
            self.write(HIDE_CURSOR)

    def key(self) -> str:
        """The next key: a named key ("up", "enter", ...), one typed character, or "" for a key
        the picker ignores. Esc and Ctrl-C close the picker wherever they are pressed."""
        byte = self._byte()
        if byte == b"\x1b":
            if not self.pending and not select.select([self.fd], [], [], ESC_WAIT)[0]:
                raise PickerClosed(dismissed=False)
            if self._byte() not in (b"[", b"O"):
                return ""  # Alt+key: not ours
            sequence = self._byte()
            while not 0x40 <= sequence[-1] <= 0x7E:  # CSI parameters run to a final byte
                sequence += self._byte()
            return {b"A": "up", b"B": "down"}.get(sequence[-1:], "")
        if byte == b"\x03":
            raise PickerClosed(dismissed=False)
        if byte in NAMED_KEYS:
            return NAMED_KEYS[byte]
        if byte[0] >= 0xC0:  # a UTF-8 lead byte: its count of leading 1 bits is the length
            size = 2 if byte[0] < 0xE0 else 3 if byte[0] < 0xF0 else 4
            for _ in range(size - 1):
                byte += self._byte()
        char = byte.decode("utf-8", errors="replace")
        return char if char.isprintable() else ""

    def _byte(self) -> bytes:
        if not self.pending:
            try:
                self.pending = os.read(self.fd, 1024)
            except OSError:  # EIO: the terminal was hung up
                self.pending = b""
            if not self.pending:
                raise PickerClosed(dismissed=False)
        byte, self.pending = self.pending[:1], self.pending[1:]
        return byte
