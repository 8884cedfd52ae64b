"""Every instruction errands writes for a model, in one place."""

from __future__ import annotations

from typing import TYPE_CHECKING

from errands.agent.subtask_types import SubtaskType

if TYPE_CHECKING:
    from errands.agent.catalog import CatalogEntry


def round_instructions(
    types: list[SubtaskType], max_subtasks: int, *, delegable: bool, final_reason: str | None
) -> str:
    parts = [
        "You are errands, an agent that carries out tasks for the user inside a conversation. "
        "Work in rounds. Each round ends with exactly one control tool call:\n"
        "- `final_reply` when you can answer the user now;"
    ]
    if delegable:
        parts[0] += (
            "\n- `delegate` when the work is better split into independent subtasks that run in "
            f"parallel (1 to {max_subtasks}). You will see every subtask's result in the next "
            "round and decide again."
        )
    if final_reason is None:
        parts[0] += (
            "\n- `ask_user` when you need a decision only the user can make: you wait for the "
            "answer and continue this round with it. Do not ask what you can decide yourself."
        )
    parts.append(
        "Messages you may cite are marked [ref N]. When a subtask needs one, list N in its "
        "`references`: the message is handed to the subtask verbatim, so never paste it into the "
        "prompt. Subtasks see only their prompt and the messages you cite. Never answer in plain "
        "text: the user only sees what a control tool carries."
    )
    if delegable:
        guidance = "\n".join(t.guidance for t in types if t.guidance)
        if guidance:
            parts.append("About the subtask types:\n" + guidance)
    if final_reason:
        parts.append(
            f"This is the final round: {final_reason}. Only `final_reply` is available and you "
            "have one step. Answer with what you have; say plainly what is missing or failed."
        )
    return "\n\n".join(parts)


def repair_result(error: str, tool_name: str) -> str:
    return (
        f"{error}\n\nThe round did not end and nothing was started. Call {tool_name} again, "
        "keeping what was fine and fixing only what the error names."
    )


def no_decision(finish_reason: str, text: str) -> str:
    return (
        "the model ended its turn without calling a control tool "
        f"(finish_reason={finish_reason}, text length={len(text.strip())})"
    )


def narration_repair(*, empty: bool) -> str:
    """What a model that ended a round's step in prose (or with nothing) is told next."""
    what = (
        "Your last turn was empty: no text and no tool call"
        if empty
        else "You answered in plain text without calling a tool"
    )
    return (
        f"{what}, so the round did not end and the user saw nothing. End the round now with a "
        "control tool: put your answer in `final_reply`, or call the other control tool you "
        "were given if the work needs it. Do not answer in plain text."
    )


def output_limit(limit: int) -> str:
    """The error of a tool call that the output-token limit cut off mid-arguments."""
    return (
        f"Your output hit the limit of {limit} tokens, so this call was cut off before its "
        "arguments were complete and was not read. Send a shorter call: keep each text brief "
        "and leave out anything that is not needed."
    )


def branch_opening(prompt: str, cited: list[CatalogEntry]) -> str:
    if not cited:
        return prompt
    quoted = "\n\n".join(f"--- {entry.role} message ---\n{entry.text}" for entry in cited)
    return f"{prompt}\n\nMessages from the conversation you were given:\n\n{quoted}"


DISMISSED_REASON = (
    "the user dismissed your question without choosing anything; reply in a sentence or two and "
    "wait for their next message"
)

DISMISSED_REPLY = (
    "Understood, I won't decide that for you or act on it. Tell me how you would like to go on."
)

BRANCH_LAST_STEP = (
    "This is your last step: no tools are available now. Answer in plain text with what you have."
)


def tools_unavailable(servers: dict[str, str]) -> str:
    """Appended to the system text when tool servers could not be listed ("" when all could)."""
    if not servers:
        return ""
    lines = "\n".join(f"- {name}: {reason}" for name, reason in servers.items())
    return (
        "\n\nThese tool servers could not be reached when this task started, so their tools "
        "are not available to you; do without them, and say so if the answer needed them:\n"
        f"{lines}"
    )


def tool_timed_out(name: str, detail: str) -> str:
    return (
        f"{name} was stopped: {detail}. It may or may not have done its work before it was "
        "stopped; check before calling it again, or go on without it."
    )


def tool_unreachable(name: str, attempts: int, detail: str) -> str:
    return (
        f"{name} could not be called after {attempts} attempts: {detail}. Go on without it, "
        "or try it again later."
    )


_SESSION_ENDED = {
    "moved": "the worker that held it stopped",
    "exited": "the server's process exited",
    "idle": "it was unused for {idle:g} s",
    "evicted": "its worker needed room for other servers",
}


def mcp_session_lost(server: str, why: str, idle_seconds: float) -> str:
    """Put before the result of a call that had to open a new session with a stateful server:
    why the earlier one ended (``moved``, ``exited``, ``idle``, ``evicted``)."""
    reason = _SESSION_ENDED.get(why, why).format(idle=idle_seconds)
    return (
        f"[Note: the session with the MCP server {server!r} ended ({reason}), so this call ran "
        "in a new session: whatever the server held from your earlier calls (open pages, "
        "variables, connections, counters) is gone. Redo what this call relies on.]"
    )


def tool_failed(name: str, detail: str) -> str:
    return f"{name} could not be run ({detail}). Go on without it, or try it again later."


INTERRUPTED = (
    "cancelled: the user interrupted the round with a message before this subtask finished"
)

TOOL_CANCELLED = "Cancelled: the work was stopped before this tool call returned."


SUMMARY_INSTRUCTIONS = (
    "You keep the memory of a long conversation between a user and errands, an agent that "
    "works for them. The conversation no longer fits the model's context window, so the part "
    "you are shown will be replaced by your summary: whatever you leave out is gone for every "
    "later turn. Write a summary that a later turn can work from, in these sections:\n"
    "- Goals and constraints: what the user wants and every requirement, preference or limit "
    "they stated, in their own words where the wording matters.\n"
    "- Decisions: each choice made, with its decision id (such as d-3) when it has one, and "
    "who made it.\n"
    "- Work done: what each earlier task concluded, with the facts, names, numbers and "
    "references a later answer may need.\n"
    "- Open questions: what is unresolved or still waiting on the user.\n"
    "Be specific and complete; leave out greetings and repetition. Plain text, no preamble."
)


def summary_request_text(previous: str | None, transcript: str) -> str:
    """The summary call's one user message: the summary so far, then the stretch to fold in."""
    parts = []
    if previous:
        parts.append(
            "The summary so far (of the conversation before the part below; keep everything in "
            f"it that still matters):\n<summary>\n{previous}\n</summary>"
        )
    parts.append(
        f"The conversation to fold into the summary:\n<conversation>\n{transcript}\n</conversation>"
    )
    parts.append("Write the updated summary.")
    return "\n\n".join(parts)


def summary_message(text: str) -> str:
    """How a compaction summary opens the rendered conversation."""
    return f"(Summary of the earlier conversation, which is no longer shown word for word.)\n{text}"
