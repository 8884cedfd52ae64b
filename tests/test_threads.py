"""Branch threads in the session store (SQLite): opened once, with the cited messages verbatim,
whichever of the round's acknowledgement or the branch's own first step gets there first."""

from __future__ import annotations

from pathlib import Path

from activities._threads import open_threads
from errands.adapters.store import open_store
from errands.contracts import ids
from errands.contracts.activities import OpenBranchInput
from errands.contracts.messages import NewMessage


def opening(thread_id: str, prompt: str) -> OpenBranchInput:
    return OpenBranchInput(
        thread_id=thread_id,
        task_id="t1",
        session_id="s1",
        catalog_upto_seq=1,
        prompt=prompt,
        references=[1],
    )


def test_threads_open_with_their_prompt_and_cited_message_and_never_change(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'sessions.db'}")
    try:
        store.append_once(
            NewMessage(id="u1", session_id="s1", role="user", kind="user", text="Lisbon, please")
        )
        open_threads(store, [opening("t1/r0/b1", "About food"), opening("t1/r0/b2", "About trams")])
        # A branch's first step finds its thread opened already: nothing is written again.
        open_threads(store, [opening("t1/r0/b1", "a different prompt")])

        for thread, prompt in (("t1/r0/b1", "About food"), ("t1/r0/b2", "About trams")):
            rows = store.list_session(thread)
            assert [r.id for r in rows] == [ids.thread_instructions_id(thread)]
            assert prompt in rows[0].text and "Lisbon, please" in rows[0].text
    finally:
        store.close()
