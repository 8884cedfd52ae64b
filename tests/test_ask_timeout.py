"""A question nobody answers expires after 24 hours of workflow time (time-skipping server)."""

from __future__ import annotations

import uuid

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from errands.adapters.devserver import test_server_path
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.contracts.workflows import TaskInput, TaskResult
from errands.settings import Settings
from errands.workers import build_worker
from tests.helpers import DATABASE, ask, final
from tests.test_ask_user import last_tool_result


async def test_an_unanswered_question_times_out_after_24_hours(
    settings: Settings, store: SessionStore, scripted: ScriptedModelServer
) -> None:
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter, test_server_existing_path=test_server_path()
    )
    queue = f"skip-{uuid.uuid4().hex[:6]}"
    router = ModelRouter(settings)
    try:
        async with build_worker(
            env.client,
            settings.model_copy(update={"task_queue": queue}),
            store=store,
            router=router,
        ):
            scripted.script("gpt-ask", ask(DATABASE), final("Nobody answered; I stopped there."))
            session = f"timeout-{uuid.uuid4().hex[:6]}"
            handle = await env.client.start_workflow(
                "TaskWorkflow",
                TaskInput(
                    task_id=f"task-{session}-1",
                    session_id=session,
                    text="set it up",
                    model="openai:gpt-ask",
                    search_attributes=False,
                ),
                id=f"task-{session}-1",
                task_queue=queue,
                result_type=TaskResult,
            )
            result = await handle.result()
    finally:
        await router.aclose()
        await env.shutdown()
    assert result.reply == "Nobody answered; I stopped there."
    expired = last_tool_result(scripted.requests_for("gpt-ask")[1])
    assert "Nobody answered within 24 hours" in expired
    assert store.list_decisions(session) == {}
