"""errands on your own Temporal worker: a subtask type whose branches call a Python tool."""

import asyncio

from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    import errands

RATES = {"EUR": 1.0, "USD": 1.08, "GBP": 0.85, "JPY": 162.0}
calls: list[dict[str, object]] = []


@errands.tool
def convert(amount: float, source: str, target: str) -> float:
    """Convert an amount of money from one currency to another (EUR, USD, GBP or JPY)."""
    calls.append({"amount": amount, "source": source, "target": target})
    return round(amount / RATES[source] * RATES[target], 2)


FX = errands.SubtaskType(
    key="fx",
    description="Convert amounts of money between currencies at today's rates.",
    guidance="Delegate currency conversions to `fx` subtasks, one amount per subtask.",
    instructions="Convert with the `convert` tool, then state the result in one sentence.",
    tools=[convert],
)


@workflow.defn
class Greet:
    """One of your own workflows: errands' run on the same worker, beside it."""

    @workflow.run
    async def run(self, name: str) -> str:
        return f"Hello, {name}!"


async def main() -> errands.TaskResult:
    settings = errands.load_settings(task_queue="my-app")  # and the environment
    plugin = errands.ErrandsPlugin(settings, subtask_types=[FX])
    temporal = await Client.connect(
        settings.temporal_address or "localhost:7233",
        namespace=settings.temporal_namespace,
        plugins=[plugin],
    )
    async with Worker(temporal, task_queue=settings.task_queue, workflows=[Greet]):
        client = errands.Client(temporal, settings)
        result = await client.run("How much is 250 euros in US dollars?")
    print(result.reply)
    return result


if __name__ == "__main__":
    asyncio.run(main())
