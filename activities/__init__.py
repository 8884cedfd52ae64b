"""Every side effect of errands: store reads and writes, model calls, tool runs."""

from activities._consult import ConsultActivities
from activities._model import ModelActivities
from activities._model_queue import model_calls
from activities._session import SessionActivities
from activities._tools import McpTools

__all__ = [
    "ConsultActivities",
    "McpTools",
    "ModelActivities",
    "SessionActivities",
    "model_calls",
]
