"""The activities that call a model: what ``ERRANDS_MODEL_TASK_QUEUE`` routes to task queues of
their own. Workflows schedule them there; a worker that polls such a queue registers only these,
with the queue's rate (``Settings.model_task_queues``) as its
``max_task_queue_activities_per_second``, so the rate holds across every worker polling it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from activities._consult import ConsultActivities
from activities._model import ModelActivities


def model_calls(models: ModelActivities, consult: ConsultActivities) -> list[Callable[..., Any]]:
    return [
        models.round_step,
        models.branch_step,
        consult.consult_advisor,
        consult.answer_side_question,
    ]
