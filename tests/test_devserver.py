"""The embedded dev server starts tuned, registers errands' search attributes, stops for real and
keeps its workflows in its database file across a restart."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus

from errands.adapters.devserver import (
    SEARCH_ATTRIBUTES,
    DevServer,
    free_port,
    lost_port_race,
    port_open,
    temporal_cli_path,
)


@pytest.mark.fast
def test_command_starts_the_server_tuned_on_loopback(tmp_path: Path) -> None:
    cmd = DevServer(port=7777, ui_port=None, db_file=str(tmp_path / "t.db")).command()

    assert cmd[:3] == [temporal_cli_path(), "server", "start-dev"]
    joined = " ".join(cmd)
    assert "--ip 127.0.0.1 --port 7777" in joined
    assert "--dynamic-config-value history.transferProcessorMaxPollRPS=10000" in joined
    assert "--sqlite-pragma journal_mode=wal --sqlite-pragma synchronous=normal" in joined
    assert "--headless" in cmd and "--ui-port" not in cmd
    for name, kind in SEARCH_ATTRIBUTES.items():
        assert f"--search-attribute {name}={kind}" in joined


@pytest.mark.fast
def test_command_without_a_db_file_has_no_sqlite_pragmas_and_serves_the_ui() -> None:
    cmd = DevServer(port=7777, ui_port=9999).command()

    assert "--sqlite-pragma" not in cmd and "--db-filename" not in cmd
    assert "--headless" not in cmd
    assert cmd[cmd.index("--ui-port") + 1] == "9999"


async def test_server_registers_search_attributes_and_frees_its_port_on_stop(
    tmp_path: Path,
) -> None:
    server = DevServer(
        port=free_port(),
        ui_port=None,
        db_file=str(tmp_path / "temporal.db"),
        log_file=str(tmp_path / "temporal.log"),
    )
    server.start()
    try:
        assert server.address == f"127.0.0.1:{server.port}" and server.ui_url is None
        client = await Client.connect(server.address)
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace="default")
        )
        registered = {name: listed.custom_attributes.get(name) for name in SEARCH_ATTRIBUTES}
        assert registered == {
            name: IndexedValueType.Value(f"INDEXED_VALUE_TYPE_{kind.upper()}")
            for name, kind in SEARCH_ATTRIBUTES.items()
        }
    finally:
        server.stop()

    assert not server.running
    assert not port_open("127.0.0.1", server.port)
    server.stop()  # a second stop is harmless


async def test_restart_on_the_same_db_file_keeps_a_started_workflow(tmp_path: Path) -> None:
    db_file = str(tmp_path / "temporal.db")
    with DevServer(port=free_port(), ui_port=None, db_file=db_file) as server:
        client = await Client.connect(server.address)
        # No worker polls "none": the execution just stays RUNNING in the database.
        await client.start_workflow("NoSuchWorkflow", id="kept-across-restart", task_queue="none")

    with DevServer(port=free_port(), ui_port=None, db_file=db_file) as server:
        client = await Client.connect(server.address)
        described = await client.get_workflow_handle("kept-across-restart").describe()

    assert described.workflow_type == "NoSuchWorkflow"
    assert described.status == WorkflowExecutionStatus.RUNNING


def test_server_with_the_ui_answers_on_its_ui_port() -> None:
    ui_port = free_port()
    with DevServer(port=free_port(), ui_port=ui_port) as server:
        assert server.ui_url == f"http://127.0.0.1:{ui_port}"
        assert port_open("127.0.0.1", ui_port)
    assert not port_open("127.0.0.1", ui_port)


def test_server_that_exits_while_starting_raises_with_its_log(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a sqlite database" * 400)
    server = DevServer(port=free_port(), ui_port=None, db_file=str(junk))

    with pytest.raises(RuntimeError, match="exited with code") as raised:
        server.start(timeout=30)

    assert "not a database" in str(raised.value)
    assert not server.running


@pytest.mark.fast
def test_only_a_port_the_server_chose_itself_being_taken_is_started_again() -> None:
    """As the CLI's dev server logs it when a side port of its own choosing was taken between
    its check and its bind (seen in CI): ``start`` tries again; a port it was given is not."""
    log = (
        '{"level":"FATAL","prefix":"echo","file":"server.go","line":"155",'
        '"message":"listen tcp 127.0.0.1:38893: bind: address already in use"}'
    )
    failure = f"the dev server at 127.0.0.1:57209 exited with code 1 while starting; {log}"
    assert lost_port_race(failure, (57209, 8233))
    assert not lost_port_race(failure, (57209, 38893))
    assert not lost_port_race(failure.replace("38893", "57209"), (57209, None))
    assert not lost_port_race("its log ends with: file is not a database", (57209, None))


def test_start_refuses_a_port_that_is_already_taken() -> None:
    first = _started_on_a_free_port()
    try:
        with pytest.raises(RuntimeError, match="already taken"):
            DevServer(port=first.port, ui_port=None).start()
    finally:
        first.stop()


def _started_on_a_free_port(attempts: int = 3) -> DevServer:
    """A free port can be taken between the check and the bind, by the server's own random
    side ports among others: try a fresh one rather than fail on that race."""
    for attempt in range(attempts):
        server = DevServer(port=free_port(), ui_port=None)
        try:
            return server.start()
        except RuntimeError:
            server.stop()
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")
