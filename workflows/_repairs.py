"""What a round's slot is told between its attempts (SPEC §1): the exchanges that go to that
slot's own messages, never to the session. A rejected call comes back as the call and an error
tool result; prose comes back with an instruction to end the round with a control tool; a work
tool's or a question's result follows the call it answers. Pure functions, for workflow code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from errands.agent import prompts
    from errands.agent.control import Rejection
    from errands.contracts import ids
    from errands.contracts.messages import Message, ToolCall
    from errands.contracts.workflows import Slot


@dataclass(frozen=True)
class Narration:
    """The model ended a step in prose, or with nothing at all, instead of calling a tool."""

    text: str
    finish_reason: str

    @property
    def message(self) -> str:
        return prompts.no_decision(self.finish_reason, self.text)


def append_exchange(
    slot: Slot, call: ToolCall, tool: str, result: str, *, stored: str | None = None
) -> None:
    """A work tool's call and its result (held in the store under ``stored``, when given)."""
    call_id = ids.provider_safe(call.id) or f"{tool}_{len(slot.extra)}"
    slot.extra.append(
        Message(role="assistant", tool_calls=[call.model_copy(update={"id": call_id})])
    )
    slot.extra.append(
        Message(role="tool", tool_call_id=call_id, tool_name=tool, text=result, stored=stored)
    )


REJECTED_ARGUMENTS_MAX = 16_000
"""A rejected call is shown back to the model at most this long: the slot's messages travel in
the next activity input, and a few huge rejected calls must not outgrow Temporal's payload cap."""


def cut_off(call: ToolCall, limit: int) -> Rejection:
    """A call the output limit cut short. Its partial arguments are not repeated: some servers
    refuse an assistant turn whose arguments are not JSON, and the model is to write it anew."""
    shown = json.dumps({"omitted": f"{len(call.arguments)} characters, cut off at the limit"})
    return Rejection(
        call=call.model_copy(update={"arguments": shown}), error=prompts.output_limit(limit)
    )


def narration_exchange(narration: Narration) -> list[Message]:
    """The prose the model sent, and the instruction to end the round with a control tool."""
    text = narration.text.strip()
    if len(text) > REJECTED_ARGUMENTS_MAX:
        text = text[:REJECTED_ARGUMENTS_MAX] + " […]"
    said = [Message(role="assistant", text=text)] if text else []
    return [*said, Message(role="user", text=prompts.narration_repair(empty=not text))]


def repair_exchange(call_id: str, rejection: Rejection) -> list[Message]:
    """The rejected call and its error, as a real tool exchange the model knows how to read."""
    arguments = rejection.call.arguments
    if len(arguments) > REJECTED_ARGUMENTS_MAX:
        arguments = json.dumps(
            {"omitted": f"{len(arguments)} characters of arguments, too long to repeat here"}
        )
    return [
        Message(
            role="assistant",
            tool_calls=[ToolCall(id=call_id, name=rejection.call.name, arguments=arguments)],
        ),
        Message(
            role="tool",
            tool_call_id=call_id,
            tool_name=rejection.call.name,
            is_error=True,
            text=prompts.repair_result(rejection.error, rejection.call.name),
        ),
    ]
