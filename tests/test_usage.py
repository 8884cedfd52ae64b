"""The usage ledger adds up to what the provider reported, failed attempts included, and the
price table turns it into the task's cost (status, result and the ErrandsCost attribute)."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from errands.adapters.scripted import Call, Fail, Reply, ScriptedModelServer
from errands.agent.pricing import cost_usd, price_table
from errands.contracts.messages import ModelPrice, ModelUsage, Usage
from tests.conftest import StartTask
from tests.helpers import Conversation, eventually

PRICE = ModelPrice(input=1.0, output=2.0, cached=0.5)


async def test_the_ledger_equals_the_reported_usage_of_every_request(
    client: Client, scripted: ScriptedModelServer, start: StartTask
) -> None:
    subtasks = [{"type": "general", "prompt": f"part {k}", "references": [1]} for k in (1, 2)]
    convo = Conversation(
        [
            Fail(500, "flaky"),
            Reply(
                calls=[Call("delegate", {"reply": "on it", "subtasks": subtasks})],
                usage=Usage(input_tokens=900, output_tokens=40, cached_tokens=300),
            ),
            Reply(calls=[Call("final_reply", {"text": "done"})]),
        ],
        lambda r: Reply(
            text="branch text", usage=Usage(input_tokens=120, output_tokens=30, cached_tokens=0)
        ),
        branches=2,
    ).install(scripted, "gpt-usage")
    handle = await start(
        "q",
        model="openai:gpt-usage",
        prices={"openai:gpt-usage": PRICE},
    )
    result = await handle.result()
    reported = ModelUsage()
    for request in scripted.requests_for("gpt-usage"):
        spent = request.reported_usage or Usage()
        reported.add(
            ModelUsage(
                calls=1,
                input_tokens=spent.input_tokens,
                output_tokens=spent.output_tokens,
                cached_tokens=spent.cached_tokens,
            )
        )
    total = result.usage.total()
    assert (total.calls, total.input_tokens, total.output_tokens, total.cached_tokens) == (
        reported.calls,
        reported.input_tokens,
        reported.output_tokens,
        reported.cached_tokens,
    )
    assert total.failed_calls == 1
    assert set(result.usage.parts) == {"rounds", "branches"}
    assert result.cost_usd == cost_usd(result.usage, {"openai:gpt-usage": PRICE}) > 0
    query = f'ErrandsCost > 0 AND WorkflowId = "{handle.id}"'

    async def found() -> list[str]:
        return [w.id async for w in client.list_workflows(query)]

    await eventually(found, "the ErrandsCost search attribute in visibility")
    assert len(convo.branch_requests) == 2


@pytest.mark.fast
def test_prices_can_be_overridden_and_unknown_models_cost_nothing() -> None:
    table = price_table('{"openai:mine": {"input": 10, "output": 20}}')
    assert table["openai:mine"] == ModelPrice(input=10, output=20)
    assert table["demo"] == ModelPrice()
    assert "openai:gpt-4.1" in table
