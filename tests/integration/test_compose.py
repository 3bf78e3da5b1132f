"""docker-compose.yml, the Dockerfile and the Grafana provisioning, checked without any service.

There is no Docker engine here, so the compose file is validated against the Compose
Specification's JSON schema (tests/data/compose-spec.json) and cross-checked against the code it
deploys: the aiops service's AIOPS_* variables must parse into vocab.settings.Settings and point at
the kafka and influxdb services, the host ports must be the settings' defaults, every bind mount
must exist, and the Grafana data source and dashboards must agree with each other and with the
settings. Running the dashboards' queries is tests/integration/test_dashboards.py.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import os
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from jsonschema import Draft7Validator
from packaging.specifiers import SpecifierSet

from aiops.cli.commands import build_parser
from aiops.cli.telemetry import cmd_ingest
from vocab.catalog import MEASUREMENTS
from vocab.settings import InfluxSettings, KafkaSettings, Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
COMPOSE_SCHEMA = ROOT / "tests" / "data" / "compose-spec.json"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PYPROJECT = ROOT / "pyproject.toml"
DATASOURCES_FILE = ROOT / "dashboards" / "provisioning" / "datasources" / "influxdb.yaml"
PROVIDERS_FILE = ROOT / "dashboards" / "provisioning" / "dashboards" / "aiops.yaml"
DASHBOARD_DIR = ROOT / "dashboards" / "json"
DASHBOARD_FILES = sorted(DASHBOARD_DIR.glob("*.json"))

# Grafana's default provisioning directory (paths.provisioning), unless GF_PATHS_PROVISIONING moves it.
GRAFANA_PROVISIONING = "/etc/grafana/provisioning"


# ---------------------------------------------------------------- helpers


def _load_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path} is not a YAML mapping"
    return data


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return _load_yaml(COMPOSE_FILE)


def _service(compose: dict[str, Any], name: str) -> dict[str, Any]:
    services: dict[str, Any] = compose["services"]
    assert name in services, f"docker-compose.yml has no service {name!r} (has {sorted(services)})"
    service: dict[str, Any] = services[name]
    return service


def _environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as strings, from either the mapping or the list form."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def _ports(service: dict[str, Any]) -> list[tuple[int, int]]:
    """(published host port, container port) for each published port (short and long syntax)."""
    out: list[tuple[int, int]] = []
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            target = int(entry["target"])
            out.append((int(entry.get("published") or target), target))
            continue
        spec = str(entry).split("/", 1)[0]  # drop "/tcp"
        parts = spec.rsplit(":", 2)
        if len(parts) == 1:
            out.append((int(parts[0]), int(parts[0])))
        else:  # [ip:]host:container
            out.append((int(parts[-2]), int(parts[-1])))
    return out


def _bind_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(host source, container target) of each bind mount; named volumes are left out."""
    out: list[tuple[str, str]] = []
    for entry in service.get("volumes", []):
        if isinstance(entry, dict):
            if entry["type"] == "bind":
                out.append((entry["source"], entry["target"]))
            continue
        source, target = str(entry).split(":")[:2]
        if source.startswith((".", "/", "~")):
            out.append((source, target))
    return out


def _named_volumes(service: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for entry in service.get("volumes", []):
        if isinstance(entry, dict):
            if entry["type"] == "volume" and entry.get("source"):
                out.append(entry["source"])
            continue
        parts = str(entry).split(":")
        if len(parts) > 1 and not parts[0].startswith((".", "/", "~")):
            out.append(parts[0])
    return out


def _host_port(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


def _listeners(value: str) -> dict[str, tuple[str, int]]:
    """Kafka listeners 'NAME://host:port,...' as {NAME: (host, port)}."""
    out: dict[str, tuple[str, int]] = {}
    for item in value.split(","):
        name, address = item.strip().split("://", 1)
        out[name] = _host_port(address)
    return out


def _datasource() -> dict[str, Any]:
    provisioning = _load_yaml(DATASOURCES_FILE)
    influx = [ds for ds in provisioning["datasources"] if ds["type"] == "influxdb"]
    assert len(influx) == 1, f"expected one InfluxDB data source in {DATASOURCES_FILE}, found {len(influx)}"
    datasource: dict[str, Any] = influx[0]
    return datasource


def _datasource_refs(node: Any, path: str = "$") -> Iterator[tuple[str, Any]]:
    """Every "datasource" value anywhere in a dashboard, with where it is."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield f"{path}.datasource", value
            yield from _datasource_refs(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _datasource_refs(value, f"{path}[{i}]")


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _setting_path_exists(env_name: str) -> bool:
    """Whether AIOPS_A__B names a field of Settings (pydantic-settings silently ignores unknown ones)."""
    parts = env_name.removeprefix("AIOPS_").lower().split("__")
    model: Any = Settings
    for part in parts:
        fields = getattr(model, "model_fields", None)
        if fields is None or part not in fields:
            return False
        model = fields[part].annotation
    return True


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """An environment without AIOPS_* variables, so Settings() sees only what a test sets."""
    for name in list(os.environ):
        if name.startswith("AIOPS_"):
            monkeypatch.delenv(name)
    return monkeypatch


# ---------------------------------------------------------------- the compose file itself


def test_compose_file_is_valid_compose_spec(compose: dict[str, Any]) -> None:
    schema = json.loads(COMPOSE_SCHEMA.read_text(encoding="utf-8"))
    Draft7Validator.check_schema(schema)
    assert "version" not in compose, "the Compose Specification has no top-level version key"
    assert set(compose["services"]) >= {"kafka", "influxdb", "grafana", "aiops"}
    errors = sorted(Draft7Validator(schema).iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)


@pytest.mark.parametrize(
    ("mutation", "expected"),
    [
        (lambda c: c["services"]["aiops"]["depends_on"]["kafka"].update(condition="service_up"), "service_up"),
        (lambda c: c["services"]["kafka"].update(restart_policy="always"), "restart_policy"),
        (lambda c: c["services"]["influxdb"]["healthcheck"].update(test_cmd="true"), "test_cmd"),
        (lambda c: c.update(networks=[]), "[]"),
    ],
    ids=["bad-condition", "unknown-service-key", "unknown-healthcheck-key", "networks-not-a-mapping"],
)
def test_schema_rejects_broken_variants(compose: dict[str, Any], mutation: Any, expected: str) -> None:
    """The schema really constrains the file: broken copies of it do not validate."""
    schema = json.loads(COMPOSE_SCHEMA.read_text(encoding="utf-8"))
    broken = copy.deepcopy(compose)
    mutation(broken)
    messages = [e.message for e in Draft7Validator(schema).iter_errors(broken)]
    assert messages, "a broken compose file validated"
    assert any(expected in m for m in messages), messages


def test_named_volumes_are_declared(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    for name, service in compose["services"].items():
        for volume in _named_volumes(service):
            assert volume in declared, f"service {name} uses volume {volume!r}, not declared at top level"


def test_service_healthy_dependencies_have_healthchecks(compose: dict[str, Any]) -> None:
    aiops = _service(compose, "aiops")
    depends = aiops["depends_on"]
    assert isinstance(depends, dict)
    for dependency in ("kafka", "influxdb"):
        assert depends[dependency]["condition"] == "service_healthy", dependency
    for name, service in compose["services"].items():
        conditions = service.get("depends_on") or {}
        if not isinstance(conditions, dict):  # the list form waits for nothing
            continue
        for dependency, spec in conditions.items():
            if spec.get("condition") == "service_healthy":
                check = _service(compose, dependency).get("healthcheck", {})
                message = f"{name} waits for {dependency} to be healthy, but {dependency} has no healthcheck"
                assert check.get("test"), message
                assert not check.get("disable"), message
    assert aiops["restart"] == "unless-stopped"
    influx_check = " ".join(_service(compose, "influxdb")["healthcheck"]["test"])
    assert "/ping" in influx_check


def test_every_service_serving_the_http_api_has_a_healthcheck_on_it(compose: dict[str, Any]) -> None:
    """aiops-rca serves the API as aiops-run does, and had no healthcheck (issue 65's compose run)."""
    serving = [n for n, s in compose["services"].items() if "AIOPS_HTTP_PORT" in (s.get("environment") or {})]
    assert {"aiops-run", "aiops-rca"} <= set(serving)
    for name in serving:
        service = compose["services"][name]
        port = service["environment"]["AIOPS_HTTP_PORT"]
        test = " ".join((service.get("healthcheck") or {}).get("test") or [])
        assert f"127.0.0.1:{port}/healthz" in test, f"{name} serves the API on {port}; its healthcheck: {test!r}"


# ---------------------------------------------------------------- agreement with vocab.settings


def test_aiops_environment_parses_into_settings(compose: dict[str, Any], clean_env: pytest.MonkeyPatch) -> None:
    env = _environment(_service(compose, "aiops"))
    aiops_vars = {k: v for k, v in env.items() if k.startswith("AIOPS_")}
    assert {"AIOPS_KAFKA__BOOTSTRAP", "AIOPS_INFLUX__URL"} <= set(aiops_vars)
    unknown = [name for name in aiops_vars if not _setting_path_exists(name)]
    assert not unknown, f"AIOPS_* variables that name no setting (pydantic-settings ignores them): {unknown}"
    for name, value in aiops_vars.items():
        clean_env.setenv(name, value)

    settings = Settings()

    kafka_host, kafka_port = _host_port(settings.kafka.bootstrap)
    assert (kafka_host, kafka_port) == _host_port(aiops_vars["AIOPS_KAFKA__BOOTSTRAP"])
    assert kafka_host == "kafka", "the daemon must reach Kafka by its compose service name"
    kafka_env = _environment(_service(compose, "kafka"))
    advertised = _listeners(kafka_env["KAFKA_ADVERTISED_LISTENERS"])
    assert (kafka_host, kafka_port) in advertised.values(), (
        f"{settings.kafka.bootstrap} is not an advertised Kafka listener: {advertised}"
    )

    influx_url = urlparse(settings.influx.url)
    assert influx_url.scheme == "http"
    assert influx_url.hostname == "influxdb", "the daemon must reach InfluxDB by its compose service name"
    influx_container_ports = {target for _, target in _ports(_service(compose, "influxdb"))}
    assert influx_url.port in influx_container_ports, (influx_url.port, influx_container_ports)
    assert settings.influx.database == _environment(_service(compose, "influxdb"))["INFLUXDB_DB"]

    run_env = _environment(_service(compose, "aiops-run"))
    api = Settings(http_port=run_env["AIOPS_HTTP_PORT"], http_host=run_env["AIOPS_HTTP_HOST"])  # type: ignore[arg-type]
    run_ports = {target for _, target in _ports(_service(compose, "aiops-run"))}
    assert api.http_port in run_ports, "the API listens on the port compose publishes"
    assert api.http_host == "0.0.0.0", "inside its container the API must listen beyond loopback"


def test_host_ports_are_the_settings_defaults(compose: dict[str, Any], clean_env: pytest.MonkeyPatch) -> None:
    """From the host, the defaults in vocab/settings.py reach the compose stack."""
    defaults = Settings()
    assert defaults.kafka == KafkaSettings()

    _, kafka_port = _host_port(defaults.kafka.bootstrap)
    kafka_ports = dict(_ports(_service(compose, "kafka")))
    assert kafka_port in kafka_ports, f"kafka publishes {kafka_ports}, not the default port {kafka_port}"
    # The listener behind the published port must advertise an address the host can use.
    kafka_env = _environment(_service(compose, "kafka"))
    listeners = _listeners(kafka_env["KAFKA_LISTENERS"])
    advertised = _listeners(kafka_env["KAFKA_ADVERTISED_LISTENERS"])
    [host_listener] = [name for name, (_, port) in listeners.items() if port == kafka_ports[kafka_port]]
    assert advertised[host_listener] in {("127.0.0.1", kafka_port), ("localhost", kafka_port)}, advertised

    influx_url = urlparse(defaults.influx.url)
    influx_ports = dict(_ports(_service(compose, "influxdb")))
    assert influx_ports.get(influx_url.port or 8086) == 8086, influx_ports


def test_kafka_is_a_consistent_single_node_kraft_broker(compose: dict[str, Any]) -> None:
    env = _environment(_service(compose, "kafka"))
    assert _service(compose, "kafka")["image"] == "apache/kafka:4.1.1"
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["CLUSTER_ID"], "the apache/kafka image needs CLUSTER_ID in KRaft mode"
    listeners = _listeners(env["KAFKA_LISTENERS"])
    advertised = _listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    protocols = dict(item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert set(listeners) <= set(protocols), (listeners, protocols)
    assert controller in listeners
    assert controller not in advertised
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in advertised
    for name in advertised:
        assert name in listeners, f"advertised listener {name} is not a listener"
    voter_id, voter_address = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split("@")
    assert voter_id == env["KAFKA_NODE_ID"]
    assert _host_port(voter_address) == ("kafka", listeners[controller][1])
    for name, value in env.items():
        if name.endswith(("_REPLICATION_FACTOR", "_MIN_ISR")):
            assert value == "1", f"{name}={value} on a single broker"
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"


# ---------------------------------------------------------------- Grafana provisioning


def test_grafana_mounts_exist_and_match_provisioning(compose: dict[str, Any]) -> None:
    grafana = _service(compose, "grafana")
    mounts = _bind_mounts(grafana)
    assert mounts, "grafana mounts nothing from the repository"
    for source, target in mounts:
        host_path = (COMPOSE_FILE.parent / source).resolve()
        assert host_path.exists(), f"grafana mounts {source} at {target}, but {host_path} does not exist"
    by_source = {str(PurePosixPath(source)): target for source, target in mounts}
    env = _environment(grafana)
    assert by_source["dashboards/provisioning"] == env.get("GF_PATHS_PROVISIONING", GRAFANA_PROVISIONING)

    providers = _load_yaml(PROVIDERS_FILE)["providers"]
    assert providers, f"{PROVIDERS_FILE} declares no provider"
    for provider in providers:
        assert provider["type"] == "file"
        assert provider["options"]["path"] == by_source["dashboards/json"], (
            f"provider {provider['name']} reads {provider['options']['path']}, "
            f"but dashboards/json is mounted at {by_source['dashboards/json']}"
        )
    # Paths given to Grafana in its environment (e.g. the home dashboard) must exist behind a mount.
    for name, value in env.items():
        for source, target in mounts:
            if value.startswith(target.rstrip("/") + "/"):
                host_file = COMPOSE_FILE.parent / source / value[len(target.rstrip("/")) + 1 :]
                assert host_file.exists(), f"{name}={value} is {host_file}, which does not exist"


def test_datasource_agrees_with_settings_and_compose(compose: dict[str, Any], clean_env: pytest.MonkeyPatch) -> None:
    datasource = _datasource()
    database = InfluxSettings().database
    assert datasource["uid"]
    assert datasource["jsonData"]["version"] == "InfluxQL"
    assert datasource["jsonData"]["dbName"] == database
    assert datasource.get("database", database) == database
    assert _environment(_service(compose, "influxdb"))["INFLUXDB_DB"] == database
    # Grafana and the daemon talk to the same InfluxDB inside the compose network.
    for name, value in _environment(_service(compose, "aiops")).items():
        clean_env.setenv(name, value)
    daemon_url = urlparse(Settings().influx.url)
    grafana_url = urlparse(datasource["url"])
    assert (grafana_url.hostname, grafana_url.port) == (daemon_url.hostname, daemon_url.port)
    assert grafana_url.hostname in compose["services"]


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=[p.name for p in DASHBOARD_FILES])
def test_dashboard_references_the_provisioned_datasource(path: Path) -> None:
    dashboard = json.loads(path.read_text(encoding="utf-8"))
    assert dashboard.get("uid"), f"{path.name} needs a uid"
    assert dashboard.get("title"), f"{path.name} needs a title"
    uid = _datasource()["uid"]
    refs = list(_datasource_refs(dashboard))
    assert refs, f"{path.name} references no data source"
    wrong = [(where, ref) for where, ref in refs if not (isinstance(ref, dict) and ref.get("uid") == uid)]
    assert not wrong, f"{path.name}: data source references other than uid {uid!r}: {wrong}"
    panels = [p for p in _panels(dashboard["panels"]) if p.get("type") != "row"]
    assert panels, f"{path.name} has no panels"
    for panel in panels:
        assert panel.get("targets"), f"{path.name}: panel {panel.get('title')!r} has no queries"
        assert panel.get("datasource", {}).get("uid") == uid, f"{path.name}: panel {panel.get('title')!r}"
    ids = [p["id"] for p in _panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), f"{path.name}: duplicate panel ids"


def test_dashboards_are_distinct_and_cover_the_catalog() -> None:
    assert {p.name for p in DASHBOARD_FILES} >= {"cluster-telemetry.json", "ingest-health.json"}
    dashboards = [json.loads(p.read_text(encoding="utf-8")) for p in DASHBOARD_FILES]
    uids = [d["uid"] for d in dashboards]
    assert len(uids) == len(set(uids)), uids
    queried: set[str] = set()
    for dashboard in dashboards:
        for panel in _panels(dashboard["panels"]):
            for target in panel.get("targets", []):
                queried |= set(re.findall(r'\bFROM\s+"(\w+)"', target.get("query", "")))
    missing = {m.name for m in MEASUREMENTS} - queried
    assert not missing, f"no dashboard panel reads the measurements {sorted(missing)}"
    assert "aiops_ingest" in queried


# ---------------------------------------------------------------- the aiops image


def test_dockerfile_builds_the_project_daemon(compose: dict[str, Any]) -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, flags=re.MULTILINE))
    images = [
        re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
        for image in re.findall(r"^FROM\s+(\S+)", text, flags=re.MULTILINE)
    ]
    assert images, "Dockerfile has no FROM"
    pyproject = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    requires = SpecifierSet(pyproject["project"]["requires-python"])
    for image in images:
        match = re.fullmatch(r"python:(\d+\.\d+)(?:-slim)?", image)
        assert match, f"unexpected base image {image}"
        assert match.group(1) in requires, f"{image} does not satisfy requires-python {requires}"

    [cmd] = re.findall(r"^CMD\s+(\[.*\])\s*$", text, flags=re.MULTILINE)
    command = json.loads(cmd)
    assert command[0] in pyproject["project"]["scripts"], f"{command[0]} is not a console script of the project"
    assert command == ["aiops", "ingest"]
    aiops = _service(compose, "aiops")
    assert aiops["build"] == "."
    assert (COMPOSE_FILE.parent / "Dockerfile").exists()
    assert aiops.get("command", command) == command
    # The command is one the project's CLI accepts (argparse exits on an unknown one).
    parsed = build_parser().parse_args(command[1:])
    assert parsed.handler is cmd_ingest

    # The build context keeps what `pip wheel .` needs.
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    needed = ["pyproject.toml", *pyproject["tool"]["setuptools"]["packages"]["find"]["include"]]
    for item in needed:
        name = item.rstrip("*")
        excluded = [p for p in patterns if not p.startswith("!") and fnmatch.fnmatch(name, p.removeprefix("**/"))]
        assert not excluded, f".dockerignore excludes {name} (by {excluded}), which the image build needs"


def test_every_service_of_our_image_runs_a_command_the_cli_accepts(compose: dict[str, Any]) -> None:
    ours = {name: s for name, s in compose["services"].items() if str(s.get("image", "")).startswith("aiops-gpu")}
    assert {"aiops", "aiops-run", "aiops-detect", "aiops-rca", "aiops-scheduler", "aiops-remote-write"} <= set(ours)
    for name, service in ours.items():
        command = service["command"]
        assert command[0] == "aiops", name
        build_parser().parse_args(command[1:])  # argparse exits on anything it does not accept
    door = build_parser().parse_args(ours["aiops-remote-write"]["command"][1:])
    assert door.handler is cmd_ingest and door.remote_write, "the Prometheus door is ingest's --remote-write"


def test_every_published_port_is_on_loopback_and_grafana_needs_a_password(compose: dict[str, Any]) -> None:
    """Nothing is published on all interfaces; Grafana has no anonymous access and no default
    admin password (compose refuses to start until one is set)."""
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            spec = port if isinstance(port, str) else f"{port.get('host_ip', '')}:{port.get('published')}"
            assert str(spec).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    env = _environment(_service(compose, "grafana"))
    assert env.get("GF_AUTH_ANONYMOUS_ENABLED") == "false"
    assert re.fullmatch(r"\$\{GRAFANA_ADMIN_PASSWORD:\?[^}]+\}", env["GF_SECURITY_ADMIN_PASSWORD"])
