"""What one round step's tool calls amount to (SPEC §1): a decision, a call to repair, a work
tool or question to carry out, or nothing at all (prose where a control call was due).

Pure and deterministic. The workflow reads every step with it; a step that writes its own
decision (the acknowledgement or the reply, ``activities._rounds``) reads its response with it
first, with the same inputs, so the two never disagree on what the model decided.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

from errands.agent import prompts
from errands.agent.advisor import ADVISOR_TOOL
from errands.agent.control import (
    ASK_USER,
    DELEGATE,
    FINAL_REPLY,
    Rejection,
    parse_delegate,
    parse_final_reply,
    pick_control_call,
)
from errands.agent.reading import READ_MESSAGE
from errands.contracts.messages import ModelResponse, ToolCall
from errands.contracts.subtasks import RoundDecision, SubtaskTypeInfo
from errands.errors import ModelMistake

CUT_OFF = frozenset({"length", "max_tokens"})
"""The finish reasons (OpenAI, Anthropic) of a response the output-token limit ended."""

Reading = RoundDecision | Rejection | ToolCall | None
"""What one step's calls amount to: None when the model called nothing."""


@dataclass(frozen=True)
class Offer:
    """What a round step offered the model, as far as reading its calls goes."""

    final: bool
    """Only ``final_reply`` (the round is final)."""
    follow_up: bool
    """``ask_user`` and the work tools: the step has a step after it."""
    work_tools: tuple[str, ...] = ()
    """The work tools beyond the built-ins (``RoundStepOutput.work_tools``)."""

    def control(self, types: list[SubtaskTypeInfo]) -> set[str]:
        offered = {FINAL_REPLY}
        if not self.final and types:
            offered.add(DELEGATE)
        if self.follow_up:
            offered.add(ASK_USER)
        return offered

    def work(self) -> set[str]:
        return {ADVISOR_TOOL, READ_MESSAGE, *self.work_tools} if self.follow_up else set()


@dataclass(frozen=True)
class Rules:
    """What a delegation is checked against: the task's types and limits."""

    types: list[SubtaskTypeInfo]
    max_subtasks: int
    max_output_tokens: int


def read_step(response: ModelResponse, offer: Offer, rules: Rules, catalog_size: int) -> Reading:
    """The step's reading; a response the output limit cut off is a rejection as such, whatever
    its calls."""
    reading = read_calls(response.tool_calls, offer, rules, catalog_size)
    if cut_short(response):
        return cut_off(response.tool_calls[-1], rules.max_output_tokens)
    return reading


def cut_short(response: ModelResponse) -> bool:
    return bool(response.tool_calls) and response.finish_reason in CUT_OFF


def read_calls(calls: list[ToolCall], offer: Offer, rules: Rules, catalog_size: int) -> Reading:
    """A control call wins over work-tool calls in the same step: the round ends there."""
    offered, work = offer.control(rules.types), offer.work()
    picked = pick_control_call(calls, offered)
    if picked is None:
        if not calls:
            return None
        known = [c for c in calls if c.name in work]
        if known:
            return known[0]
        return Rejection(
            call=calls[0],
            error=f"There is no tool named {calls[0].name!r} in this round; the tools you "
            f"can call are {sorted(offered | work)}.",
        )
    name, chosen = picked
    if name == ASK_USER:
        return chosen[0]
    try:
        if name == FINAL_REPLY:
            return parse_final_reply(chosen)
        return parse_delegate(
            chosen,
            catalog_size=catalog_size,
            types=rules.types,
            max_subtasks=rules.max_subtasks,
        )
    except ModelMistake as error:
        # A repeated final_reply is judged by its last call, everything else by its first.
        subject = chosen[-1] if name == FINAL_REPLY else chosen[0]
        return Rejection(call=subject, error=str(error))


def cut_off(call: ToolCall, limit: int) -> Rejection:
    """A call the output limit cut short. Its partial arguments are not repeated: some servers
    refuse an assistant turn whose arguments are not JSON, and the model is to write it anew."""
    shown = json.dumps({"omitted": f"{len(call.arguments)} characters, cut off at the limit"})
    return Rejection(
        call=call.model_copy(update={"arguments": shown}), error=prompts.output_limit(limit)
    )


def types_digest(types: Iterable[SubtaskTypeInfo]) -> str:
    """Names a set of subtask types: a step writes a delegation only when its worker's types are
    the ones the task recorded (a worker of another configuration reads it otherwise)."""
    canonical = json.dumps(
        [t.model_dump(mode="json") for t in types], sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
