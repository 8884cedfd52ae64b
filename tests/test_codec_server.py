"""``errands codec-server`` and ``errands dev --encrypt`` (issue 24): the Temporal UI's and CLI's
remote codec decrypts for whoever holds the token and for pages of the UI's origin alone, and a
task run with encryption on is unreadable in its raw history but readable through the codec."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import signal
import socket
import stat
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf import json_format
from pydantic import SecretStr
from temporalio.api.common.v1 import Payload
from temporalio.client import Client as TemporalClient

import errands
from errands.adapters.devserver import DevServer, free_port, temporal_cli_path
from errands.adapters.encryption import AesGcmCodec, data_converter, new_key, parse_keys
from errands.adapters.routing import ModelRouter
from errands.adapters.scripted import Gate, RecordedRequest, Reply, ScriptedModelServer
from errands.adapters.store import SessionStore
from errands.cli import main
from errands.cli._codec import dev_codec_server
from errands.errors import ConfigError
from errands.gateway import codec_origins, codec_serving, create_codec_app
from errands.settings import Settings
from errands.workers import build_worker
from tests.conftest import ROOT, read_stderr_until, run_cli, start_cli
from tests.helpers import DATABASE, ask, delegate, eventually, final, is_branch_request
from tests.histories_raw import readable

TOKEN = secrets.token_urlsafe(32)
UI = "http://127.0.0.1:8233"
KEY = new_key()
PLAIN = Payload(metadata={"encoding": b"json/plain"}, data=b'"the text a user wrote"')
ENCRYPTED_ENCODING = base64.b64encode(b"binary/encrypted").decode()


def as_json(*payloads: Payload) -> dict[str, Any]:
    return {"payloads": [json_format.MessageToDict(p) for p in payloads]}


def from_json(body: dict[str, Any]) -> list[Payload]:
    return [json_format.ParseDict(p, Payload()) for p in body["payloads"]]


@asynccontextmanager
async def codec_http(
    keys: str = f"k1={KEY}", token: str | None = TOKEN
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_codec_app(AesGcmCodec(parse_keys(keys)), token=token, origins=[UI])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8081") as http:
        yield http


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# -- the HTTP endpoint ---------------------------------------------------------------------------


@pytest.mark.fast
async def test_decode_gives_back_what_encode_sealed() -> None:
    async with codec_http() as http:
        sealed = await http.post("/encode", json=as_json(PLAIN), headers=bearer())
        assert sealed.status_code == 200, sealed.text
        [encrypted] = from_json(sealed.json())
        assert encrypted.metadata["encoding"] == b"binary/encrypted"
        assert b"the text a user wrote" not in encrypted.data
        opened = await http.post("/decode", json=sealed.json(), headers=bearer())
        assert opened.status_code == 200, opened.text
        assert from_json(opened.json()) == [PLAIN]


@pytest.mark.fast
async def test_a_payload_no_key_opens_comes_back_as_it_came_and_the_rest_of_the_batch_decodes() -> (
    None
):
    dropped = AesGcmCodec(parse_keys(f"old={new_key()}")).encrypt(PLAIN)
    current = AesGcmCodec(parse_keys(f"k1={KEY}")).encrypt(PLAIN)
    async with codec_http() as http:
        opened = await http.post("/decode", json=as_json(dropped, current, PLAIN), headers=bearer())
    assert opened.status_code == 200, opened.text
    assert from_json(opened.json()) == [dropped, PLAIN, PLAIN]


@pytest.mark.fast
@pytest.mark.parametrize("headers", [{}, bearer("a-wrong-token"), {"Authorization": TOKEN}])
async def test_without_the_token_nothing_is_decoded(headers: dict[str, str]) -> None:
    sealed = AesGcmCodec(parse_keys(f"k1={KEY}")).encrypt(PLAIN)
    async with codec_http() as http:
        refused = await http.post("/decode", json=as_json(sealed), headers=headers)
        sealing = await http.post("/encode", json=as_json(PLAIN), headers=headers)
    assert refused.status_code == sealing.status_code == 401
    assert "ERRANDS_API_TOKEN" in refused.json()["detail"]
    assert "payloads" not in refused.json()


@pytest.mark.fast
async def test_the_preflight_answers_the_ui_origin_and_refuses_any_other() -> None:
    asking = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Private-Network": "true",
    }
    wanted = "authorization,content-type,x-namespace"
    async with codec_http() as http:
        ui = await http.options(
            "/decode", headers={"Origin": UI, **asking, "Access-Control-Request-Headers": wanted}
        )
        other = await http.options(
            "/decode", headers={"Origin": "https://elsewhere.example", **asking}
        )
        from_ui = await http.post(
            "/decode", json=as_json(PLAIN), headers={"Origin": UI, **bearer()}
        )
        from_other = await http.post(
            "/decode",
            json=as_json(PLAIN),
            headers={"Origin": "https://elsewhere.example", **bearer()},
        )
    assert ui.status_code == 200
    assert ui.headers["access-control-allow-origin"] == UI
    allowed = {h.strip().lower() for h in ui.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type", "x-namespace"} <= allowed
    assert ui.headers["access-control-allow-private-network"] == "true"
    assert other.status_code == 400
    assert "access-control-allow-origin" not in other.headers
    assert from_ui.status_code == 200 and from_ui.headers["access-control-allow-origin"] == UI
    assert from_other.status_code == 403
    assert "ERRANDS_CODEC_CORS_ORIGINS" in from_other.json()["detail"]


@pytest.mark.fast
async def test_a_body_that_is_not_payloads_is_refused_with_the_shape_to_send() -> None:
    async with codec_http() as http:
        garbled = await http.post(
            "/decode",
            content=b'{"payloads": 3}',
            headers={**bearer(), "Content-Type": "application/json"},
        )
        text = await http.post(
            "/decode", content=b"{}", headers={**bearer(), "Content-Type": "text/plain"}
        )
    assert garbled.status_code == 422 and '"payloads"' in garbled.json()["detail"]
    assert text.status_code == 422 and "application/json" in text.json()["detail"]


@pytest.mark.fast
def test_the_allowed_origins_are_the_configured_ones_else_the_ui_errands_links() -> None:
    embedded = Settings(TEMPORAL_ADDRESS=None, ERRANDS_DEV_UI_PORT=9233)
    assert codec_origins(embedded) == ["http://127.0.0.1:9233", "http://localhost:9233"]
    linked = Settings(ERRANDS_TEMPORAL_UI_URL="https://temporal.example.com/ui/")
    assert codec_origins(linked) == ["https://temporal.example.com"]
    configured = Settings(
        ERRANDS_CODEC_CORS_ORIGINS="https://ui.example.com, https://cloud.temporal.io"
    )
    assert codec_origins(configured) == ["https://ui.example.com", "https://cloud.temporal.io"]


@pytest.mark.fast
async def test_an_origin_given_with_its_default_port_matches_what_the_browser_sends() -> None:
    configured = Settings(
        ERRANDS_CODEC_CORS_ORIGINS="https://UI.example.com:443, http://plain.example:80, "
        "https://other.example:8443"
    )
    origins = codec_origins(configured)
    assert origins == [
        "https://ui.example.com",
        "http://plain.example",
        "https://other.example:8443",
    ]
    app = create_codec_app(AesGcmCodec(parse_keys(f"k1={KEY}")), token=TOKEN, origins=origins)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8081") as http:
        preflight = await http.options(
            "/decode",
            headers={"Origin": "https://ui.example.com", "Access-Control-Request-Method": "POST"},
        )
        plain = await http.post(
            "/decode", json=as_json(PLAIN), headers={"Origin": "http://plain.example", **bearer()}
        )
        with_port = await http.post(
            "/decode",
            json=as_json(PLAIN),
            headers={"Origin": "https://ui.example.com:443", **bearer()},
        )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://ui.example.com"
    assert plain.status_code == 200 and with_port.status_code == 200


@pytest.mark.fast
async def test_the_codec_servers_refusals_name_the_codec_server() -> None:
    async with codec_http() as http:
        none = await http.post("/decode", json=as_json(PLAIN))
        wrong = await http.post("/decode", json=as_json(PLAIN), headers=bearer("wrong"))
    assert "this codec server needs a token" in none.json()["detail"]
    assert "the codec server was started with" in wrong.json()["detail"]
    assert "gateway" not in none.json()["detail"] + wrong.json()["detail"]


# -- the command's refusals ----------------------------------------------------------------------


@pytest.mark.fast
def test_the_command_refuses_to_start_without_keys_or_beyond_loopback_without_a_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in list(os.environ):
        if name.startswith(("ERRANDS_", "TEMPORAL_")):
            monkeypatch.delenv(name)
    assert main(["codec-server", "--port", "0"]) == 2
    no_keys = capsys.readouterr().err
    assert no_keys.count("\n") == 1 and "set ERRANDS_ENCRYPTION_KEYS" in no_keys
    monkeypatch.setenv("ERRANDS_ENCRYPTION_KEYS", f"k1={KEY}")
    assert main(["codec-server", "--host", "0.0.0.0", "--port", "0"]) == 2
    open_to_all = capsys.readouterr().err
    assert open_to_all.count("\n") == 1 and "Set ERRANDS_API_TOKEN" in open_to_all
    assert KEY not in no_keys + open_to_all


@pytest.mark.fast
def test_the_command_uses_the_embedded_stacks_key_only_when_no_temporal_is_configured(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name in list(os.environ):
        if name.startswith(("ERRANDS_", "TEMPORAL_")):
            monkeypatch.delenv(name)
    (tmp_path / "encryption.keys").write_text(f"dev={KEY}\n")
    monkeypatch.setenv("ERRANDS_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no temporal.toml there
    with socket.socket() as taken:
        # A taken port: the command gets as far as listening only once it has keys.
        taken.bind(("127.0.0.1", 0))
        port = str(taken.getsockname()[1])
        assert main(["codec-server", "--port", port]) == 2
        embedded = capsys.readouterr().err
        profile = tmp_path / "temporal.toml"
        profile.write_text('[profile.default]\naddress = "temporal.example.com:7233"\n')
        monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(profile))
        assert main(["codec-server", "--port", port]) == 2
        configured = capsys.readouterr().err
    assert f"port {port}" in embedded and "--port" in embedded, "it had the dev key"
    assert "set ERRANDS_ENCRYPTION_KEYS" in configured, "a profile's Temporal has its own keys"


@pytest.mark.fast
async def test_the_dev_codec_server_on_a_taken_port_names_codec_port(tmp_path: Path) -> None:
    keyed = Settings(ERRANDS_ENCRYPTION_KEYS=f"k1={KEY}", ERRANDS_DATA_DIR=str(tmp_path))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))  # bound, not listening: only binding finds it taken
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as refused:
            async with dev_codec_server(keyed, port):
                pass
    assert f"port {port}" in str(refused.value) and "--codec-port" in str(refused.value)


# -- acceptance: a task with encryption on, read raw and through the codec server ---------------

MODEL = "openai:gpt-codec"


async def temporal_show(address: str, workflow_id: str, *codec: str) -> str:
    """``temporal workflow show --output json`` of ``workflow_id``: its raw history, or decoded
    by the codec server that ``codec`` names. The CLI prints a payload's data in base64, which
    hides plain text as well as ciphertext: read it with ``readable``."""
    proc = await asyncio.create_subprocess_exec(
        temporal_cli_path(),
        "workflow",
        "show",
        "--workflow-id",
        workflow_id,
        "--address",
        address,
        "--output",
        "json",
        "--disable-config-file",
        "--disable-config-env",
        *codec,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


def child_ids(shown: str) -> list[str]:
    """The workflow ids of the children a task started, from its history as the CLI shows it."""
    history = json.loads(shown)
    return [
        e["startChildWorkflowExecutionInitiatedEventAttributes"]["workflowId"]
        for e in history["events"]
        if "startChildWorkflowExecutionInitiatedEventAttributes" in e
    ]


async def test_a_task_with_encryption_on_is_unreadable_raw_and_readable_through_the_codec(
    dev_server: DevServer,
    settings: Settings,
    store: SessionStore,
    scripted: ScriptedModelServer,
) -> None:
    canary = {
        what: f"canary-{what}-{uuid.uuid4().hex[:10]}"
        for what in ("text", "answer", "btw", "steer", "queued")
    }
    session = f"codec-session-{uuid.uuid4().hex[:10]}"
    keyed = settings.model_copy(
        update={
            "task_queue": f"codec-{uuid.uuid4().hex[:8]}",
            "encryption_keys": SecretStr(f"k1={new_key()}"),
        }
    )
    temporal = await TemporalClient.connect(
        dev_server.address, data_converter=data_converter(keyed)
    )
    stale = Gate("the round's reply written before the steer")
    main_rounds = [
        ask(DATABASE),
        final("Plan, before the message.", hold=stale),
        delegate("Look into the move."),
        final("Plan, with the message."),
        final("The queued one, done."),
    ]

    def agent(request: RecordedRequest) -> Reply:
        if canary["btw"] in json.dumps(request.body):
            return Reply(text="Waiting on your answer.")
        if is_branch_request(request):
            return Reply(text="The branch looked into it.")
        return main_rounds.pop(0)

    scripted.script("gpt-codec", *[agent] * 7)
    router = ModelRouter(keyed)
    async with build_worker(temporal, keyed, store=store, router=router):
        client = errands.Client(temporal, keyed, store=store)
        handle = await client.start(
            f"Plan the move. {canary['text']}", model=MODEL, session=session
        )
        await eventually(handle.pending_question, "the task's question")
        side = await handle.btw(f"{canary['btw']}: what have you found?")
        assert side.answer == "Waiting on your answer."
        await handle.answer({"q1": [f"Other: {canary['answer']}"]})
        await stale.reached()
        await handle.say(canary["steer"])
        await handle.say(canary["queued"], mode="queue")
        stale.release()
        first = await handle.wait(timeout=60)
        assert first.reply == "Plan, with the message."
        assert first.next_task is not None
        second = await client.task(first.next_task).wait(timeout=60)
        assert second.reply == "The queued one, done."
    await router.aclose()

    raw = await temporal_show(dev_server.address, handle.task_id)
    assert ENCRYPTED_ENCODING in raw, "the history holds encrypted payloads"
    started = child_ids(raw)  # the branch, and the queued task
    assert len([i for i in started if "/r" in i]) == 1 and first.next_task in started
    for workflow_id in [handle.task_id, *started]:
        shown = readable(await temporal_show(dev_server.address, workflow_id))
        assert [c for c in [*canary.values(), session] if c in shown] == [], workflow_id

    async with codec_serving(keyed, "127.0.0.1", 0, TOKEN) as url:
        codec = ("--codec-endpoint", url, "--codec-auth", f"Bearer {TOKEN}")
        decoded = readable(await temporal_show(dev_server.address, handle.task_id, *codec))
        decoded_next = readable(await temporal_show(dev_server.address, first.next_task, *codec))
    assert [c for c in canary.values() if c not in decoded] == []
    assert canary["queued"] in decoded_next


# -- errands dev --encrypt -----------------------------------------------------------------------


def dev_env(data_dir: Path, port: int) -> dict[str, str]:
    """The environment of a user with nothing configured (the offline demo model)."""
    unset = ("ERRANDS_", "TEMPORAL_", "OPENAI_", "ANTHROPIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(unset)}
    env.update(ERRANDS_DATA_DIR=str(data_dir), ERRANDS_DEV_PORT=str(port), PYTHONPATH=str(ROOT))
    return env


async def run_dev(
    data_dir: Path,
    task: str | None = None,
    earlier: str | None = None,
    also: dict[str, str] | None = None,
) -> tuple[str, dict[str, Any]]:
    """Start ``errands dev --encrypt`` on free ports, read what it printed and what its UI and
    codec server answer (with ``task``, the history of a task `errands run` ran on it, raw and
    through the codec server; with ``earlier``, that task's history through the codec), and
    stop it. ``also``: more of the environment `errands dev` runs in."""
    port, ui_port, codec_port = free_port(), free_port(), free_port()
    proc = await start_cli(
        {**dev_env(data_dir, port), **(also or {})},
        "dev",
        "--encrypt",
        "--port",
        str(port),
        "--ui-port",
        str(ui_port),
        "--codec-port",
        str(codec_port),
        stdout=asyncio.subprocess.DEVNULL,
    )
    try:
        printed = await read_stderr_until(proc, "worker running", timeout=120)
        printed += await read_stderr_until(proc, "codec at", timeout=30)
        codec = f"http://127.0.0.1:{codec_port}"
        key = (data_dir / "encryption.keys").read_text()
        sealed = AesGcmCodec(parse_keys(key)).encrypt(PLAIN)
        async with httpx.AsyncClient() as http:
            preflight = await http.options(
                f"{codec}/decode",
                headers={
                    "Origin": f"http://127.0.0.1:{ui_port}",
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "content-type,x-namespace",
                },
            )
            opened = await http.post(f"{codec}/decode", json=as_json(sealed))
            from_ui = await http.post(
                f"{codec}/decode",
                json=as_json(sealed),
                headers={"Origin": f"http://localhost:{ui_port}"},
            )
            ui_settings = await http.get(f"http://127.0.0.1:{ui_port}/api/v1/settings")
        answers = {
            "codec": codec,
            "preflight": preflight.status_code,
            "decoded": from_json(opened.json()) if opened.status_code == 200 else opened.text,
            "from_ui": from_json(from_ui.json()) if from_ui.status_code == 200 else from_ui.text,
            "ui": ui_settings.json(),
        }
        address = f"127.0.0.1:{port}"
        decoding = ("--codec-endpoint", codec)
        if earlier is not None:
            answers["earlier"] = readable(await temporal_show(address, earlier, *decoding))
        if task is not None:
            ran = await run_cli(dev_env(data_dir, port), "run", task, "--json")
            assert ran.code == 0, ran.stderr
            task_id = answers["task_id"] = ran.json()["task_id"]
            answers["history"] = readable(await temporal_show(address, task_id))
            answers["history_decoded"] = readable(await temporal_show(address, task_id, *decoding))
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 60)
    return printed, answers


async def test_dev_encrypt_keeps_its_key_in_the_data_dir_and_runs_the_codec_for_its_ui(
    tmp_path: Path,
) -> None:
    task = f"Say hello. canary-{uuid.uuid4().hex[:10]}"
    printed, answers = await run_dev(tmp_path, task)
    key_file = tmp_path / "encryption.keys"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text()
    assert "made an encryption key" in printed and answers["codec"] in printed
    assert key.split("=", 1)[1].strip() not in printed
    assert answers["preflight"] == 200
    assert answers["decoded"] == [PLAIN]
    assert answers["ui"]["Codec"]["Endpoint"] == answers["codec"]
    assert ENCRYPTED_ENCODING in answers["history"] and task not in answers["history"]
    assert task in answers["history_decoded"], "the dev worker and CLI encrypt with the key"

    again, answers = await run_dev(tmp_path, earlier=answers["task_id"])
    assert key_file.read_text() == key, "the second start reuses the key"
    assert "made an encryption key" not in again
    assert task in answers["earlier"], "the first run's task is readable in the second"


async def test_dev_encrypt_decodes_for_its_own_ui_when_another_temporal_is_configured(
    tmp_path: Path,
) -> None:
    elsewhere = {"TEMPORAL_ADDRESS": "temporal.example.com:7233"}
    printed, answers = await run_dev(tmp_path, also=elsewhere)
    assert "codec at" in printed
    assert answers["preflight"] == 200, "the embedded UI's page may ask"
    assert answers["from_ui"] == [PLAIN], "and a call from it, named localhost, is decoded"


async def test_dev_encrypt_on_a_taken_codec_port_says_which_flag_chooses_another(
    tmp_path: Path,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        codec_port = taken.getsockname()[1]
        ran = await run_cli(
            dev_env(tmp_path, free_port()),
            "dev",
            "--encrypt",
            "--ui-port",
            str(free_port()),
            "--codec-port",
            str(codec_port),
        )
    assert ran.code == 2
    assert ran.stderr.count("\n") <= 2 and f"port {codec_port}" in ran.stderr
    assert "--codec-port" in ran.stderr
