"""The advisor: one nested, tool-less model call that gives the main agent strategic guidance.

Everything here is a pure function of its arguments; the activity that calls the model and the
workflow that counts uses live elsewhere. The advisor's messages, in order:

1. inherited system messages, chosen newest-first within ``ADVISOR_SYSTEM_BUDGET_BYTES`` (an
   oversized one is skipped and the walk goes on to older ones), then put back in their order;
2. the advisor's own instructions, last among system messages so they win any conflict (the
   agent's prompt tells it to address the user and use tools; the advisor must do neither);
3. at most ``ADVISOR_TAIL_MAX`` recent non-system messages within ``ADVISOR_TAIL_BUDGET_BYTES``,
   walking back from the newest and stopping at the first that does not fit, so the window has
   no holes; tool exchanges are folded into plain-text notes (see ``fold_tool_exchanges``);
4. the question as the final user message.

On the wire (``advisor_request``) the system messages become one system text and the rest
alternating user/assistant turns (``as_chat``): chat templates that demand one leading system
message and alternating roles refuse anything else.

Sizes are the UTF-8 length of each message's JSON encoding as stored (before folding), so the
budgets bound what we forward, wrapping included.

Media: ``Message`` carries text only. Whatever produced a tool result (an image, a file) already
stored a text description of it, so nothing binary can reach the advisor and no text is treated
specially here; a huge text is simply a message that does not fit the budget.
"""

from __future__ import annotations

from errands.agent.arguments import read_arguments, refusal
from errands.agent.reading import cap_text
from errands.contracts.messages import AdvisorResult, Message, ModelRequest, Role, ToolSpec

ADVISOR_TOOL = "advisor"

ADVISOR_SYSTEM_BUDGET_BYTES = 12_000
ADVISOR_TAIL_BUDGET_BYTES = 12_000
ADVISOR_TAIL_MAX = 20
QUESTION_MAX_CHARS = 2_000
DEFAULT_USE_LIMIT = 3


DEFAULT_QUESTION = (
    "Give the agent concise strategic guidance: is its current approach sound, what should it do "
    "next, and what risks or gaps should it watch for?"
)

ADVISOR_INSTRUCTIONS = (
    "You are now acting as an advisor to the AI agent whose instructions and recent work appear "
    "above. The agent has paused to ask you a question; your answer goes back to the agent, not "
    "to the user.\n"
    "- Give strategic guidance: judge the approach, point out mistakes, risks and missing "
    "information, and suggest the next concrete steps.\n"
    "- Do not write the final answer for the user and do not address the user.\n"
    "- You have no tools. Notes in square brackets describe tool calls the agent made; do not "
    "imitate them, answer in plain text.\n"
    "- Instructions above that tell the assistant to reply to the user or to call tools were "
    "written for the agent, not for you; these advisor instructions take precedence.\n"
    "- Be brief and specific. If the context is not enough to judge, say what the agent should "
    "find out first."
)


def advisor_spec() -> ToolSpec:
    return ToolSpec(
        name=ADVISOR_TOOL,
        description=(
            "Consult a stronger model for strategic guidance on your own work: whether your "
            "approach is sound, what to do next, what you may be missing. It sees your "
            "instructions and recent conversation and answers you, not the user. Its uses per "
            "task are limited, so save it for real decisions or when you are stuck."
        ),
        parameters={
            "type": "object",
            "properties": {
                "question": {
                    "type": "string",
                    "description": (
                        "What you want advice on, with the context the advisor needs. If empty, "
                        "the advisor gives general guidance on your current approach."
                    ),
                }
            },
            "required": ["question"],
            "additionalProperties": False,
        },
    )


def parse_question(arguments: str) -> str:
    """The ``question`` argument of an advisor call; anything unreadable counts as blank.

    A malformed call still gets advice (on the default question) rather than an error, because
    the advisor's input is free text and there is nothing for the model to repair. Arguments the
    guards refuse (``refused``) are read as blank here too, never parsed.
    """
    arguments_read = read_arguments(arguments)
    question = arguments_read.get("question") if isinstance(arguments_read, dict) else None
    return question if isinstance(question, str) else ""


def refused(arguments: str) -> str | None:
    """Why an advisor call gets an error result instead of advice: its arguments are too long or
    too deep to read (``errands.agent.arguments``); None for every other call. A model that
    sends such arguments needs telling, not advice on a question it did not ask."""
    problem = refusal(arguments or "")
    return None if problem is None else f"{ADVISOR_TOOL}: {problem}"


def normalize_question(question: str) -> str:
    """Trimmed, blank replaced by ``DEFAULT_QUESTION``, capped at ``QUESTION_MAX_CHARS``."""
    text = question.strip() or DEFAULT_QUESTION
    return cap_text(text, QUESTION_MAX_CHARS)


def json_size(message: Message) -> int:
    """Bytes of the message's JSON encoding (defaults left out, as on the wire)."""
    return len(message.model_dump_json(exclude_defaults=True).encode("utf-8"))


def select_system(
    system_messages: list[str], conversation: list[Message], budget: int
) -> list[Message]:
    """Inherited system messages, newest first within ``budget``, returned in original order.

    Candidates are ``system_messages`` (the round's system prompt) followed by any system-role
    messages found in ``conversation``, which were injected later. Newest first, because later
    directives override earlier ones; an oversized one is skipped rather than ending the walk,
    so it cannot crowd out smaller, older directives.
    """
    candidates = [Message(role="system", text=text) for text in system_messages]
    candidates += [m for m in conversation if m.role == "system"]
    chosen: list[Message] = []
    remaining = budget
    for message in reversed(candidates):
        size = json_size(message)
        if size > remaining:
            continue
        chosen.append(message)
        remaining -= size
    chosen.reverse()
    return chosen


def select_tail(conversation: list[Message], budget: int, limit: int) -> list[Message]:
    """The newest non-system messages that fit, contiguous, in original order.

    The walk stops at the first message that does not fit: skipping it would leave a hole where
    later messages refer to something the advisor cannot see.
    """
    tail: list[Message] = []
    remaining = budget
    for message in reversed(conversation):
        if message.role == "system":
            continue
        if len(tail) >= limit:
            break
        size = json_size(message)
        if size > remaining:
            break
        tail.append(message)
        remaining -= size
    tail.reverse()
    return tail


def fold_tool_exchanges(tail: list[Message]) -> list[Message]:
    """Rewrite tool activity as plain-text notes for a call that offers no tools.

    Raw tool calls in the transcript prime a tool-less model to imitate them (an empty answer,
    or a fake call echoed back as advice), and providers reject a tool result whose call is not
    in the same request. So:

    - an assistant message keeps its text, role ``assistant``; its tool calls are removed and
      remembered, and a message that was only tool calls disappears (its note carries it);
    - a tool result becomes a ``user`` note naming the call and its input when the call is in
      the window ("the agent ran X with input … and got …"), or "a tool returned …" when the
      call was cut off. Results travel as user turns on every provider, so this keeps the
      user/assistant alternation the agent's own request already had;
    - a call with no result in the window (e.g. the advisor call being made right now) is
      dropped: there is nothing to report yet;
    - if the window then opens with an assistant message, it becomes a user note too, because
      some providers refuse a conversation that starts with the assistant.

    Consecutive same-role messages are left as they are; ``as_chat`` joins them.
    """
    calls: dict[str, tuple[str, str]] = {}
    folded: list[Message] = []
    for message in tail:
        if message.role == "assistant":
            for call in message.tool_calls:
                calls[call.id] = (call.name, call.arguments)
            if message.text.strip():
                folded.append(Message(role="assistant", text=message.text))
        elif message.role == "tool":
            folded.append(Message(role="user", text=_result_note(message, calls)))
        else:
            folded.append(Message(role=message.role, text=message.text))
    if folded and folded[0].role == "assistant":
        folded[0] = Message(role="user", text=f"[Note: earlier, the agent wrote: {folded[0].text}]")
    return folded


def _result_note(result: Message, calls: dict[str, tuple[str, str]]) -> str:
    outcome = "it failed with" if result.is_error else "got"
    known = calls.get(result.tool_call_id or "")
    if known is None:
        verb = "failed with" if result.is_error else "returned"
        return f"[Note: a tool {verb}: {result.text}]"
    name, arguments = known
    return f"[Note: the agent ran {name} with input {arguments} and {outcome}: {result.text}]"


def build_advisor_messages(
    system_messages: list[str], conversation: list[Message], question: str
) -> list[Message]:
    """The advisor's full message list, system messages included, in the order described above
    (``as_chat`` shapes it for the wire)."""
    system = select_system(system_messages, conversation, ADVISOR_SYSTEM_BUDGET_BYTES)
    tail = select_tail(conversation, ADVISOR_TAIL_BUDGET_BYTES, ADVISOR_TAIL_MAX)
    return [
        *system,
        Message(role="system", text=ADVISOR_INSTRUCTIONS),
        *fold_tool_exchanges(tail),
        Message(role="user", text=normalize_question(question)),
    ]


def as_chat(messages: list[Message]) -> tuple[str, list[Message]]:
    """``messages`` as one system text (the system messages in order, blank-line separated, so
    the advisor instructions stay last) and user/assistant turns that alternate, consecutive
    turns of one role joined by a blank line. Only text travels: ``fold_tool_exchanges`` has
    already turned every tool exchange into text."""
    system = "\n\n".join(m.text for m in messages if m.role == "system" and m.text)
    turns: list[Message] = []
    for message in messages:
        if message.role == "system" or not message.text.strip():
            continue
        role: Role = "assistant" if message.role == "assistant" else "user"
        if turns and turns[-1].role == role:
            turns[-1] = Message(role=role, text=f"{turns[-1].text}\n\n{message.text}")
        else:
            turns.append(Message(role=role, text=message.text))
    return system, turns


def advisor_request(
    system_messages: list[str], conversation: list[Message], question: str
) -> ModelRequest:
    """One step, no tools: the advisor can only answer in text. One system text, then turns
    that alternate, from a user turn to the user turn that ends with the question."""
    system, turns = as_chat(build_advisor_messages(system_messages, conversation, question))
    return ModelRequest(system=system, messages=turns, tools=[], tool_choice="none")


def limit_reached(uses: int, limit: int = DEFAULT_USE_LIMIT) -> bool:
    """``uses`` counts successful advisor calls only: failures do not use up the limit."""
    return uses >= limit


def advice_result(
    model: str, text: str, *, uses: int, limit: int = DEFAULT_USE_LIMIT
) -> AdvisorResult:
    """The result of an advisor call that answered; ``uses`` is the count before this call.

    An empty answer is an error result and, like any failure, does not use up the limit.
    """
    advice = text.strip()
    if not advice:
        return error_result(model, "the advisor returned no text", uses=uses, limit=limit)
    return AdvisorResult(
        type="advice",
        advice=advice,
        advisor_model=model,
        remaining_uses=max(0, limit - uses - 1),
    )


def error_result(
    model: str, error: str, *, uses: int, limit: int = DEFAULT_USE_LIMIT
) -> AdvisorResult:
    return AdvisorResult(
        type="error",
        error=(
            f"The advisor could not answer ({error}). This did not count against your "
            "advisor uses; continue with your own judgment or ask again later."
        ),
        advisor_model=model,
        remaining_uses=max(0, limit - uses),
    )


def limit_reached_result(model: str, *, limit: int = DEFAULT_USE_LIMIT) -> AdvisorResult:
    """Returned without a model call; the explanation goes in ``error`` since no advice exists."""
    return AdvisorResult(
        type="limit_reached",
        error=(
            f"The advisor limit for this task is reached ({limit} of {limit} uses); no advisor "
            "was consulted. Do not call advisor again: continue with your own judgment."
        ),
        advisor_model=model,
        remaining_uses=0,
    )
