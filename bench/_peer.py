"""B3's peer: the same conversation through temporalio's OpenAI Agents integration.

The idiomatic shape there: the workflow receives the conversation so far as the agent's input,
a main agent hands three parts of the work to a sub-agent exposed as a tool, then answers. Each
model call is an activity whose input is the whole transcript, as the integration runs it.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner


@workflow.defn(name="PeerTask")
class PeerTask:
    @workflow.run
    async def run(self, conversation: list[dict[str, Any]]) -> str:
        helper = Agent(
            name="general",
            instructions="Work on the part of the task you are given and report briefly.",
            model="peer-branch",
        )
        main = Agent(
            name="main",
            instructions="Split the user's request into parts, hand each to `general`, then "
            "answer with what they found.",
            model="peer-main",
            tools=[
                helper.as_tool(
                    tool_name="general", tool_description="Work on one part of the task."
                )
            ],
        )
        result = await Runner.run(main, input=conversation)  # type: ignore[arg-type]
        return str(result.final_output)
