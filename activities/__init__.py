"""Every side effect of errands: store reads and writes, model calls, tool runs."""

from activities._model import ModelActivities
from activities._session import SessionActivities

__all__ = ["ModelActivities", "SessionActivities"]
