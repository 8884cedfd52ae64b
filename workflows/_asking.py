"""``ask_user`` in a round (SPEC §2): the call read and checked, answered from the session's
remembered decisions or headlessly when it can be, else put to the user (the slot then waits);
and the user's answer (or its absence) made the call's result. Every exchange goes to the slot's
messages, never to the session; the question and its answer go to the event log."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities import SessionActivities
    from errands.agent.asking import (
        accepted_decision,
        check_citation,
        find_remembered,
        headless_result,
        is_dismissal,
        parse_ask_user,
        remembered_result,
        result_for_answer,
        timed_out_result,
    )
    from errands.agent.control import ASK_USER, Rejection
    from errands.contracts.activities import RememberInput, SessionRef
    from errands.contracts.asking import Answer, QuestionSet
    from errands.contracts.events import named
    from errands.contracts.messages import ToolCall
    from errands.contracts.workflows import Slot, TaskInput, TaskState
    from errands.errors import ModelMistake
    from workflows._log import log_event
    from workflows._options import store_call
    from workflows._repairs import append_exchange


async def ask(
    data: TaskInput, state: TaskState, slot: Slot, call: ToolCall
) -> Rejection | QuestionSet | None:
    """The questions put to the user (the slot now holds them and waits), or None when they
    were answered from memory or headlessly and the slot carries on. A bad call comes back to
    be repaired."""
    state.asks += 1
    try:
        questions = parse_ask_user(call, set_id=f"{data.task_id}-q{state.asks}")
        recalled = await store_call(
            SessionActivities.recall_decisions, SessionRef(session_id=data.session_id)
        )
        decisions = recalled.decisions
        check_citation(questions, decisions)
    except ModelMistake as error:
        return Rejection(call=call, error=str(error))
    remembered = None if questions.reopens else find_remembered(questions, decisions)
    if remembered is not None:
        append_exchange(slot, call, ASK_USER, remembered_result(remembered))
        return None
    if data.headless:
        append_exchange(slot, call, ASK_USER, headless_result(questions))
        return None
    slot.call, slot.questions = call, questions
    slot.deadline = workflow.now() + timedelta(hours=data.settings.ask_timeout_hours)
    await log_event(
        data.task_id,
        f"{questions.id}:asked",
        "question_asked",
        questions.id,
        round=slot.round,
        question_set_id=questions.id,
        headers=[q.header for q in questions.questions],
    )
    return questions


async def record_answer(
    data: TaskInput,
    slot: Slot,
    call: ToolCall,
    questions: QuestionSet,
    answer: Answer | None,
) -> bool:
    """Remember an accepted decision and give the model what the user said; True when the
    user dismissed the question (chose nothing at all)."""
    await log_event(
        data.task_id,
        f"{questions.id}:answered",
        "question_answered",
        questions.id,
        round=slot.round,
        question_set_id=questions.id,
        status="timed_out" if answer is None else answer.status,
        **({} if answer is None else {"by": named(answer.by)}),
    )
    if answer is None:
        result = timed_out_result(data.settings.ask_timeout_hours)
    else:
        result = result_for_answer(questions, answer)
        accepted = accepted_decision(questions, answer)
        if accepted is not None:
            await store_call(
                SessionActivities.remember_decision,
                RememberInput(
                    session_id=data.session_id,
                    decision_id=accepted.decision_id,
                    record=accepted.model_dump(mode="json"),
                ),
            )
    append_exchange(slot, call, ASK_USER, result)
    return answer is not None and answer.status == "answered" and is_dismissal(answer)
