"""The ``advisor`` work tool of a round (SPEC §4): one nested model call on the round's own
context, within the task's use limit."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities import ConsultActivities
    from errands.agent.advisor import error_result, limit_reached_result, parse_question, refused
    from errands.contracts.activities import AdvisorInput
    from errands.contracts.messages import ToolCall
    from errands.contracts.rounds import RoundStepInput
    from errands.contracts.workflows import TaskInput, TaskState, model_queue
    from workflows._failures import describe
    from workflows._options import model_retry


async def consult_advisor(
    data: TaskInput, state: TaskState, step: RoundStepInput, call: ToolCall
) -> str:
    """The advisor's tool result for ``call``, made in ``step``; its usage and uses are charged
    to ``state``. Over the limit no model is called; a failed or empty consultation does not use
    up the limit."""
    settings = data.settings
    model = data.advisor_model or data.model
    if state.advisor_uses >= settings.advisor_limit:
        result = limit_reached_result(model, limit=settings.advisor_limit)
    elif (mistake := refused(call.arguments)) is not None:
        result = error_result(model, mistake, uses=state.advisor_uses, limit=settings.advisor_limit)
    else:
        try:
            out = await workflow.execute_activity_method(
                ConsultActivities.consult_advisor,
                AdvisorInput(
                    round=step,
                    question=parse_question(call.arguments),
                    model=model,
                    uses=state.advisor_uses,
                    limit=settings.advisor_limit,
                ),
                start_to_close_timeout=timedelta(seconds=settings.model_timeout_seconds),
                heartbeat_timeout=timedelta(seconds=settings.heartbeat_timeout_seconds),
                task_queue=model_queue(settings.model_task_queue, model),
                retry_policy=model_retry(settings.model_max_attempts),
                summary=f"round {step.round} · advisor · {model}",
            )
        except ActivityError as error:
            failure = describe(error, settings.model_max_attempts)
            state.ledger.charge(
                "advisor", model, calls=failure.attempts, failed_calls=failure.attempts
            )
            result = error_result(
                model, failure.message, uses=state.advisor_uses, limit=settings.advisor_limit
            )
        else:
            state.ledger.charge(
                "advisor", model, out.usage, calls=out.attempt, failed_calls=out.attempt - 1
            )
            result = out.result
            if result.type == "advice":
                state.advisor_uses += 1
    # The JSON says whether it is an error, so the result shape stays parseable.
    return result.to_tool_text()
