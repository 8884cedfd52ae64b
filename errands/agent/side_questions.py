"""Side questions (/btw): answer a question about a task without touching the task.

Pure functions only; the activity that calls the model and the workflow that serializes side
questions live elsewhere. Two paths:

- Preferred (same model as the task): replay the task's latest round request, with the same
  system text and the same tools list byte for byte so the provider's prefix cache stays warm,
  its messages trimmed back to the last completed assistant turn (``trim_to_last_assistant``),
  then one user message carrying the rules and the question (``side_question_prompt``). Tool
  calls are never run: each gets ``REFUSED_TOOL_TEXT`` back and the model is asked again, up to
  ``MAX_SIDE_ITERATIONS`` model calls.
- Fallback (another model, or the preferred path failed or answered empty): one call over a
  plain-text transcript (``plain_transcript``, ``fallback_request``).
"""

from __future__ import annotations

from errands.agent.reading import cap_text
from errands.contracts.messages import Message, ModelRequest, ToolCall, ToolChoice

MAX_SIDE_ITERATIONS = 3
SIDE_MAX_OUTPUT_TOKENS = 2048
SIDE_TEMPERATURE = 0.3

MESSAGE_MAX_CHARS = 2_000
TRANSCRIPT_MAX_CHARS = 24_000
IN_PROGRESS_MAX_CHARS = 6_000

SIDE_TOOL_CHOICE: ToolChoice = "none"
"""The round asked for ``required``; any change costs the cached messages on Anthropic anyway,
so ask for no calls outright. The tools list itself stays identical (cache parity), and the
refusal loop remains for models that call tools regardless."""

EMPTY_CONVERSATION = "(The conversation has no messages yet.)"

REFUSED_TOOL_TEXT = (
    "Refused: tools are disabled while answering a side question, and nothing was run. Answer "
    "the side question directly in plain text from the conversation so far."
)

_RULES = (
    "- Answer only the side question. Do not continue, redo or critique the main task.\n"
    "- No tools are available: any tool call will be refused. Answer in plain text.\n"
    "- If the conversation does not tell you the answer, say so plainly instead of guessing.\n"
    "- Be concise and direct."
)

FALLBACK_SYSTEM = (
    "You are the assistant working on the task in the conversation transcript below. The user "
    "has asked a quick side question while that work continues. The transcript is a snapshot "
    "and may miss the very latest activity.\n" + _RULES
)

_LABELS = {"user": "USER", "assistant": "ASSISTANT", "tool": "TOOL RESULT"}


def validate_side_question(text: str) -> str:
    question = text.strip()
    if not question:
        raise ValueError(
            "side question is empty: type the question you want answered about the task"
        )
    return question


def side_question_prompt(question: str, in_progress_summary: str | None) -> str:
    """The user message that follows the replayed conversation on the preferred path."""
    parts = [
        "The user is asking a quick side question about this conversation while the main work "
        "continues separately.\nRules:\n" + _RULES
    ]
    if in_progress_summary and in_progress_summary.strip():
        parts.append(
            "Work in progress that is not shown above (tool outputs left out):\n"
            + in_progress_summary.strip()
        )
    parts.append(f"Side question: {validate_side_question(question)}")
    return "\n\n".join(parts)


def completed_length(messages: list[Message]) -> int:
    """How many leading messages end at the last completed assistant turn (0 if none).

    A completed assistant turn is either an assistant message without tool calls, or an
    assistant message with tool calls immediately followed by tool messages that answer every
    one of those calls (the turn then ends after the last of them). An assistant message with a
    call still unanswered is not complete. Everything after the completed turn (an in-flight
    user message, unanswered calls, partial results) is cut: it would leave a dangling call or
    two user turns in a row for the side question, which strict providers refuse. Only the tail
    is cut, so the rest stays a byte-identical prefix of the round's request.
    """
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message.role != "assistant":
            continue
        if not message.tool_calls:
            return i + 1
        end = i + 1
        answered: set[str] = set()
        while end < len(messages) and messages[end].role == "tool":
            answered.add(messages[end].tool_call_id or "")
            end += 1
        if {call.id for call in message.tool_calls} <= answered:
            return end
    return 0


def trim_to_last_assistant(messages: list[Message]) -> list[Message]:
    """``messages`` cut back to the last completed assistant turn (see ``completed_length``)."""
    return list(messages[: completed_length(messages)])


def in_progress_summary(messages: list[Message]) -> str | None:
    """What ``trim_to_last_assistant`` cut, as text without tool outputs; ``None`` if nothing."""
    cut = messages[completed_length(messages) :]
    if not any(m.role != "system" for m in cut):
        return None
    return plain_transcript(cut, budget=IN_PROGRESS_MAX_CHARS, tool_outputs=False)


def preferred_request(
    round_request: ModelRequest, question: str, summary: str | None = None
) -> ModelRequest:
    """The round's request replayed for a side question: same system text, same tools."""
    messages = trim_to_last_assistant(round_request.messages)
    # The round's cache breakpoint, where the trimmed prefix still reaches it: the same
    # breakpoint on the same prefix reads what the round wrote.
    stable = round_request.cache_upto
    cache_upto = None if stable is None else min(stable, len(messages))
    messages.append(Message(role="user", text=side_question_prompt(question, summary)))
    return ModelRequest(
        system=round_request.system,
        messages=messages,
        tools=round_request.tools,
        tool_choice=SIDE_TOOL_CHOICE,
        max_output_tokens=SIDE_MAX_OUTPUT_TOKENS,
        # Dropped on the wire for model families that refuse a temperature
        # (errands.agent.model_catalog).
        temperature=SIDE_TEMPERATURE,
        cache_upto=cache_upto,
    )


def refusal_messages(text: str, calls: list[ToolCall]) -> list[Message]:
    """What to append after a side-question step that called tools: the step, then a refusal
    for each call, so the next iteration sees why nothing ran."""
    return [
        Message(role="assistant", text=text, tool_calls=calls),
        *(
            Message(
                role="tool",
                tool_call_id=call.id,
                tool_name=call.name,
                text=REFUSED_TOOL_TEXT,
                is_error=True,
            )
            for call in calls
        ),
    ]


def _entry(message: Message, tool_outputs: bool) -> str | None:
    """One transcript entry per message; ``None`` for what the transcript leaves out."""
    if message.role == "system":
        return None
    text = message.text.strip()
    if message.role == "assistant" and message.tool_calls:
        names = ", ".join(call.name for call in message.tool_calls)
        head = f"ASSISTANT [called tools: {names}]"
        return f"{head}: {cap_text(text, MESSAGE_MAX_CHARS)}" if text else head
    if message.role == "tool":
        if not tool_outputs:
            return "TOOL RESULT: (not shown)"
        body = cap_text(
            f"error: {text}" if message.is_error else text or "(no output)", MESSAGE_MAX_CHARS
        )
        return f"TOOL RESULT: {body}"
    if not text:
        return None
    return f"{_LABELS[message.role]}: {cap_text(text, MESSAGE_MAX_CHARS)}"


def _omission_marker(count: int) -> str:
    noun = "message" if count == 1 else "messages"
    return f"[… {count} earlier {noun} omitted …]"


def plain_transcript(
    messages: list[Message], *, budget: int = TRANSCRIPT_MAX_CHARS, tool_outputs: bool = True
) -> str:
    """The conversation as plain text, newest-biased, at most ``budget`` characters.

    System messages are dropped. Each message is one entry (``USER:``, ``ASSISTANT:``,
    ``ASSISTANT [called tools: a, b]``, ``TOOL RESULT:``), its text capped at
    ``MESSAGE_MAX_CHARS``. Entries are kept newest first until the next would not fit, so the
    kept part is contiguous; the newest is kept even when it alone exceeds the budget. When
    anything was dropped, a first line says how many messages were omitted, and the budget
    counts that line too.
    """
    entries = [e for e in (_entry(m, tool_outputs) for m in messages) if e is not None]
    if not entries:
        return EMPTY_CONVERSATION
    if sum(len(e) + 1 for e in entries) - 1 <= budget:
        return "\n".join(entries)
    # The marker's exact length depends on the count; reserve room for the longest one.
    remaining = budget - len(_omission_marker(len(entries))) - 1
    kept: list[str] = []
    for entry in reversed(entries):
        cost = len(entry) + (1 if kept else 0)
        if kept and cost > remaining:
            break
        kept.append(entry)
        remaining -= cost
    kept.reverse()
    return "\n".join([_omission_marker(len(entries) - len(kept)), *kept])


def fallback_request(messages: list[Message], question: str) -> ModelRequest:
    """One tool-less call answering ``question`` from a plain-text transcript of ``messages``."""
    transcript = plain_transcript(messages)
    user = (
        f"Conversation transcript (snapshot):\n-----\n{transcript}\n-----\n\n"
        f"Side question: {validate_side_question(question)}"
    )
    return ModelRequest(
        system=FALLBACK_SYSTEM,
        messages=[Message(role="user", text=user)],
        tools=[],
        max_output_tokens=SIDE_MAX_OUTPUT_TOKENS,
        temperature=SIDE_TEMPERATURE,
    )
