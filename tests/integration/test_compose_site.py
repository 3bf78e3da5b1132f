"""Compose a site can run (issue 50): every variable it reads is in .env.example, the node agents
have a listener, the daemons that checkpoint share a signing key, a missing topology is waited
for, and the files the daemons are given exist."""

from __future__ import annotations

import os
import re
import sys
import threading
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from pydantic import SecretStr

from aiops.cli.checks import listen_address
from aiops.cli.commands import build_parser
from aiops.cli.rca import wait_for_file
from aiops.cli.telemetry import cmd_ingest
from ingest.remote_write_service import Credentials, start_refusal
from vocab.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def _example() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (ROOT / ".env.example").read_text().splitlines())
    return {k.strip(): v for k, *rest in pairs if rest and not k.startswith("#") for v in rest}


def test_every_variable_compose_reads_is_in_the_env_example() -> None:
    used = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", (ROOT / "docker-compose.yml").read_text()))
    assert used - set(_example()) == set()
    required = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*):\?", (ROOT / "docker-compose.yml").read_text()))
    assert required >= {"GRAFANA_ADMIN_PASSWORD", "AIOPS_STATE_KEY"}


def test_kafka_advertises_a_listener_for_the_node_agents_from_the_environment(compose: dict[str, Any]) -> None:
    env = compose["services"]["kafka"]["environment"]
    advertised = dict(item.split("://", 1) for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert advertised["EXTERNAL"] == "${KAFKA_EXTERNAL_HOST:-127.0.0.1}:19092"
    container_port = next(item.rsplit(":", 1)[1] for item in env["KAFKA_LISTENERS"].split(",") if "EXTERNAL" in item)
    assert f"127.0.0.1:19092:{container_port}" in compose["services"]["kafka"]["ports"]
    # the site's file publishes the same listener on the management network, and only that
    site: dict[str, Any] = yaml.safe_load((ROOT / "compose.site.yml").read_text())
    assert site["services"]["kafka"]["ports"] == [f"${{KAFKA_EXTERNAL_BIND:?{_bind_message()}}}:19092:{container_port}"]
    used = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", (ROOT / "compose.site.yml").read_text()))
    assert used - set(_example()) == set()


def _bind_message() -> str:
    return "set KAFKA_EXTERNAL_BIND, the head node's management-network address"


def test_every_daemon_that_checkpoints_is_given_the_state_key(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        env = service.get("environment") or {}
        if "AIOPS_STATE_DIR" in env:
            assert env.get("AIOPS_STATE_KEY", "").startswith("${AIOPS_STATE_KEY:?"), name


def test_the_daemons_wait_for_the_topology_and_their_files_exist(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        command = service.get("command") or []
        if "--topology" in command:
            args = build_parser().parse_args(command[1:])
            assert args.wait_for_topology, name
        if "--events" in command:
            given = command[command.index("--events") + 1]
            assert given.startswith("/etc/aiops/"), name
            assert (ROOT / "config" / given.removeprefix("/etc/aiops/")).is_file(), name


def test_a_missing_topology_is_said_once_then_waited_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topology = tmp_path / "topology.json"
    waiting = threading.Thread(target=wait_for_file, args=(topology, "make it"), kwargs={"poll_s": 0.01})
    waiting.start()
    waiting.join(0.2)
    assert waiting.is_alive()
    topology.write_text("{}")
    waiting.join(10)
    assert not waiting.is_alive()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"aiops run: waiting for {topology}, make it"], lines
    assert sys.stderr is not None


def test_the_gpu_hosts_listener_is_sasl_ssl_behind_acls(compose: dict[str, Any]) -> None:
    """Issue 64: EXTERNAL (the GPU hosts') is TLS with a SCRAM-SHA-512 login, and KRaft's authorizer
    refuses what no ACL allows; the broker's own login is the only super user. The broker these
    settings make is run by tests/integration/test_kafka_acls.py."""
    env = compose["services"]["kafka"]["environment"]
    protocols = dict(item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert protocols["EXTERNAL"] == "SASL_SSL"
    assert protocols["INTERNAL"] == "SASL_SSL"  # the daemons log in too
    assert protocols["CONTROLLER"] == "SASL_PLAINTEXT"
    # what a site publishes beyond loopback is EXTERNAL's port only (compose.site.yml)
    site: dict[str, Any] = yaml.safe_load((ROOT / "compose.site.yml").read_text())
    external_port = next(item.rsplit(":", 1)[1] for item in env["KAFKA_LISTENERS"].split(",") if "EXTERNAL" in item)
    assert [p.rsplit(":", 1)[1] for p in site["services"]["kafka"]["ports"]] == [external_port]
    assert env["KAFKA_LISTENER_NAME_EXTERNAL_SASL_ENABLED_MECHANISMS"] == "SCRAM-SHA-512"
    assert "ScramLoginModule" in env["KAFKA_LISTENER_NAME_EXTERNAL_SCRAM___SHA___512_SASL_JAAS_CONFIG"]
    assert env["KAFKA_AUTHORIZER_CLASS_NAME"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert env["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    assert env["KAFKA_SUPER_USERS"] == "User:admin"
    for name in ("KAFKA_SSL_KEYSTORE_PASSWORD", "KAFKA_LISTENER_NAME_INTERNAL_PLAIN_SASL_JAAS_CONFIG"):
        assert ":?" in env[name], name  # no default secret
    # the GPU hosts' ACL: the telemetry topic, Write and Describe, and no other line for them
    script = (ROOT / "config" / "kafka" / "setup-acls.sh").read_text()
    granted = re.findall(r"^\s*(?:bg )?allow User:gpu-host (.*)$", script, flags=re.M)
    assert granted == ['Write,Describe --topic "$TELEMETRY"'], granted
    assert 'TELEMETRY="${AIOPS_KAFKA__TELEMETRY_TOPIC:-aiops.telemetry}"' in script


def test_the_acls_are_set_before_any_daemon_starts(compose: dict[str, Any]) -> None:
    services = compose["services"]
    setup = services["kafka-setup"]
    assert setup["image"] == services["kafka"]["image"]  # Kafka's own kafka-acls.sh and kafka-configs.sh
    assert setup["command"] == ["bash", "/etc/kafka/aiops/setup-acls.sh"]
    assert "./config/kafka:/etc/kafka/aiops:ro" in setup["volumes"]
    assert (ROOT / "config" / "kafka" / "setup-acls.sh").is_file()
    assert setup["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert setup["restart"] == "no"
    daemons = {name: s for name, s in services.items() if "AIOPS_KAFKA__BOOTSTRAP" in (s.get("environment") or {})}
    assert {"aiops", "aiops-run", "aiops-detect", "aiops-rca", "aiops-scheduler"} <= set(daemons)
    users = set()
    for name, service in daemons.items():
        assert service["depends_on"]["kafka-setup"]["condition"] == "service_completed_successfully", name
        env = service["environment"]
        assert env["AIOPS_KAFKA__SECURITY_PROTOCOL"] == "SASL_SSL", name
        assert env["AIOPS_KAFKA__SSL_CAFILE"] == "/etc/aiops/kafka/tls/ca.pem", name
        assert env["AIOPS_KAFKA__SASL_PASSWORD"].startswith("${KAFKA_"), name
        users.add(env["AIOPS_KAFKA__SASL_USERNAME"])
        mounts = [str(v).split(":")[:2] for v in service.get("volumes", [])]
        assert ["./config", "/etc/aiops"] in mounts or [
            "./config/kafka/tls/ca.pem",
            env["AIOPS_KAFKA__SSL_CAFILE"],
        ] in mounts
    assert len(users) == len(daemons)  # a principal each
    assert "gpu-host" not in users
    # every password compose hands out is one kafka-setup sets
    passwords = set(re.findall(r"\$\{(KAFKA_\w+_PASSWORD)", str(daemons)))
    assert passwords <= set(setup["environment"]), passwords - set(setup["environment"])


def test_the_prometheus_door_is_a_service_behind_a_token_and_tls_with_its_own_login(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 65, item 5: `aiops ingest --remote-write` as a compose service in the profile
    "prometheus", on every address of its container only with its token and TLS, published on the
    management network by the site's file where the shipped Prometheus snippet sends, logged in to
    Kafka as a principal of its own that may write telemetry and dead letters and nothing else."""
    services = compose["services"]
    door = services["aiops-remote-write"]
    assert door["profiles"] == ["prometheus"]  # a site without Prometheus does not run it
    assert door["image"] == services["aiops-run"]["image"] == "aiops-gpu:latest"
    assert door["restart"] == "unless-stopped"
    assert door["depends_on"]["kafka-setup"]["condition"] == "service_completed_successfully"
    args = build_parser().parse_args(door["command"][1:])
    assert args.handler is cmd_ingest
    host, port = listen_address(args.remote_write)
    assert (host, port) == ("0.0.0.0", 9201)
    assert args.remote_write_token_file and args.remote_write_tls_cert and args.remote_write_tls_key
    assert not args.remote_write_open
    # what the door checks at start: there it starts with a token and TLS, and without either refuses
    token = Credentials(SecretStr("a-token"))
    assert start_refusal(host, token, True, False) is None
    assert start_refusal(host, Credentials(), True, False)
    assert start_refusal(host, token, False, False)
    # its files come read-only from the folder git ignores (keys and the token are never committed)
    mounts = {}
    for volume in door["volumes"]:
        source, target, *mode = str(volume).split(":")
        assert mode == ["ro"], volume
        mounts[target] = source
    for given in (args.remote_write_token_file, args.remote_write_tls_cert, args.remote_write_tls_key):
        source = mounts[str(PurePosixPath(given).parent)]
        assert source.startswith("./config/kafka/tls/"), given
    assert "tls/" in (ROOT / "config" / "kafka" / ".gitignore").read_text().split()
    # loopback here; the management network's address with the site's file, under the same guard
    # as Kafka's node-agent listener
    assert door["ports"] == [f"127.0.0.1:{port}:{port}"]
    site: dict[str, Any] = yaml.safe_load((ROOT / "compose.site.yml").read_text())
    assert site["services"]["aiops-remote-write"]["ports"] == [
        f"${{KAFKA_EXTERNAL_BIND:?{_bind_message()}}}:{port}:{port}"
    ]
    assert f"('127.0.0.1', {port})" in door["healthcheck"]["test"][-1]
    # its own login, whose password compose requires and kafka-setup sets
    env = door["environment"]
    assert env["AIOPS_KAFKA__SASL_USERNAME"] == "aiops-remote-write"
    required = "${KAFKA_REMOTE_WRITE_PASSWORD:?"
    assert env["AIOPS_KAFKA__SASL_PASSWORD"].startswith(required)
    assert services["kafka-setup"]["environment"]["KAFKA_REMOTE_WRITE_PASSWORD"].startswith(required)
    assert "KAFKA_REMOTE_WRITE_PASSWORD" in _example()
    for name in [n for n in os.environ if n.startswith("AIOPS_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    kafka = Settings().kafka
    assert (kafka.bootstrap, kafka.security_protocol) == ("kafka:9092", "SASL_SSL")
    assert mounts[str(kafka.ssl_cafile)] == "./config/kafka/tls/ca.pem"  # the broker's CA
    # its ACLs: Write, Describe, Create on the telemetry and dead-letter topics; no other line, no group
    script = (ROOT / "config" / "kafka" / "setup-acls.sh").read_text()
    assert 'bg login aiops-remote-write "${KAFKA_REMOTE_WRITE_PASSWORD:-}"' in script
    granted = re.findall(r"^\s*(?:bg )?allow User:aiops-remote-write (.*)$", script, flags=re.M)
    assert granted == ['Write,Describe,Create "${remote_write_writes[@]}"'], granted
    topics = re.findall(r"^mapfile -t remote_write_writes < <\(topics (.*)\)$", script, flags=re.M)
    assert topics == ['"$TELEMETRY" "$DEADLETTER"'], topics
    # Prometheus sends to the address the site's file publishes: the head node's name on the
    # management network (KAFKA_EXTERNAL_HOST), not a name of the compose network
    shipped = (ROOT / "config" / "prometheus" / "remote-write.yml").read_text()
    [target] = yaml.safe_load(shipped)["remote_write"]
    url = urlparse(target["url"])
    assert (url.scheme, url.port, url.path) == ("https", port, "/api/v1/write")
    assert url.hostname not in services and url.hostname != "aiops-ingest"
    assert "KAFKA_EXTERNAL_HOST" in shipped and f"in place of {url.hostname}" in shipped
    assert target["authorization"]["credentials_file"] and target["tls_config"]["ca_file"]
