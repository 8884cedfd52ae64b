"""What each probe's failure means, for the reliability note: the symptom, where it comes from,
and the smallest way to see it. A probe that holds contributes nothing."""

from __future__ import annotations

from chaos._report import Run

FINDINGS: dict[str, str] = {
    "a 401 whose message echoes the key": (
        "**A provider key reaches workflow history through an error's cause** (DESIGN "
        "invariant 5). `ModelRouter.complete` raises the classified, redacted "
        "`ApplicationError` *from* the SDK exception; Temporal's failure converter serialises "
        "the cause chain, so the `ActivityTaskFailed` event's `failure.cause.message` holds the "
        "provider's raw text. When that text echoes the key (as some OpenAI-compatible servers "
        "do on 401), the key is in the exported history verbatim. Reproduce: script "
        '`Fail(401, f"Incorrect API key provided: {key}")` and search the task\'s '
        "`fetch_history().to_json()` for the key."
    ),
    "rejected control calls over 1 MB, twice": (
        "**Two large rejected control calls leave the task stuck** (DESIGN invariants 2 and "
        "6). Each rejected call and its error are appended to the slot's `extra` messages, which "
        "travel inside the next `round_step` activity input; two rejected calls of ~1.1 MB make "
        "that input exceed the 2 MB payload limit, the SDK refuses to upload the command, and "
        "the workflow task fails on every retry (the task shows RUNNING forever and queries "
        "fail). Reproduce: a model that answers `final_reply` with a text of 1,100,000 spaces, "
        "twice."
    ),
    "deeply nested control-call arguments": (
        "**Arguments nested beyond the JSON parser's recursion limit fail the task as "
        "`internal`** instead of being repaired (SPEC §1). `errands.control._arguments` catches "
        "`JSONDecodeError` only; the `RecursionError` escapes `_read_step` and the run's "
        "catch-all fails the task. (`errands.asking._questions._arguments` already catches "
        "it.) Reproduce: `final_reply` with arguments `'[' * 100000 + ']' * 100000`."
    ),
    "a subtask type that is not a string": (
        "**A `delegate` subtask whose `type` is a list or an object fails the task as "
        "`internal`** instead of being repaired (SPEC §1: unknown type is a repairable error). "
        "`errands.control._parse_subtask` tests `key not in by_key` on an unhashable value and "
        "raises `TypeError`. Reproduce: `delegate` with "
        '`{"reply": "ok", "subtasks": [{"type": ["general"], "prompt": "x"}]}`.'
    ),
    "an answer signal that is not a JSON object": (
        "**An answer signal whose payload is not a JSON object is dropped without a trace** "
        "(SPEC §2: an invalid signal is recorded and ignored). The SDK cannot decode it into "
        "the handler's `dict[str, Any]` parameter and drops the signal with a log line before "
        "`submit_answer` runs, so `answer_errors` never shows it. Reproduce: "
        '`handle.signal("submit_answer", ["q1", "PostgreSQL"])` on a task waiting on a '
        "question. Minor: the question stays pending, as it should."
    ),
}


def findings_of(run: Run) -> list[str]:
    """The findings of every probe that failed in this run, as note paragraphs."""
    failed = [
        name
        for outcome in run.outcomes
        if outcome.name == "probes"
        for name, verdict in outcome.facts.items()
        if verdict == "FAILS"
    ]
    return [f"{n}. {FINDINGS[name]}\n" for n, name in enumerate(failed, 1) if name in FINDINGS]
