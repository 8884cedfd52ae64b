"""The typed seams read what older code wrote: bare values that recorded histories hold for the
store calls' outputs, and the meta of rows already in users' stores."""

from __future__ import annotations

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter

from errands.contracts.activities import (
    AckOutput,
    DecisionsOutput,
    JoinOutput,
    MessageOutput,
    ReadMessageOutput,
    ReplyOutput,
)
from errands.contracts.messages import StoredMessage
from errands.contracts.rows import AckMeta, BranchMeta, StepMeta, SummaryMeta, ToolResultMeta

pytestmark = pytest.mark.fast


async def _decoded(value: object, as_type: type) -> object:
    """``value`` written to a payload as 0.1.0 wrote it, read back as ``as_type``."""
    converter = pydantic_data_converter
    payloads = await converter.encode([value])
    [decoded] = await converter.decode(payloads, [as_type])
    return decoded


@pytest.mark.parametrize(
    ("bare", "output", "field"),
    [
        ("Working on it.", AckOutput, "text"),
        (7, MessageOutput, "seq"),
        ("The answer.", ReplyOutput, "text"),
        (True, ReadMessageOutput, "is_error"),
        ({"dec-0123456789abcdef": {"summary": "x"}}, DecisionsOutput, "decisions"),
        ({}, DecisionsOutput, "decisions"),
        ("joined", JoinOutput, "text"),
    ],
)
async def test_a_store_call_output_recorded_as_a_bare_value_still_reads(
    bare: object, output: type, field: str
) -> None:
    decoded = await _decoded(bare, output)
    assert isinstance(decoded, output)
    assert getattr(decoded, field) == bare


async def test_a_bare_null_stays_none_for_the_workflow_to_read_as_nothing_joined() -> None:
    # The data converter reads a null payload as None without asking the model.
    assert await _decoded(None, JoinOutput) is None


async def test_a_store_call_output_reads_its_own_form_back() -> None:
    written = DecisionsOutput(decisions={"dec-1": {"summary": "y"}})
    assert await _decoded(written, DecisionsOutput) == written
    assert await _decoded(JoinOutput(text=None), JoinOutput) == JoinOutput(text=None)


def _row(kind: str, meta: dict[str, object]) -> StoredMessage:
    return StoredMessage(
        id="r", session_id="s", role="tool", kind=kind, meta=meta, seq=1, created_at="now"
    )  # type: ignore[arg-type]


def test_row_meta_keeps_keys_it_does_not_declare_and_defaults_those_a_row_lacks() -> None:
    branch = BranchMeta.of(_row("branch", {"ordinal": 2, "status": "completed", "later": 1}))
    assert (branch.ordinal, branch.status, branch.references) == (2, "completed", [])
    assert branch.stored()["later"] == 1
    assert AckMeta.of(_row("ack", {})).subtasks == []
    assert ToolResultMeta.of(_row("tool_result", {"is_error": 1})).is_error is True


def test_row_meta_reads_the_nested_models_it_declares() -> None:
    step = StepMeta.of(
        _row(
            "step",
            {
                "tool_calls": [{"id": "c1", "name": "lookup", "arguments": "{}"}],
                "usage": {"input_tokens": 5, "output_tokens": 2},
                "model": "openai:x",
            },
        )
    )
    assert step.tool_calls[0].name == "lookup"
    assert step.usage.input_tokens == 5
    assert SummaryMeta.of(_row("summary", {"covers": [3, 9]})).covers == [3, 9]


def test_a_branch_input_of_0_1_0_gathers_its_flat_settings() -> None:
    from errands.contracts.workflows import SubtaskInput

    flat = {
        "task_id": "t",
        "session_id": "s",
        "round": 0,
        "ordinal": 1,
        "subtask_type": "general",
        "prompt": "p",
        "catalog_upto_seq": 3,
        "model": "openai:x",
        "step_limit": 5,
        "model_timeout_seconds": 9.0,
        "tool_max_attempts": 2,
        "continue_as_new": False,
        "headless": True,
        "first_step": 2,
    }
    branch = SubtaskInput.model_validate(flat)
    assert branch.settings.branch_step_limit == 5
    assert branch.settings.model_timeout_seconds == 9.0
    assert branch.settings.tool_max_attempts == 2
    assert branch.settings.continue_as_new is False
    assert (branch.headless, branch.first_step) == (True, 2)
    assert SubtaskInput.model_validate(branch.model_dump()) == branch
