"""Connecting to a secured Temporal (SPEC §9): the connection comes from flags, then the
``TEMPORAL_*`` variables, then a ``temporal.toml`` profile, then the embedded dev server; bad
material fails at start in one line naming what to fix; and, through a real TLS endpoint that
requires a client certificate and an API key (nginx in front of the test dev server), a task runs
end to end through the worker, the CLI, the gateway and ``errands.Client`` — once with only
``TEMPORAL_*`` variables, once with only a profile — while each missing or wrong piece is refused
with exit 2, one line, within 10 seconds."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import errands
from errands.adapters.connection import check_unconfigured, resolve, tls_config
from errands.adapters.devserver import DevServer, free_port
from errands.adapters.scripted import ScriptedModelServer
from errands.errors import ConfigError
from errands.settings import load_settings
from tests.conftest import OPENAI_KEY, read_stderr_until, run_cli, running_cli
from tests.helpers import eventually, final
from tests.test_cli_usage import a_clean_refusal
from tests.tls_front import NGINX_MISSING, Front, make_material, nginx_path, tls_front

REFUSAL_BOUND = 10.0
"""The issue's bound: each refusal answers within 10 seconds, never a hang."""


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ``TEMPORAL_*`` variable of the caller's, and a configuration directory without a
    temporal.toml, so only what a test sets counts."""
    for name in list(os.environ):
        if name.startswith("TEMPORAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def write_profile(directory: Path, name: str, **entries: object) -> Path:
    """A temporal.toml with one profile; ``tls`` entries go in its ``tls`` table."""
    tls = entries.pop("tls", {})
    assert isinstance(tls, dict)
    lines = [f"[profile.{name}]", *(f"{k} = {_toml(v)}" for k, v in entries.items())]
    if tls:
        lines += [f"[profile.{name}.tls]", *(f"{k} = {_toml(v)}" for k, v in tls.items())]
    path = directory / "temporal.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _toml(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else f'"{value}"'


# -- precedence: flag > variable > profile > the embedded dev server ------------------------


@pytest.mark.fast
def test_nothing_set_means_the_embedded_dev_server(clean_env: Path) -> None:
    connection = resolve(load_settings())
    assert not connection.configured
    assert connection.source("address") == "default"
    assert connection.namespace == "default" and connection.tls is False


@pytest.mark.fast
def test_a_profile_gives_the_connection_and_its_namespace_beats_the_default(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = write_profile(clean_env, "prod", address="prod.example:7233", namespace="errands-prod")
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(file))
    monkeypatch.setenv("TEMPORAL_PROFILE", "prod")
    connection = resolve(load_settings())
    assert connection.configured and connection.address == "prod.example:7233"
    assert connection.namespace == "errands-prod", "the profile's, not the settings' default"
    assert connection.source("address") == f"profile prod in {file}"
    assert load_settings().temporal_ui() is None, "a profile's server is not the embedded UI"


@pytest.mark.fast
def test_a_variable_beats_the_profile_and_a_flag_beats_the_variable(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = write_profile(clean_env, "default", address="profile:7233", namespace="from-profile")
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(file))
    monkeypatch.setenv("TEMPORAL_ADDRESS", "variable:7233")
    monkeypatch.setenv("TEMPORAL_NAMESPACE", "from-variable")
    by_variable = resolve(load_settings())
    assert (by_variable.address, by_variable.namespace) == ("variable:7233", "from-variable")
    assert by_variable.source("address") == "TEMPORAL_ADDRESS"
    by_flag = resolve(load_settings(TEMPORAL_ADDRESS="flag:7233"))
    assert by_flag.address == "flag:7233" and by_flag.source("address") == "flag --address"
    assert by_flag.namespace == "from-variable"
    by_override = resolve(load_settings(), namespace="override")
    assert by_override.namespace == "override"
    assert by_override.source("namespace") == "flag --namespace"


@pytest.mark.fast
def test_an_api_key_turns_tls_on_and_is_shown_masked(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "tcld-" + "k3y" * 8
    monkeypatch.setenv("TEMPORAL_ADDRESS", "ns.a1b2c.tmprl.cloud:7233")
    monkeypatch.setenv("TEMPORAL_API_KEY", key)
    connection = resolve(load_settings())
    assert connection.tls is True
    assert connection.source("tls") == "implied by TEMPORAL_API_KEY"
    report = connection.report()
    assert key not in str(report) and report["api_key"]["value"] == f"****{key[-4:]}"
    monkeypatch.setenv("TEMPORAL_TLS", "false")
    assert resolve(load_settings()).tls is False, "TEMPORAL_TLS=false is obeyed"


# -- bad material: one line naming what to fix, before any connection -----------------------


def refused(**variables: str) -> str:
    """The one-line ConfigError the connection's material gets with ``variables`` set."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in variables.items():
            patch.setenv(name, value)
        with pytest.raises(ConfigError) as raised:
            connection = resolve(load_settings())
            check_unconfigured(connection)
            tls_config(connection)
    message = raised.value.message
    assert "\n" not in message
    return message


@pytest.mark.fast
def test_bad_material_is_refused_naming_what_to_fix(clean_env: Path) -> None:
    m = make_material(clean_env / "pki")
    at = {"TEMPORAL_ADDRESS": "127.0.0.1:7233"}
    cert, key = str(m.client_cert), str(m.client_key)
    missing = str(clean_env / "nowhere.pem")
    cases = {
        "TEMPORAL_CONFIG_FILE": (
            {"TEMPORAL_CONFIG_FILE": missing},
            "TEMPORAL_CONFIG_FILE=" + missing + ": no such file",
        ),
        "cert, no key": (
            {**at, "TEMPORAL_TLS_CLIENT_CERT_PATH": cert},
            "TEMPORAL_TLS_CLIENT_CERT_PATH is set but TEMPORAL_TLS_CLIENT_KEY_PATH is not",
        ),
        "key, no cert": (
            {**at, "TEMPORAL_TLS_CLIENT_KEY_PATH": key},
            "TEMPORAL_TLS_CLIENT_KEY_PATH is set but TEMPORAL_TLS_CLIENT_CERT_PATH is not",
        ),
        "missing cert file": (
            {**at, "TEMPORAL_TLS_CLIENT_CERT_PATH": missing, "TEMPORAL_TLS_CLIENT_KEY_PATH": key},
            f"TEMPORAL_TLS_CLIENT_CERT_PATH={missing}: no such file",
        ),
        "a key as the certificate": (
            {**at, "TEMPORAL_TLS_CLIENT_CERT_PATH": key, "TEMPORAL_TLS_CLIENT_KEY_PATH": key},
            "is not a PEM certificate (it holds a private key)",
        ),
        "a CA that is no certificate": (
            {**at, "TEMPORAL_TLS_SERVER_CA_CERT_PATH": key},
            f"TEMPORAL_TLS_SERVER_CA_CERT_PATH={key} is not a PEM certificate",
        ),
        "expired": (
            {
                **at,
                "TEMPORAL_TLS_CLIENT_CERT_PATH": str(m.expired_cert),
                "TEMPORAL_TLS_CLIENT_KEY_PATH": key,
            },
            "the client certificate expired on",
        ),
        "not yet valid": (
            {
                **at,
                "TEMPORAL_TLS_CLIENT_CERT_PATH": str(m.future_cert),
                "TEMPORAL_TLS_CLIENT_KEY_PATH": key,
            },
            "the client certificate is not valid before",
        ),
        "a key of another certificate": (
            {
                **at,
                "TEMPORAL_TLS_CLIENT_CERT_PATH": str(m.server_cert),
                "TEMPORAL_TLS_CLIENT_KEY_PATH": key,
            },
            "is not the key of the client certificate",
        ),
        "a key with no server": (
            {"TEMPORAL_API_KEY": "k" * 20},
            "TEMPORAL_API_KEY is set but no Temporal address is",
        ),
    }
    for case, (variables, expected) in cases.items():
        assert expected in refused(**variables), case


@pytest.mark.fast
def test_a_profile_that_is_not_in_the_file_is_refused_naming_the_ones_it_has(
    clean_env: Path,
) -> None:
    file = write_profile(clean_env, "staging", address="staging:7233")
    message = refused(TEMPORAL_CONFIG_FILE=str(file), TEMPORAL_PROFILE="prod")
    assert message.startswith(f"TEMPORAL_PROFILE=prod: no such profile in {file}")
    assert "(it has staging)" in message


@pytest.mark.fast
def test_bad_material_in_a_profile_names_the_profile_key(clean_env: Path) -> None:
    m = make_material(clean_env / "pki")
    file = write_profile(
        clean_env,
        "prod",
        address="prod:7233",
        tls={"client_cert_path": str(m.expired_cert), "client_key_path": str(m.client_key)},
    )
    message = refused(TEMPORAL_CONFIG_FILE=str(file), TEMPORAL_PROFILE="prod")
    assert message.startswith(f"tls.client_cert_path of profile prod in {file}=")
    assert "expired" in message


# -- a real secured endpoint --------------------------------------------------------------


@pytest.fixture(scope="module")
def front(dev_server: DevServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    if nginx_path() is None:
        pytest.skip(NGINX_MISSING)
    directory = tmp_path_factory.mktemp("secured")
    with tls_front(dev_server.address, directory / "nginx", make_material(directory)) as f:
        yield f


def by_variables(front: Front) -> dict[str, str]:
    m = front.material
    return {
        "TEMPORAL_ADDRESS": front.address,
        "TEMPORAL_API_KEY": front.api_key,
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(m.ca),
        "TEMPORAL_TLS_CLIENT_CERT_PATH": str(m.client_cert),
        "TEMPORAL_TLS_CLIENT_KEY_PATH": str(m.client_key),
    }


def by_profile(front: Front, directory: Path) -> dict[str, str]:
    m = front.material
    file = write_profile(
        directory,
        "secured",
        address=front.address,
        api_key=front.api_key,
        tls={
            "server_ca_cert_path": str(m.ca),
            "client_cert_path": str(m.client_cert),
            "client_key_path": str(m.client_key),
        },
    )
    return {"TEMPORAL_CONFIG_FILE": str(file), "TEMPORAL_PROFILE": "secured"}


@pytest.fixture
def secured_env(
    cli_env: dict[str, str], model_server: ScriptedModelServer, tmp_path: Path
) -> dict[str, str]:
    """What every process here shares: its own task queue (so only a worker reaching Temporal
    through the secured front serves it), the scripted model, and no plain TEMPORAL_ADDRESS."""
    env = {k: v for k, v in cli_env.items() if not k.startswith("TEMPORAL_")}
    env.update(
        ERRANDS_TASK_QUEUE=f"errands-secured-{uuid.uuid4().hex[:8]}",
        OPENAI_API_KEY=OPENAI_KEY,
        OPENAI_BASE_URL=model_server.openai_base_url,
        ERRANDS_MODEL="openai:gpt-secured",
        HOME=str(tmp_path),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
    )
    return env


@pytest.mark.parametrize("given", ["variables", "profile"])
async def test_a_task_runs_through_every_frontend_on_a_secured_cluster(
    given: str,
    front: Front,
    secured_env: dict[str, str],
    scripted: ScriptedModelServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    connection = by_variables(front) if given == "variables" else by_profile(front, tmp_path)
    env = {**secured_env, **connection}
    scripted.script(
        "gpt-secured", final("via the CLI"), final("via the gateway"), final("via the client")
    )
    async with running_cli(env, "worker") as worker:
        await read_stderr_until(worker, "worker polling")
        ran = await run_cli(env, "run", "go", "--json", "--headless")
        assert ran.code == 0, ran.stderr
        assert ran.json()["reply"] == "via the CLI"

        port = free_port()
        async with running_cli(env, "serve", "--port", str(port)) as gateway:
            await read_stderr_until(gateway, f"errands gateway on http://127.0.0.1:{port}")
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                made = await http.post("/v1/sessions/s-secured/tasks", json={"text": "go"})
                assert made.status_code == 201, made.text
                task_id = made.json()["task_id"]
                state = await _ended(http, task_id)
                assert state["reply"] == "via the gateway"
            gateway.send_signal(signal.SIGTERM)
            await asyncio.wait_for(gateway.wait(), 30)

        for name, value in env.items():
            monkeypatch.setenv(name, value)
        async with await errands.Client.connect() as client:
            result = await client.run("go", headless=True)
        assert result.reply == "via the client"
        worker.send_signal(signal.SIGTERM)
        await asyncio.wait_for(worker.wait(), 60)


async def _ended(http: httpx.AsyncClient, task_id: str) -> dict[str, object]:
    async def done() -> dict[str, object] | None:
        state = (await http.get(f"/v1/tasks/{task_id}")).json()
        return state if state.get("status") not in ("running", None) else None

    return await eventually(done, f"task {task_id} to end")


REFUSALS = {
    "no API key": ({"TEMPORAL_API_KEY": None}, "set TEMPORAL_API_KEY"),
    "a wrong CA": (
        {"TEMPORAL_TLS_SERVER_CA_CERT_PATH": "other_ca"},
        "is not signed by the CA in TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    ),
    "no client certificate": (
        {"TEMPORAL_TLS_CLIENT_CERT_PATH": None, "TEMPORAL_TLS_CLIENT_KEY_PATH": None},
        "it requires a client certificate; set TEMPORAL_TLS_CLIENT_CERT_PATH",
    ),
    "an expired client certificate": (
        {"TEMPORAL_TLS_CLIENT_CERT_PATH": "expired_cert"},
        "the client certificate expired on",
    ),
    "a missing certificate file": (
        {"TEMPORAL_TLS_CLIENT_CERT_PATH": "/nonexistent/client.pem"},
        "TEMPORAL_TLS_CLIENT_CERT_PATH=/nonexistent/client.pem: no such file",
    ),
    "a wrong API key": ({"TEMPORAL_API_KEY": "wrong-key-" + "x" * 12}, "refused the API key"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
async def test_each_missing_or_wrong_piece_is_one_line_exit_2_within_10_seconds(
    case: str, front: Front, secured_env: dict[str, str]
) -> None:
    changes, expected = REFUSALS[case]
    env = {**secured_env, **by_variables(front)}
    for name, value in changes.items():
        if value is None:
            env.pop(name)
        else:
            material = getattr(front.material, value, None)
            env[name] = str(material) if material is not None else value
    started = time.monotonic()
    result = await run_cli(env, "status", "task-x")
    took = time.monotonic() - started
    assert result.code == 2, result.stderr
    line = a_clean_refusal(result.stderr)
    assert expected in line, line
    assert took < REFUSAL_BOUND, f"{case}: answered after {took:.1f} s"


async def test_config_shows_the_secured_connection_with_the_key_masked(
    front: Front, secured_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**secured_env, **by_profile(front, tmp_path), "TEMPORAL_NAMESPACE": "default"}
    shown = await run_cli(env, "config", "--json", "--address", front.address)
    assert shown.code == 0, shown.stderr
    connection = shown.json()["connection"]
    where = f"profile secured in {env['TEMPORAL_CONFIG_FILE']}"
    assert connection["address"] == {
        "value": front.address,
        "source": "flag --address",
        "variable": "TEMPORAL_ADDRESS",
    }
    assert connection["namespace"]["source"] == "TEMPORAL_NAMESPACE"
    assert connection["client_cert"]["source"] == where
    assert connection["tls"]["value"] is True
    assert front.api_key not in shown.stdout
    assert connection["api_key"]["value"] == f"****{front.api_key[-4:]}"
    text = await run_cli(env, "config")
    assert "Temporal connection:" in text.stdout and front.api_key not in text.stdout
