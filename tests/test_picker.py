"""The terminal picker for ``errands run``, driven through a real pseudo-terminal: keystrokes go
in at the master end, ``pick_answer`` reads the slave end in raw mode, and every returned
payload must be an answer the workflow would accept."""

from __future__ import annotations

import json
import os
import pty
import termios
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from errands.agent.asking import clean_answer, is_dismissal, parse_ask_user, pending_view
from errands.cli._picker import pick_answer
from errands.contracts.asking import QuestionSet
from errands.contracts.messages import ToolCall

pytestmark = pytest.mark.fast

TIMEOUT = 5.0
DOWN, UP, ENTER, SPACE, ESC = b"\x1b[B", b"\x1b[A", b"\r", b" ", b"\x1b"

DB = {
    "question": "Which DB?",
    "header": "DB",
    "options": [
        {"label": "PostgreSQL", "description": "the usual choice"},
        {"label": "SQLite"},
    ],
}
FEATURES = {
    "question": "Which features?",
    "header": "Features",
    "multi_select": True,
    "options": [{"label": "Search"}, {"label": "Export"}, {"label": "Sharing"}],
}
NAME = {"question": "What should the project be called?", "header": "Name", "type": "text"}


def question_set(*questions: dict[str, Any]) -> QuestionSet:
    call = ToolCall(id="c", name="ask_user", arguments=json.dumps({"questions": list(questions)}))
    return parse_ask_user(call, set_id="set-1")


class Terminal:
    """``pick_answer`` on the slave end of a pty, in a thread; the master end is drained all
    the time so the picker's writes never block."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        self.out = os.fdopen(os.dup(self.slave), "w", encoding="utf-8")
        self.before = termios.tcgetattr(self.slave)
        self.screen = bytearray()
        self.seen = 0
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()
        self.result: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.picker: threading.Thread | None = None

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 4096)
            except OSError:  # EIO once every slave descriptor is closed
                return
            if not data:
                return
            with self.changed:
                self.screen += data
                self.changed.notify_all()

    def start(self, qs: QuestionSet) -> None:
        def run() -> None:
            try:
                self.result = pick_answer(pending_view(qs), stdin_fd=self.slave, out=self.out)
            except BaseException as error:  # noqa: BLE001 - reported by finish()
                self.error = error

        self.picker = threading.Thread(target=run, daemon=True)
        self.picker.start()

    def wait_for(self, text: str) -> None:
        """Wait until ``text`` is drawn after everything waited for so far."""
        needle = text.encode()
        deadline = time.monotonic() + TIMEOUT
        with self.changed:
            while (found := self.screen.find(needle, self.seen)) < 0:
                left = deadline - time.monotonic()
                assert left > 0, f"{text!r} never drawn; screen: {bytes(self.screen[-600:])!r}"
                self.changed.wait(left)
            self.seen = found + len(needle)

    def press(self, *keys: bytes) -> None:
        for key in keys:
            os.write(self.master, key)
            time.sleep(0.01)  # keys apart, as typed: a lone Esc is told from an arrow by time

    def finish(self) -> dict[str, Any]:
        assert self.picker is not None
        self.picker.join(TIMEOUT)
        assert not self.picker.is_alive(), "pick_answer did not return"
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result

    def close(self) -> None:
        self.out.close()
        os.close(self.slave)
        self.reader.join(TIMEOUT)
        os.close(self.master)


@pytest.fixture
def term() -> Iterator[Terminal]:
    terminal = Terminal()
    yield terminal
    terminal.close()


def answer(term: Terminal, qs: QuestionSet) -> dict[str, Any]:
    """The payload, checked against what the workflow's update validator accepts, and the
    terminal settings checked back as they were before the picker ran."""
    payload = term.finish()
    assert termios.tcgetattr(term.slave) == term.before
    assert payload["question_set_id"] == qs.id
    clean_answer(qs, payload)  # raises AnswerRejected if the workflow would reject it
    return payload


def test_single_select_picks_the_second_option(term: Terminal) -> None:
    qs = question_set(DB)
    term.start(qs)
    term.wait_for("Enter pick")
    term.press(DOWN, ENTER)
    assert answer(term, qs) == {
        "question_set_id": "set-1",
        "status": "answered",
        "answers": {"q1": ["SQLite"]},
    }


def test_j_and_k_move_and_wrap_around(term: Terminal) -> None:
    qs = question_set(DB)
    term.start(qs)
    term.wait_for("Enter pick")
    term.press(b"j", b"j", b"j", b"k", UP, ENTER)  # 0 -> 1 -> Other -> 0 -> Other -> SQLite
    assert answer(term, qs)["answers"] == {"q1": ["SQLite"]}


def test_options_show_descriptions_and_other_once(term: Terminal) -> None:
    qs = question_set(DB)
    term.start(qs)
    term.wait_for("Enter pick")
    shown = bytes(term.screen).decode()
    assert "PostgreSQL" in shown and "the usual choice" in shown
    assert shown.count("Other (type your own answer)") == 1
    assert "Your own answer" not in shown  # the view's description of Other is not shown
    term.press(ENTER)
    assert answer(term, qs)["answers"] == {"q1": ["PostgreSQL"]}


def test_multi_select_toggles_two_and_needs_one(term: Terminal) -> None:
    qs = question_set(FEATURES)
    term.start(qs)
    term.wait_for("Space toggle")
    term.press(ENTER)  # nothing chosen yet: refused, it is required
    term.wait_for("at least one")
    term.press(SPACE, DOWN, SPACE, DOWN, SPACE, UP, SPACE)  # on Search, Export, Sharing; off Export
    term.wait_for("[x] Sharing")
    term.press(ENTER)
    assert answer(term, qs)["answers"] == {"q1": ["Search", "Sharing"]}


def test_other_opens_a_line_prompt_for_free_text(term: Terminal) -> None:
    qs = question_set(DB)
    term.start(qs)
    term.wait_for("Enter pick")
    term.press(DOWN, DOWN, ENTER)
    term.wait_for("Other: ")
    term.press(b"a managed servixx", b"\x7f", b"\x7f", b"ce", ENTER)
    assert answer(term, qs)["answers"] == {"q1": ["Other: a managed service"]}


def test_empty_other_goes_back_to_the_list(term: Terminal) -> None:
    qs = question_set(DB)
    term.start(qs)
    term.wait_for("Enter pick")
    term.press(UP, ENTER)
    term.wait_for("Other: ")
    term.press(ENTER)
    term.wait_for("Enter pick")
    term.press(DOWN, ENTER)  # from Other down wraps to the first option
    assert answer(term, qs)["answers"] == {"q1": ["PostgreSQL"]}


def test_other_in_a_multi_select(term: Terminal) -> None:
    qs = question_set(FEATURES)
    term.start(qs)
    term.wait_for("Space toggle")
    term.press(UP, SPACE)
    term.wait_for("Other: ")
    term.press("Kalender-Sync für Teams".encode(), ENTER)
    term.wait_for("[x] Other: Kalender-Sync")
    term.press(DOWN, SPACE, ENTER)
    assert answer(term, qs)["answers"] == {"q1": ["Search", "Other: Kalender-Sync für Teams"]}


def test_text_question_is_a_line_prompt(term: Terminal) -> None:
    qs = question_set(DB, NAME)
    term.start(qs)
    term.wait_for("Enter pick")
    term.press(ENTER)
    term.wait_for("What should the project be called?")
    term.press(ENTER)  # required: an empty line is not an answer
    term.press(b"errands", ENTER)
    assert answer(term, qs) == {
        "question_set_id": "set-1",
        "status": "answered",
        "answers": {"q1": ["PostgreSQL"], "q2": ["errands"]},
    }


def test_esc_cancels_the_whole_set(term: Terminal) -> None:
    qs = question_set(DB, FEATURES)
    term.start(qs)
    term.wait_for("Enter pick")
    term.press(DOWN, ENTER)
    term.wait_for("Space toggle")
    term.press(ESC)
    assert answer(term, qs) == {"question_set_id": "set-1", "status": "cancelled", "answers": {}}


@pytest.mark.parametrize("where", ["list", "typing"])
def test_ctrl_c_cancels(term: Terminal, where: str) -> None:
    qs = question_set(DB)
    term.start(qs)
    term.wait_for("Enter pick")
    if where == "typing":
        term.press(UP, ENTER)
        term.wait_for("Other: ")
        term.press(b"half a thought")
    term.press(b"\x03")
    assert answer(term, qs)["status"] == "cancelled"


def test_d_dismisses_with_every_answer_empty(term: Terminal) -> None:
    qs = question_set(DB, FEATURES)
    term.start(qs)
    term.wait_for("Enter pick")
    term.press(ENTER)  # the first answer is dropped too: a dismissal chooses nothing
    term.wait_for("d dismiss")
    term.press(b"d")
    payload = answer(term, qs)
    assert payload == {
        "question_set_id": "set-1",
        "status": "answered",
        "answers": {"q1": [], "q2": []},
    }
    assert is_dismissal(clean_answer(qs, payload))


def test_settings_are_restored_when_the_picker_fails(term: Terminal) -> None:
    broken = {"id": "set-1", "questions": [{"id": "q1", "header": "DB"}]}  # no question text
    with pytest.raises(KeyError):
        pick_answer(broken, stdin_fd=term.slave, out=term.out)
    assert termios.tcgetattr(term.slave) == term.before
