"""The bug behind each probe, for the reliability note: the symptom, where it came from, and the
smallest way to see it. Each was found by this suite; a probe that holds pins the fix."""

from __future__ import annotations

from chaos._report import Run

FINDINGS: dict[str, str] = {
    "a 401 whose message echoes the key": (
        "**A provider key reached workflow history through an error's cause** (DESIGN "
        "invariant 5). `ModelRouter.complete` raised the classified, redacted "
        "`ApplicationError` *from* the SDK exception; Temporal's failure converter serialises "
        "the cause chain, so the `ActivityTaskFailed` event's `failure.cause.message` held the "
        "provider's raw text. When that text echoes the key (as some OpenAI-compatible servers "
        "do on 401), the key was in the exported history verbatim. Reproduce: script "
        '`Fail(401, f"Incorrect API key provided: {key}")` and search the task\'s '
        "`fetch_history().to_json()` for the key."
    ),
    "rejected control calls over 1 MB, twice": (
        "**Two large rejected control calls left the task stuck** (DESIGN invariants 2 and 6). "
        "Each rejected call and its error were appended to the slot's `extra` messages, which "
        "travel inside the next `round_step` activity input; two rejected calls of ~1.1 MB made "
        "that input exceed the 2 MB payload limit, the SDK refused to upload the command, and "
        "the workflow task failed on every retry (RUNNING forever, queries failing). Reproduce: "
        "a model that answers `final_reply` with a text of 1,100,000 spaces, twice."
    ),
    "deeply nested control-call arguments": (
        "**Arguments nested beyond the JSON parser's recursion limit failed the task as "
        "`internal`** instead of being repaired (SPEC §1). `errands.agent.control._arguments` "
        "caught `JSONDecodeError` only; the `RecursionError` escaped `_read_step` and the run's "
        "catch-all failed the task. Reproduce: `final_reply` with arguments "
        "`'[' * 100000 + ']' * 100000`."
    ),
    "a subtask type that is not a string": (
        "**A `delegate` subtask whose `type` was a list or an object failed the task as "
        "`internal`** instead of being repaired (SPEC §1: an unknown type is a repairable "
        "error). `errands.agent.control._parse_subtask` tested `key not in by_key` on an "
        "unhashable value and raised `TypeError` (found by hypothesis in "
        "`tests/test_properties.py`). "
        'Reproduce: `delegate` with `{"reply": "ok", "subtasks": [{"type": ["general"], '
        '"prompt": "x"}]}`.'
    ),
    "an answer signal that is not a JSON object": (
        "**An answer signal whose payload was not a JSON object was dropped without a trace** "
        "(SPEC §2: an invalid signal is recorded and ignored). The SDK could not decode it into "
        "the handler's `dict[str, Any]` parameter and dropped the signal with a log line before "
        "`submit_answer` ran, so `answer_errors` never showed it. Reproduce: "
        '`handle.signal("submit_answer", ["q1", "PostgreSQL"])` on a task waiting on a '
        "question. Minor: the question stayed pending, as it should."
    ),
}


def findings_of(run: Run) -> list[str]:
    """Every probe of this run as a note paragraph: the bug it looks for, open or fixed."""
    verdicts = {
        name: verdict
        for outcome in run.outcomes
        if outcome.name == "probes"
        for name, verdict in outcome.facts.items()
        if name in FINDINGS
    }
    return [
        f"{n}. {'**Open.** ' if verdict == 'FAILS' else 'Fixed; the probe holds. '}"
        f"{FINDINGS[name]}\n"
        for n, (name, verdict) in enumerate(verdicts.items(), 1)
    ]
