"""ErrandsPlugin on a user's own client and worker, and work tools from typed functions."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import uuid
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import BaseModel, Field
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from errands.adapters.devserver import DevServer
from errands.adapters.scripted import Call, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore, open_store
from errands.agent.subtask_types import SubtaskType, load_types
from errands.agent.tools import tool
from errands.errors import ConfigError, ModelMistake
from errands.plugin import ErrandsPlugin
from errands.settings import Settings
from errands.workers import build_worker
from tests.helpers import HISTORIES, eventually, start_task

ECHO = SubtaskType(
    key="echo",
    description="Repeat what it is given.",
    guidance="`echo` subtasks repeat their prompt.",
    instructions="Repeat the prompt.",
)


def on_queue(settings: Settings, **changes: object) -> Settings:
    return settings.model_copy(update={"task_queue": f"plugin-{uuid.uuid4().hex[:6]}", **changes})


def files_open(prefix: Path) -> list[str]:
    """What this process holds open under ``prefix`` (the database file, its WAL, its shm)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(prefix)):
            held.append(target)
    return held


# -- the plugin on a client and a worker -------------------------------------------------------


async def test_a_worker_whose_client_lacks_the_pydantic_converter_is_refused(
    dev_server: DevServer, settings: Settings, tmp_path: Path
) -> None:
    plain = await Client.connect(dev_server.address)
    database = tmp_path / "sessions.db"
    mine = on_queue(settings, database_url=f"sqlite:///{database}")
    with pytest.raises(ConfigError) as refused:
        Worker(plain, task_queue=mine.task_queue, plugins=[ErrandsPlugin(mine)])
    message = str(refused.value)
    assert "pydantic" in message and "plugins=[ErrandsPlugin" in message
    assert "\n" not in message
    assert not database.exists(), "no store is opened for a worker that cannot run"


async def test_a_plugin_used_only_on_a_client_opens_no_database(
    dev_server: DevServer, settings: Settings, tmp_path: Path
) -> None:
    database = tmp_path / "sessions.db"
    plugin = ErrandsPlugin(on_queue(settings, database_url=f"sqlite:///{database}"))
    client = await Client.connect(dev_server.address, plugins=[plugin])
    assert client.data_converter.payload_converter_class.__name__ == "PydanticPayloadConverter"
    assert not database.exists()


@pytest.mark.parametrize("how", ["async with", "run and shutdown"])
async def test_the_store_the_plugin_opened_is_closed_when_its_worker_stops(
    client: Client, settings: Settings, tmp_path: Path, how: str
) -> None:
    database = tmp_path / "sessions.db"
    mine = on_queue(settings, database_url=f"sqlite:///{database}")
    worker = Worker(client, task_queue=mine.task_queue, plugins=[ErrandsPlugin(mine)])
    assert files_open(database), "the worker's store is open once the worker is configured"
    if how == "async with":
        async with worker:
            await eventually(lambda: worker.is_running, "the worker to run")
    else:
        running = asyncio.create_task(worker.run())
        await eventually(lambda: worker.is_running, "the worker to run")
        await worker.shutdown()
        await running
    assert files_open(database) == []


async def test_a_store_given_to_the_plugin_is_left_open(
    client: Client, settings: Settings, tmp_path: Path
) -> None:
    database = tmp_path / "given.db"
    store = open_store(f"sqlite:///{database}")
    mine = on_queue(settings)
    async with Worker(
        client, task_queue=mine.task_queue, plugins=[ErrandsPlugin(mine, store=store)]
    ) as running:
        await eventually(lambda: running.is_running, "the worker to run")
    assert store.last_seq("nobody") == 0, "the caller's store still answers"
    store.close()


async def test_plugin_subtask_types_reach_the_delegate_schema(
    client: Client, settings: Settings, store: SessionStore, scripted: ScriptedModelServer
) -> None:
    mine = on_queue(settings)
    plugin = ErrandsPlugin(mine, subtask_types=[ECHO], store=store)
    scripted.script("gpt-plugin", Reply(calls=[Call("final_reply", {"text": "done"})]))
    async with Worker(client, task_queue=mine.task_queue, plugins=[plugin]):
        handle = await start_task(client, mine.task_queue, "hi", model="openai:gpt-plugin")
        assert (await handle.result()).reply == "done"
    (request,) = scripted.requests_for("gpt-plugin")
    delegate = next(t for t in request.body["tools"] if t["function"]["name"] == "delegate")
    subtask = delegate["function"]["parameters"]["properties"]["subtasks"]["items"]
    # Built in, then ERRANDS_SUBTASK_TYPES (tests.plugins), then the plugin's own.
    assert subtask["properties"]["type"]["enum"] == ["general", "research", "echo"]
    assert "echo: Repeat what it is given." in delegate["function"]["description"]


async def test_build_worker_uses_the_plugin_a_client_carries_instead_of_adding_another(
    dev_server: DevServer, settings: Settings, store: SessionStore
) -> None:
    mine = on_queue(settings)
    client = await Client.connect(dev_server.address, plugins=[ErrandsPlugin(mine, store=store)])
    worker = build_worker(client, mine)
    names = [a.__name__ for a in worker.config(active_config=True).get("activities", [])]
    assert len(names) == len(set(names)) and "round_step" in names


async def test_the_plugins_worker_passes_the_workflow_modules_through_the_sandbox(
    dev_server: DevServer, settings: Settings, store: SessionStore
) -> None:
    mine = on_queue(settings)
    client = await Client.connect(dev_server.address, plugins=[ErrandsPlugin(mine, store=store)])
    runner = build_worker(client, mine).config(active_config=True).get("workflow_runner")
    assert isinstance(runner, SandboxedWorkflowRunner)
    assert "workflows" in runner.restrictions.passthrough_modules
    # A runner the user configured is theirs to keep.
    strict = SandboxedWorkflowRunner(SandboxRestrictions.default.with_passthrough_modules("json"))
    kept = Worker(client, task_queue=on_queue(settings).task_queue, workflow_runner=strict)
    assert kept.config(active_config=True).get("workflow_runner") is strict


async def test_a_replayer_with_the_plugin_replays_a_recorded_history(settings: Settings) -> None:
    path = sorted(HISTORIES.glob("*.json"))[0]
    recorded = json.loads(path.read_text())
    history = WorkflowHistory.from_json(recorded["workflow_id"], recorded["history"])
    replayer = Replayer(workflows=[], plugins=[ErrandsPlugin(settings)])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None


# -- subtask types: where they come from, and what a bad one says ------------------------------


@pytest.mark.fast
def test_a_plugins_type_overrides_one_of_the_same_key_from_the_setting() -> None:
    mine = SubtaskType(key="research", description="Mine.", guidance="g", instructions="i")
    assert load_types("tests.plugins:TYPES", [mine])["research"] is mine


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("tests.plugins", "must look like 'package.module:attribute'"),
        ("tests.nowhere_at_all:TYPES", "does not import"),
        ("tests.plugins:MISSING", "has no attribute 'MISSING'"),
        ("tests.plugins:RESEARCH.key", "is a str, not a SubtaskType"),
    ],
    ids=["no-attribute-part", "no-module", "no-attribute", "not-a-type"],
)
@pytest.mark.fast
def test_a_bad_subtask_types_entry_is_one_line_naming_it(entry: str, says: str) -> None:
    with pytest.raises(ConfigError) as bad:
        load_types(f"tests.plugins:TYPES, {entry}")
    message = str(bad.value)
    assert bad.value.setting == "ERRANDS_SUBTASK_TYPES"
    assert f"ERRANDS_SUBTASK_TYPES entry {entry!r}" in message and says in message
    assert "\n" not in message


@pytest.mark.fast
def test_an_entry_point_that_does_not_load_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist = tmp_path / "broken_types-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-types\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[errands.subtask_types]\nbroken = broken_types_nowhere:TYPES\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as bad:
        load_types()
    assert "entry point 'broken' (broken_types_nowhere:TYPES) does not load" in str(bad.value)
    assert "\n" not in str(bad.value)


def test_the_same_key_given_twice_to_the_plugin_is_refused(settings: Settings) -> None:
    with pytest.raises(ConfigError, match="'echo' is given twice") as bad:
        ErrandsPlugin(settings, subtask_types=[ECHO, ECHO])
    assert bad.value.setting == "ERRANDS_SUBTASK_TYPES"


# -- work tools from typed functions -----------------------------------------------------------


@pytest.mark.fast
def test_a_tools_schema_and_description_come_from_its_signature_and_docstring() -> None:
    @tool
    def convert(amount: float, source: str, target: str = "EUR") -> float:
        """Convert an amount of money
        between currencies.

        Rates are today's."""
        return amount

    assert convert.spec.name == "convert"
    assert convert.spec.description == "Convert an amount of money between currencies."
    assert convert.spec.parameters == {
        "type": "object",
        "properties": {
            "amount": {"title": "Amount", "type": "number"},
            "source": {"title": "Source", "type": "string"},
            "target": {"default": "EUR", "title": "Target", "type": "string"},
        },
        "required": ["amount", "source"],
        "additionalProperties": False,
    }


class Query(BaseModel):
    term: Annotated[str, Field(description="What to look up.")]
    depth: int = 1


@pytest.mark.fast
def test_a_tool_taking_one_pydantic_model_has_that_models_schema() -> None:
    @tool(name="lookup", description="Look a term up.")
    async def find(query: Query) -> str:
        return query.term

    assert (find.spec.name, find.spec.description) == ("lookup", "Look a term up.")
    assert find.spec.parameters["properties"]["term"]["description"] == "What to look up."
    assert find.spec.parameters["required"] == ["term"]


@pytest.mark.fast
async def test_a_tool_given_one_pydantic_model_receives_it_validated() -> None:
    @tool
    async def find(query: Query) -> Query:
        """Look a term up."""
        return query

    assert await find({"term": "otter"}) == '{"term":"otter","depth":1}'


@pytest.mark.fast
async def test_invalid_arguments_are_a_model_mistake_naming_the_field() -> None:
    @tool
    def convert(amount: float, source: str) -> float:
        """Convert money."""
        return amount

    with pytest.raises(ModelMistake) as mistake:
        await convert({"amount": "lots", "source": "EUR"})
    message = str(mistake.value)
    assert "amount: Input should be a valid number" in message
    assert "call convert again" in message
    with pytest.raises(ModelMistake, match="source: Field required"):
        await convert({"amount": 1})
    with pytest.raises(ModelMistake, match="currency: Extra inputs are not permitted"):
        await convert({"amount": 1, "source": "EUR", "currency": "USD"})


@pytest.mark.fast
async def test_a_sync_tool_runs_off_the_event_loop_and_returns_json() -> None:
    @tool
    def where(city: str) -> dict[str, object]:
        """Say where the call ran."""
        return {"city": city, "thread": threading.current_thread().name}

    result = await where({"city": "Porto"})
    assert result.startswith('{"city":"Porto","thread":"')
    assert threading.current_thread().name not in result


@pytest.mark.fast
def test_a_tool_without_a_description_is_refused_at_definition() -> None:
    def bare(x: int) -> int:
        return x

    with pytest.raises(TypeError, match="has no description"):
        tool(bare)


async def test_running_workers_take_what_the_process_holds_out_of_the_collectors_way(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    """What ``errands worker`` and ``errands dev`` hold once their workers run is frozen
    (``gc.freeze``): a full collection then scans only what tasks made since."""
    import gc

    from errands.workers import running_workers

    gc.unfreeze()
    try:
        async with running_workers(client, on_queue(settings), store=store):
            frozen = gc.get_freeze_count()
            assert frozen > 10_000, f"only {frozen} objects were frozen"
            assert len(gc.get_objects()) < frozen
    finally:
        gc.unfreeze()  # the test process collects as before
