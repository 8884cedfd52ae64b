"""Observability: JSON log lines carry the task, round and branch of the activity or workflow that
wrote them; the SDK's Prometheus endpoint serves ``temporal_`` metrics; tracing is an optional
extra that degrades to nothing, with a log line, when OpenTelemetry is missing.

A throwaway workflow and activity stand in for the real ones: what is pinned is how the ids get
from Temporal's context onto the line, which does not depend on what the activity does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import json
import logging
import socket
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from errands.adapters.devserver import DevServer, free_port
from errands.adapters.telemetry import (
    LogContextInterceptor,
    configure_logging,
    ids_from_workflow_id,
    runtime_with_metrics,
    tracing_interceptors,
)
from tests.helpers import eventually

PROBE_LOGGER = "errands.test_telemetry"


class Probe(BaseModel):
    text: str = "hello"
    round: int | None = None


@activity.defn(name="telemetry_probe")
def probe_activity(data: Probe) -> str:
    logging.getLogger(PROBE_LOGGER).info("probe activity ran: %s", data.text)
    return data.text


@workflow.defn(name="TelemetryProbe")
class ProbeWorkflow:
    @workflow.run
    async def run(self, data: Probe) -> str:
        workflow.logger.info("probe workflow started")
        return await workflow.execute_activity(
            probe_activity, data, start_to_close_timeout=timedelta(seconds=30)
        )


def probe_worker(client: Client, task_queue: str, **options: Any) -> Worker:
    # A sync activity on a thread pool, as in production: the ids must survive the hop from
    # the event loop to the activity's thread.
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[ProbeWorkflow],
        activities=[probe_activity],
        activity_executor=concurrent.futures.ThreadPoolExecutor(max_workers=2),
        interceptors=[LogContextInterceptor()],
        # The probe lives in a test module, which the sandbox would re-import with pytest.
        workflow_runner=UnsandboxedWorkflowRunner(),
        **options,
    )


async def run_probe(client: Client, workflow_id: str, data: Probe, **worker_options: Any) -> str:
    task_queue = f"telemetry-{uuid.uuid4().hex[:8]}"
    async with probe_worker(client, task_queue, **worker_options):
        return await client.execute_workflow(
            ProbeWorkflow.run, data, id=workflow_id, task_queue=task_queue
        )


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """configure_logging changes process-wide state; put it back for the tests that follow."""
    root = logging.getLogger()
    saved = (
        root.level,
        list(root.handlers),
        workflow.logger.workflow_info_on_message,
        activity.logger.activity_info_on_message,
    )
    yield
    root.setLevel(saved[0])
    for handler in [h for h in root.handlers if h not in saved[1]]:
        root.removeHandler(handler)
    workflow.logger.workflow_info_on_message = saved[2]
    activity.logger.activity_info_on_message = saved[3]


@pytest.fixture
def json_lines(restore_logging: None) -> Callable[[], list[dict[str, Any]]]:
    """configure_logging(json=True) into a buffer; returns a reader of the lines so far."""
    buffer = io.StringIO()
    configure_logging("INFO", json=True, stream=buffer)
    return lambda: [json.loads(line) for line in buffer.getvalue().splitlines()]


def lines_of(lines: list[dict[str, Any]], message_start: str) -> list[dict[str, Any]]:
    return [line for line in lines if line["message"].startswith(message_start)]


# -- logs ------------------------------------------------------------------------------------


async def test_a_branch_activity_logs_its_task_round_and_branch(
    client: Client, json_lines: Callable[[], list[dict[str, Any]]]
) -> None:
    task_id = f"task-s{uuid.uuid4().hex[:6]}-abc123"
    await run_probe(client, f"{task_id}/r2/b1", Probe(text="branch"))

    [line] = lines_of(json_lines(), "probe activity ran: branch")
    assert (line["task_id"], line["round"], line["branch"]) == (task_id, 2, 1)
    assert line["level"] == "INFO"
    assert line["logger"] == PROBE_LOGGER


async def test_a_task_activity_takes_its_round_from_the_activity_input(
    client: Client, json_lines: Callable[[], list[dict[str, Any]]]
) -> None:
    task_id = f"task-s{uuid.uuid4().hex[:6]}-def456"
    await run_probe(client, task_id, Probe(text="round", round=3))

    [line] = lines_of(json_lines(), "probe activity ran: round")
    assert (line["task_id"], line["round"]) == (task_id, 3)
    assert "branch" not in line


async def test_workflow_log_lines_carry_the_task_and_keep_the_message_clean(
    client: Client, json_lines: Callable[[], list[dict[str, Any]]]
) -> None:
    task_id = f"task-s{uuid.uuid4().hex[:6]}-0a0b0c"
    await run_probe(client, f"{task_id}/r1/b0", Probe())

    [line] = lines_of(json_lines(), "probe workflow started")
    assert (line["task_id"], line["round"], line["branch"]) == (task_id, 1, 0)
    assert line["workflow_type"] == "TelemetryProbe"
    # The SDK's details are fields of the line, not a dict pasted onto the message.
    assert line["message"] == "probe workflow started"


@pytest.mark.fast
def test_lines_outside_any_task_have_no_ids(json_lines: Callable[[], list[dict[str, Any]]]) -> None:
    logging.getLogger(PROBE_LOGGER).warning("worker polling %s", "errands")
    logging.getLogger(PROBE_LOGGER).info("explicit ids win", extra={"task_id": "task-given"})

    first, second = json_lines()
    assert first["message"] == "worker polling errands"
    assert not {"task_id", "round", "branch"} & set(first)
    assert second["task_id"] == "task-given"


@pytest.mark.fast
def test_text_format_shows_the_ids_in_brackets(restore_logging: None) -> None:
    buffer = io.StringIO()
    configure_logging("INFO", json=False, stream=buffer)
    logging.getLogger(PROBE_LOGGER).info("hi", extra={"task_id": "task-x", "round": 4})
    assert f"INFO {PROBE_LOGGER} [task-x r4]: hi" in buffer.getvalue()


@pytest.mark.fast
def test_a_second_configuration_replaces_the_first(restore_logging: None) -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("INFO", stream=first)
    configure_logging("WARNING", stream=second)
    logging.getLogger(PROBE_LOGGER).warning("only once")
    assert first.getvalue() == ""
    assert json.loads(second.getvalue())["message"] == "only once"


@pytest.mark.fast
def test_an_unknown_log_level_names_the_setting() -> None:
    with pytest.raises(ValueError, match="ERRANDS_LOG_LEVEL"):
        configure_logging("LOUD")


@pytest.mark.fast
def test_workflow_ids_parse_into_task_round_and_branch() -> None:
    assert ids_from_workflow_id("task-s1-ab12cd") == {"task_id": "task-s1-ab12cd"}
    assert ids_from_workflow_id("task-s1-ab12cd/r3/b7") == {
        "task_id": "task-s1-ab12cd",
        "round": 3,
        "branch": 7,
    }
    assert ids_from_workflow_id("task-s1-ab12cd/btw-0f0f0f") == {"task_id": "task-s1-ab12cd"}


# -- metrics ---------------------------------------------------------------------------------


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


async def test_the_prometheus_endpoint_serves_temporal_metrics_after_a_workflow(
    dev_server: DevServer,
) -> None:
    bind = f"127.0.0.1:{free_port()}"
    client = await Client.connect(
        dev_server.address,
        data_converter=pydantic_data_converter,
        runtime=runtime_with_metrics(bind),
    )
    assert await run_probe(client, f"task-m{uuid.uuid4().hex[:6]}", Probe(text="m")) == "m"

    # The SDK exports on its own schedule; poll (bounded) rather than assume it already did.

    async def exported() -> str | None:
        text = await asyncio.to_thread(fetch, f"http://{bind}/metrics")
        wanted = ("temporal_workflow_completed", "temporal_activity_execution_latency")
        return text if all(name in text for name in wanted) else None

    text = await eventually(exported, "the SDK's metrics on the endpoint")
    assert "temporal_workflow_completed" in text
    assert "temporal_activity_execution_latency" in text
    assert 'task_queue="telemetry-' in text


@pytest.mark.fast
def test_a_metrics_bind_without_a_port_names_the_setting() -> None:
    with pytest.raises(ValueError, match="ERRANDS_METRICS_BIND='localhost' is not IP:port"):
        runtime_with_metrics("localhost")


def test_a_metrics_port_already_taken_names_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        bind = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(ValueError, match="could not start at ERRANDS_METRICS_BIND"):
            runtime_with_metrics(bind)


# -- tracing ---------------------------------------------------------------------------------


async def test_tracing_interceptors_trace_workflow_and_activity(client: Client) -> None:
    # The `otel` extra, a dev dependency: imported here so only this test needs it.
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from temporalio.contrib.opentelemetry import TracingInterceptor

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    interceptors = tracing_interceptors(provider.get_tracer("errands-test"))
    assert [type(i) for i in interceptors] == [TracingInterceptor]

    config = client.config()
    config["interceptors"] = interceptors
    traced = Client(**config)
    await run_probe(traced, f"task-t{uuid.uuid4().hex[:6]}", Probe())

    names = {span.name for span in exporter.get_finished_spans()}
    assert {
        "StartWorkflow:TelemetryProbe",
        "RunWorkflow:TelemetryProbe",
        "StartActivity:telemetry_probe",
        "RunActivity:telemetry_probe",
    } <= names
    provider.shutdown()


@pytest.mark.fast
def test_tracing_interceptors_are_empty_and_say_why_without_opentelemetry(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A None entry in sys.modules makes the import fail as if the package were not installed.
    monkeypatch.setitem(sys.modules, "temporalio.contrib.opentelemetry", None)
    with caplog.at_level(logging.WARNING, logger="errands.telemetry"):
        assert tracing_interceptors() == []
    [record] = caplog.records
    assert "tracing is off" in record.getMessage()
    assert "pip install 'errands[otel]'" in record.getMessage()
