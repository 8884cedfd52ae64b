"""Every side effect of errands: store reads and writes, model calls, tool runs."""

from activities._consult import ConsultActivities
from activities._model import ModelActivities
from activities._session import SessionActivities

__all__ = ["ConsultActivities", "ModelActivities", "SessionActivities"]
