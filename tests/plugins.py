"""Subtask types installed in the test worker (through ERRANDS_SUBTASK_TYPES)."""

from errands.agent.subtask_types import SubtaskType, WorkTool
from tests.helpers import tool_spec


def _lookup(arguments: dict) -> str:
    return f"lookup result for {arguments.get('term')!r}: 42"


RESEARCH = SubtaskType(
    key="research",
    description="Look things up with the `lookup` tool and report what was found.",
    guidance="`research` subtasks can call `lookup`; give each one term to look up.",
    instructions="Use the lookup tool, then answer in plain text.",
    params_schema={
        "type": "object",
        "properties": {"depth": {"type": "integer", "minimum": 1, "maximum": 3}},
    },
    tools=[
        WorkTool(
            spec=tool_spec("lookup", "Look a term up.", term="string"),
            run=_lookup,
        )
    ],
)

TYPES = [RESEARCH]
