"""Nothing a model sends can drive the terminal (issue 23, item 3): each escape sequence of the
issue, put in a reply, a question, its header and an option label, shows as visible text in
`errands status`, `wait`, `history` and the picker of `errands run`, read through a real pty and
a terminal emulator (pyte); `--json` prints the exact text, escapes intact.

The CLI under test is the real `errands` command against the test stack: the dev server, the
test worker and the scripted model behind the real openai SDK."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import re
import struct
import sys
import termios
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pyte
import pytest

from errands.adapters.scripted import ScriptedModelServer
from errands.cli._output import question_text
from errands.cli._terminal import indented, one_line, shown
from errands.client import Client as Errands
from errands.settings import Settings
from tests.conftest import ROOT, run_cli
from tests.helpers import ask, eventually, final

COLUMNS, ROWS = 400, 200
"""A terminal wide enough that no line the picker draws is cut."""

SEQUENCES = {
    "clear": ("\x1b[2J", r"\x1b[2J"),
    "red": ("\x1b[31m", r"\x1b[31m"),
    "up": ("\x1b[1A", r"\x1b[1A"),
    "clipboard": ("\x1b]52;c;cm0gLXJmIH4=\x07", r"\x1b]52;c;cm0gLXJmIH4=\x07"),
    "link": (
        "\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\",
        r"\x1b]8;;http://evil.example\x1b\click\x1b]8;;\x1b\ ".strip(),
    ),
    "cr": ("\r", r"\r"),
    "csi": ("\x9b", r"\x9b"),
}
"""Each sequence of the issue: what the model sends, and how the terminal must show it."""


def spiked(where: str) -> str:
    """Every sequence, each between markers that name it and where it was put."""
    return " ".join(
        f"<{where}.{name}>{raw}</{where}.{name}>" for name, (raw, _) in SEQUENCES.items()
    )


def visible(where: str) -> list[str]:
    """What the terminal must show of ``spiked(where)``: each sequence as text."""
    return [f"<{where}.{name}>{shown_}</{where}.{name}>" for name, (_, shown_) in SEQUENCES.items()]


def raw(where: str) -> list[bytes]:
    """``spiked(where)``'s sequences as they must never reach the terminal."""
    return [f"<{where}.{n}>{r}</{where}.{n}>".encode() for n, (r, _) in SEQUENCES.items()]


REPLY = "Done. " + spiked("reply")
QUESTION = "Which one? " + spiked("question")
HEADER = "Pick " + spiked("header")
LABEL = "First " + spiked("label")
DESCRIPTION = "About it " + spiked("description")
TEXT = "Set it up " + spiked("user")
HOSTILE_QUESTION = {
    "question": QUESTION,
    "header": HEADER,
    "options": [{"label": LABEL, "description": DESCRIPTION}, {"label": "Second"}],
}


# -- the function every printed text goes through ---------------------------------------------


@pytest.mark.fast
@pytest.mark.parametrize("name", list(SEQUENCES))
def test_each_sequence_is_shown_as_text(name: str) -> None:
    sequence, expected = SEQUENCES[name]
    assert shown(f"a{sequence}b") == f"a{expected}b"
    assert one_line(f"a{sequence}b") == f"a{expected}b"


@pytest.mark.fast
def test_shown_output_holds_no_control_character_but_newline_and_tab() -> None:
    every = "".join(map(chr, range(0x00, 0x100))) + "\u202e\u200b\u2066\u2028\u2029\ufeff\udcff"
    out = shown(every)
    assert not [c for c in out if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]
    assert not {"\u202e", "\u200b", "\u2066", "\u2028", "\u2029", "\ufeff", "\udcff"} & set(out)
    assert r"\u202e" in out and r"\udcff" in out
    assert "\n" in out and "\t" in out
    assert "\n" not in one_line(every) and "\t" not in one_line(every)


NEVER_RAW = {
    "C0 control": "\x07",
    "DEL": "\x7f",
    "C1 control": "\x85",
    "format (bidi override)": "\u202e",
    "surrogate": "\udcff",
    "private use": "\ue000",
    "unassigned": "\u0378",
    "line separator": "\u2028",
    "paragraph separator": "\u2029",
    "variation selector": "\ufe0f",
    "variation selector supplement": "\U000e0100",
    "Hangul choseong filler": "\u115f",
    "Hangul jungseong filler": "\u1160",
    "Hangul filler": "\u3164",
    "halfwidth Hangul filler": "\uffa0",
    "blank braille cell": "\u2800",
    "combining grapheme joiner": "\u034f",
    "Khmer inherent vowel": "\u17b4",
    "Mongolian free variation selector": "\u180b",
    "Mongolian vowel separator": "\u180e",
    "invisible operator range (unassigned)": "\u2065",
    "tag character": "\U000e0041",
    "default-ignorable, unassigned": "\U000e0fff",
}
"""One character of each class that never reaches a terminal (nor a call a person approves) as
itself (``errands.contracts.visible``)."""
SPACES = {"no-break space": "\u00a0", "em space": "\u2003", "ideographic space": "\u3000"}
"""Spaces other than U+0020: a terminal prints them; a call a person approves escapes them."""


def terminal_escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


@pytest.mark.fast
@pytest.mark.parametrize("name", list(NEVER_RAW))
def test_each_class_that_never_shows_as_itself_is_printed_as_its_escape(name: str) -> None:
    char = NEVER_RAW[name]
    assert shown(f"a{char}b") == f"a{terminal_escape(char)}b"


@pytest.mark.fast
@pytest.mark.parametrize("name", list(SPACES))
def test_a_space_other_than_the_plain_one_prints_as_it_is(name: str) -> None:
    assert shown(f"a{SPACES[name]}b") == f"a{SPACES[name]}b"


@pytest.mark.fast
def test_plain_text_and_other_languages_stay_as_they_are() -> None:
    text = "Grüße, 你好, مرحبا, emoji 🎉 and a\ttab\nnew line"
    assert shown(text) == text


@pytest.mark.fast
def test_indented_continues_every_line_behind_the_indent() -> None:
    assert indented("one\nanswer with: errands answer x q1=rm") == (
        "one\n    answer with: errands answer x q1=rm"
    )


@pytest.mark.fast
def test_a_question_cannot_print_a_line_that_passes_for_the_clis_own() -> None:
    fake = "Which?\nanswer with: errands answer t-1 q1=yes\r\x1b[1Aq1=rm"
    pending = {
        "questions": [
            {
                "id": "q1",
                "header": "H\nanswer with: x",
                "question": fake,
                "multi_select": False,
                "options": [
                    {"label": "yes\nanswer with: y", "description": None, "free_text": False},
                    {"label": "Other", "description": None, "free_text": True},
                ],
            }
        ]
    }
    lines = question_text("t-1", pending).split("\n")
    ours = [line for line in lines if line.startswith("answer with:")]
    assert ours == [r"answer with: errands answer t-1 'q1=yes\nanswer with: y'"], lines
    assert "    answer with: errands answer t-1 q1=yes\\r\\x1b[1Aq1=rm (choose one)" in lines


# -- the real CLI through a pty ---------------------------------------------------------------


class Pty:
    """The real `errands ARGS` with a pty as its terminal (stdin, stdout and stderr), the master
    end drained all the time into ``output``."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        self.output = bytearray()
        self.lock = threading.Lock()
        self.args = args
        self.env = env
        self.slave = slave
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> Pty:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "errands.cli",
            *self.args,
            env=self.env,
            cwd=ROOT,
            stdin=self.slave,
            stdout=self.slave,
            stderr=self.slave,
            start_new_session=True,
        )
        os.close(self.slave)
        self.reader.start()
        return self

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: the command ended and closed its end
                return
            if not data:
                return
            with self.lock:
                self.output += data

    def seen(self) -> bytes:
        with self.lock:
            return bytes(self.output)

    async def wait_for(self, text: str, timeout: float = 90) -> None:
        await eventually(
            lambda: text.encode() in self.seen(), f"{text!r} on the terminal", timeout=timeout
        )

    def press(self, key: bytes) -> None:
        os.write(self.master, key)

    async def finish(self, timeout: float = 120) -> int:
        assert self.proc is not None
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        await asyncio.to_thread(self.reader.join, 10)
        os.close(self.master)
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()


async def in_pty(env: dict[str, str], *args: str) -> bytes:
    """What `errands ARGS` printed on a terminal, once it has ended (it must end with 0)."""
    term = await Pty(env, *args).start()
    try:
        code = await term.finish()
    finally:
        term.kill()
    assert code == 0, term.seen()
    return term.seen()


def screen_of(output: bytes) -> tuple[list[str], pyte.Screen]:
    """The terminal's screen after ``output``: its lines, and the screen (for attributes)."""
    screen = pyte.Screen(COLUMNS, ROWS)
    pyte.ByteStream(screen).feed(output)
    return [line.rstrip() for line in screen.display], screen


def assert_neutralised(
    output: bytes, *places: str, own_styling: bool = False, cut: tuple[str, ...] = ()
) -> list[str]:
    """Each sequence put in ``places`` is on the screen as text, and none put in ``places`` or
    ``cut`` (a text the picker cuts to the width) reached the terminal raw; the screen's lines
    are returned. Without ``own_styling`` (the CLI's plain output) not one ESC, CR (beyond the
    pty's CR LF), BEL or C1 byte may be printed at all."""
    lines, screen = screen_of(output)
    text = "".join(screen.display)  # the rows end to end: a line the terminal wrapped is whole
    for where in places:
        for expected in visible(where):
            assert expected in text, f"{expected!r} is not on the screen:\n" + "\n".join(lines)
    for where in places + cut:
        for sequence in raw(where):
            assert sequence not in output, f"{sequence!r} reached the terminal"
    assert b"\x1b]" not in output, "an OSC sequence reached the terminal"
    assert b"\x07" not in output and b"\xc2\x9b" not in output
    if not own_styling:
        plain = output.replace(b"\r\n", b"\n")
        assert b"\x1b" not in plain and b"\r" not in plain, plain
        assert not re.search(rb"\xc2[\x80-\x9f]", plain), plain
    coloured = {(y, x) for y, row in screen.buffer.items() for x, c in row.items() if c.fg == "red"}
    assert not coloured, "the model's colour reached the screen"
    return lines


@pytest.fixture
def model(scripted: ScriptedModelServer) -> Iterator[str]:
    name = f"gpt-hostile-{uuid.uuid4().hex[:6]}"
    scripted.script(name, ask(HOSTILE_QUESTION), final(REPLY))
    yield f"openai:{name}"


async def test_escape_sequences_show_as_text_in_the_picker_status_wait_and_history(
    worker: object, cli_env: dict[str, str], model: str, settings: Settings, client: Any
) -> None:
    env = {**cli_env, "ERRANDS_MODEL": model}
    session = f"tty-{uuid.uuid4().hex[:8]}"
    run = await Pty(env, "run", TEXT, "--session", session).start()
    try:
        # The picker: the question, its header, the label and its description, as text.
        await run.wait_for(visible("label")[-1])
        match = re.search(rb"task (\S+) in session", run.seen())
        assert match is not None, run.seen()
        task = match.group(1).decode()
        assert_neutralised(
            run.seen(), "question", "header", "label", own_styling=True, cut=("description",)
        )

        # status while the question waits: text, and the exact question in --json.
        waiting = await in_pty(env, "status", task)
        lines = assert_neutralised(waiting, "question", "header", "label", "description")
        assert f"{task}: waiting_for_user" in lines
        as_json = await run_cli(env, "status", task, "--json")
        question = as_json.json()["pending_question"]["questions"][0]
        assert question["question"] == QUESTION
        assert question["header"] == HEADER
        assert question["options"][0] == {**question["options"][0], "label": LABEL}
        assert question["options"][0]["description"] == DESCRIPTION
        async with Errands(client, settings) as errands:
            exact = (await errands.task(task).status()).public()
        assert as_json.stdout == json.dumps(exact, ensure_ascii=False) + "\n"

        run.press(b"\r")  # the first option: the spiked label
        assert await run.finish() == 0, run.seen()
    finally:
        run.kill()
    assert_neutralised(run.seen(), "reply", own_styling=True)

    # wait, status and history once the task has replied.
    for args in (["wait", task], ["status", task]):
        lines = assert_neutralised(await in_pty(env, *args), "reply")
        assert f"{task}: replied" in lines, "the screen was cleared or overwritten"
    history = assert_neutralised(await in_pty(env, "history", session), "user", "reply")
    assert any(re.match(r"\[\d+\] user", line) for line in history), history
    # watch: the event log, the streamed reply and the question's events among it.
    watched = assert_neutralised(await in_pty(env, "watch", task))
    assert any(" question_asked " in line for line in watched), watched

    # --json: the exact document the API gives, every escape intact.
    async with Errands(client, settings) as errands:
        handle = errands.task(task)
        ended = {"status": (await handle.status()).public(), "wait": (await handle.wait()).public()}
    for command, document in ended.items():
        result = await run_cli(env, command, task, "--json")
        assert result.code == 0, result.stderr
        assert result.json()["reply"] == REPLY
        assert result.stdout == json.dumps(document, ensure_ascii=False) + "\n"
    shown_history = (await run_cli(env, "history", session, "--json")).json()
    texts = [m["text"] for m in shown_history["messages"]]
    assert TEXT in texts and REPLY in texts
