"""Every side effect of errands: store reads and writes, model calls, tool calls."""

from activities._consult import ConsultActivities
from activities._model import ModelActivities
from activities._session import SessionActivities
from activities._tool_calls import ToolActivities
from activities._tools import McpTools

MODEL_CALLS = frozenset({"round_step", "branch_step", "consult_advisor", "answer_side_question"})
"""The activities that call a model: what ``ERRANDS_MODEL_TASK_QUEUE`` routes to task queues of
their own. Workflows schedule them there; a worker that polls such a queue registers only these,
with the queue's rate (``Settings.model_task_queues``) as its
``max_task_queue_activities_per_second``, so the rate holds across every worker polling it."""

__all__ = [
    "MODEL_CALLS",
    "ConsultActivities",
    "McpTools",
    "ModelActivities",
    "SessionActivities",
    "ToolActivities",
]
