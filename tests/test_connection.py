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
from errands.adapters.connection import Connection, check_unconfigured, resolve, tls_config
from errands.adapters.devserver import DevServer, free_port
from errands.adapters.scripted import ScriptedModelServer
from errands.errors import ConfigError
from errands.settings import load_settings
from tests.conftest import OPENAI_KEY, ROOT, read_stderr_until, run_cli, running_cli
from tests.helpers import eventually, final
from tests.test_cli_usage import a_clean_refusal
from tests.tls_front import NGINX_MISSING, Front, make_material, nginx_path, tls_front

REFUSAL_BOUND = 10.0
"""The issue's bound: each refusal answers within 10 seconds, never a hang."""


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
def test_nothing_set_means_the_embedded_dev_server() -> None:
    connection = resolve(load_settings())
    assert not connection.configured
    assert connection.source("address") == "default"
    assert connection.namespace == "default" and connection.tls is False


@pytest.mark.fast
def test_a_profile_gives_the_connection_and_its_namespace_beats_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = write_profile(tmp_path, "prod", address="prod.example:7233", namespace="errands-prod")
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(file))
    monkeypatch.setenv("TEMPORAL_PROFILE", "prod")
    connection = resolve(load_settings())
    assert connection.configured and connection.address == "prod.example:7233"
    assert connection.namespace == "errands-prod", "the profile's, not the settings' default"
    assert connection.source("address") == f"profile prod in {file}"
    assert load_settings().temporal_ui() is None, "a profile's server is not the embedded UI"


@pytest.mark.fast
def test_a_variable_beats_the_profile_and_a_flag_beats_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = write_profile(tmp_path, "default", address="profile:7233", namespace="from-profile")
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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
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
def test_bad_material_is_refused_naming_what_to_fix(tmp_path: Path) -> None:
    m = make_material(tmp_path / "pki")
    at = {"TEMPORAL_ADDRESS": "127.0.0.1:7233"}
    cert, key = str(m.client_cert), str(m.client_key)
    missing = str(tmp_path / "nowhere.pem")
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
    tmp_path: Path,
) -> None:
    file = write_profile(tmp_path, "staging", address="staging:7233")
    message = refused(TEMPORAL_CONFIG_FILE=str(file), TEMPORAL_PROFILE="prod")
    assert message.startswith(f"TEMPORAL_PROFILE=prod: no such profile in {file}")
    assert "(it has staging)" in message


@pytest.mark.fast
def test_bad_material_in_a_profile_names_the_profile_key(tmp_path: Path) -> None:
    m = make_material(tmp_path / "pki")
    file = write_profile(
        tmp_path,
        "prod",
        address="prod:7233",
        tls={"client_cert_path": str(m.expired_cert), "client_key_path": str(m.client_key)},
    )
    message = refused(TEMPORAL_CONFIG_FILE=str(file), TEMPORAL_PROFILE="prod")
    assert message.startswith(f"tls.client_cert_path of profile prod in {file}=")
    assert "expired" in message


# -- secrets stay out of messages; an API key never crosses the network in the clear -------

SECRET = "supersecretkey123456"


@pytest.mark.fast
def test_a_profile_that_does_not_parse_is_refused_without_quoting_the_file(
    tmp_path: Path,
) -> None:
    broken = {
        "an unquoted key": (
            f'[profile.default]\naddress = "prod:7233"\napi_key = {SECRET}\n',
            "TOML parse error at line 3, column 11: string values must be quoted",
        ),
        "an unquoted inline private key": (
            '[profile.default]\naddress = "prod:7233"\n[profile.default.tls]\n'
            f"client_key_data = -----BEGIN PRIVATE KEY-----\n{SECRET}\n-----END PRIVATE KEY-----\n",
            "TOML parse error at line 5, column 21",
        ),
        "a key given as a number": (
            '[profile.default]\naddress = "prod:7233"\napi_key = 1234567890123456\n',
            "TOML parse error at line 3, column 11: invalid type: integer, expected a string",
        ),
    }
    for case, (text, expected) in broken.items():
        file = tmp_path / "temporal.toml"
        file.write_text(text)
        message = refused(TEMPORAL_CONFIG_FILE=str(file))
        assert message.startswith(f"cannot read the Temporal profile in {file}: "), case
        assert expected in message, (case, message)
        assert SECRET not in message and "1234567890123456" not in message, (case, message)


@pytest.mark.fast
def test_a_connection_never_shows_its_key_in_its_repr() -> None:
    connection = Connection(
        address="prod:7233",
        namespace="default",
        api_key=SECRET,
        tls=True,
        client_key=f"-----BEGIN PRIVATE KEY-----\n{SECRET}\n-----END PRIVATE KEY-----",
        rpc_metadata={"authorization": f"Bearer {SECRET}"},
    )
    assert SECRET not in repr(connection) and SECRET not in str(connection)
    assert "prod:7233" in repr(connection)


@pytest.mark.fast
def test_an_api_key_over_plain_grpc_is_refused_unless_the_server_is_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = {"TEMPORAL_API_KEY": SECRET, "TEMPORAL_TLS": "false"}
    message = refused(TEMPORAL_ADDRESS="temporal.example:7233", **plain)
    assert message.startswith("TLS is off (TEMPORAL_TLS=false) but TEMPORAL_API_KEY sets an API")
    assert "temporal.example:7233 unencrypted" in message and SECRET not in message

    file = write_profile(
        tmp_path, "prod", address="temporal.example:7233", api_key=SECRET, tls={"disabled": True}
    )
    message = refused(TEMPORAL_CONFIG_FILE=str(file), TEMPORAL_PROFILE="prod")
    where = f"profile prod in {file}"
    assert message.startswith(f"TLS is off (tls.disabled of {where}) but api_key of {where}")

    for name, value in plain.items():
        monkeypatch.setenv(name, value)
    for here in ("127.0.0.1:7233", "127.8.9.10:7233", "localhost:7233", "[::1]:7233"):
        monkeypatch.setenv("TEMPORAL_ADDRESS", here)
        assert tls_config(resolve(load_settings())) is False, here


@pytest.mark.fast
def test_grpc_metadata_and_inline_pem_variables_reach_the_connect_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = make_material(tmp_path / "pki")
    ca = m.ca.read_bytes()
    monkeypatch.setenv("TEMPORAL_ADDRESS", "variable:7233")
    monkeypatch.setenv("TEMPORAL_GRPC_META_X_TENANT", "acme")
    monkeypatch.setenv("TEMPORAL_TLS_SERVER_CA_CERT_DATA", ca.decode())
    connection = resolve(load_settings(TEMPORAL_ADDRESS="flag:7233"))
    assert connection.rpc_metadata == {"x-tenant": "acme"}
    assert connection.address == "flag:7233", "a flag still beats the process's variable"
    assert connection.tls and connection.source("tls") == (
        "implied by TEMPORAL_TLS_SERVER_CA_CERT_DATA"
    )
    assert connection.report()["server_ca_cert"] == {
        "value": "inline PEM",
        "source": "TEMPORAL_TLS_SERVER_CA_CERT_DATA",
        "variable": "TEMPORAL_TLS_SERVER_CA_CERT_DATA",
    }
    tls = tls_config(connection)
    assert not isinstance(tls, bool) and tls.server_root_ca_cert == ca


@pytest.mark.fast
def test_inline_pem_variables_are_checked_like_files_and_a_key_is_never_shown(
    tmp_path: Path,
) -> None:
    m = make_material(tmp_path / "pki")
    at = {"TEMPORAL_ADDRESS": "127.0.0.1:7233"}
    key_pem = m.client_key.read_text()
    not_a_key = f"-----BEGIN PRIVATE KEY-----\n{SECRET}\n-----END PRIVATE KEY-----\n"
    message = refused(**at, TEMPORAL_TLS_SERVER_CA_CERT_DATA="not a certificate")
    assert message.startswith("TEMPORAL_TLS_SERVER_CA_CERT_DATA (inline PEM) is not a PEM cert")
    message = refused(
        **at, TEMPORAL_TLS_CLIENT_CERT_DATA=key_pem, TEMPORAL_TLS_CLIENT_KEY_DATA=key_pem
    )
    assert message.startswith("TEMPORAL_TLS_CLIENT_CERT_DATA (inline PEM) is not a PEM cert")
    assert "(it holds a private key)" in message and key_pem.strip() not in message
    message = refused(
        **at,
        TEMPORAL_TLS_CLIENT_CERT_DATA=m.client_cert.read_text(),
        TEMPORAL_TLS_CLIENT_KEY_DATA=not_a_key,
    )
    assert message.startswith("TEMPORAL_TLS_CLIENT_KEY_DATA (inline PEM) is not a PEM private")
    assert SECRET not in message
    both = refused(
        **at,
        TEMPORAL_TLS_SERVER_CA_CERT_PATH=str(m.ca),
        TEMPORAL_TLS_SERVER_CA_CERT_DATA=m.ca.read_text(),
    )
    assert "Cannot specify both TEMPORAL_TLS_SERVER_CA_CERT_PATH and" in both


# -- Temporal's default temporal.toml: read, and said so ----------------------------------


def bare_env(tmp_path: Path, **variables: str) -> dict[str, str]:
    """An ``errands`` process's environment with no Temporal or errands setting of the caller's,
    its configuration directory in ``tmp_path``, and a dev port nothing listens on."""
    inherited = ("TEMPORAL_", "ERRANDS_", "OPENAI_", "ANTHROPIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(inherited)}
    env.update(
        PYTHONPATH=str(ROOT),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        ERRANDS_DATA_DIR=str(tmp_path / "data"),
        ERRANDS_DEV_PORT=str(free_port()),
        **variables,
    )
    return env


@pytest.mark.fast
async def test_a_default_profile_nobody_named_is_announced_with_the_way_out(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "config" / "temporalio"
    directory.mkdir(parents=True)
    address = f"127.0.0.1:{free_port()}"  # nothing listens: the command ends at once
    file = write_profile(directory, "default", address=address)

    result = await run_cli(bare_env(tmp_path), "status", "task-x")
    assert result.code == 2, result.stderr
    note = f"errands: using Temporal at {address} from profile default in {file}"
    assert note in result.stderr, result.stderr
    assert "TEMPORAL_CONFIG_FILE=/dev/null for the embedded stack" in result.stderr
    assert result.stderr.index(note) < result.stderr.index("cannot connect to Temporal at")

    named = await run_cli(bare_env(tmp_path, TEMPORAL_PROFILE="default"), "status", "task-x")
    assert named.code == 2 and "using Temporal at" not in named.stderr, named.stderr

    opted_out = bare_env(tmp_path, TEMPORAL_CONFIG_FILE=os.devnull)
    embedded = await run_cli(opted_out, "status", "task-x")
    assert embedded.code == 2 and "using Temporal at" not in embedded.stderr
    assert "no Temporal server is configured or running" in embedded.stderr, embedded.stderr


@pytest.mark.fast
async def test_config_shows_the_settings_and_the_error_of_a_profile_it_cannot_read(
    tmp_path: Path,
) -> None:
    file = tmp_path / "temporal.toml"
    file.write_text(f'[profile.default]\naddress = "prod:7233"\napi_key = {SECRET}\n')
    env = bare_env(tmp_path, TEMPORAL_CONFIG_FILE=str(file))
    shown = await run_cli(env, "config", "--json")
    assert shown.code == 2, shown.stderr
    report = shown.json()
    assert report["TEMPORAL_CONFIG_FILE"]["value"] == str(file), "the settings are shown"
    error = report["connection"]["error"]
    assert error.startswith(f"cannot read the Temporal profile in {file}: TOML parse error")
    assert f"errands: {error}" in shown.stderr
    text = await run_cli(env, "config")
    assert text.code == 2
    assert f"Temporal connection:\n  error: {error}" in text.stdout
    for output in (shown.stdout, shown.stderr, text.stdout, text.stderr):
        assert SECRET not in output


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
def secured_env(cli_env: dict[str, str], model_server: ScriptedModelServer) -> dict[str, str]:
    """What every process here shares: its own task queue (so only a worker reaching Temporal
    through the secured front serves it), the scripted model, and no plain TEMPORAL_ADDRESS."""
    env = {k: v for k, v in cli_env.items() if not k.startswith("TEMPORAL_")}
    env.update(
        ERRANDS_TASK_QUEUE=f"errands-secured-{uuid.uuid4().hex[:8]}",
        OPENAI_API_KEY=OPENAI_KEY,
        OPENAI_BASE_URL=model_server.openai_base_url,
        ERRANDS_MODEL="openai:gpt-secured",
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
