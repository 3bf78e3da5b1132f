"""Compose a site can run (issue 50): every variable it reads is in .env.example, the node agents
have a listener, the daemons that checkpoint share a signing key, a missing topology is waited
for, and the files the daemons are given exist."""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from aiops.cli.commands import build_parser
from aiops.cli.rca import wait_for_file

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
