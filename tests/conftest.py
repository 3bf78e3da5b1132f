"""Shared fixtures. Integration tests use the real Kafka and InfluxDB that scripts/services
starts on 127.0.0.1; if they are not running, the first test that needs them starts them."""

from __future__ import annotations

import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import requests

from vocab.settings import InfluxSettings, KafkaSettings, Settings

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_LP = ROOT / "tests" / "data" / "sample.lp"


@pytest.fixture(autouse=True)
def _own_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Daemons checkpoint into the state directory: each test gets its own, never the user's."""
    monkeypatch.setenv("AIOPS_STATE_DIR", str(tmp_path_factory.mktemp("state")))


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


@pytest.fixture(scope="session")
def services() -> Settings:
    """Settings pointing at running services, starting them with scripts/services if needed."""
    settings = Settings()
    kafka_host, kafka_port = settings.kafka.bootstrap.rsplit(":", 1)
    influx = urlparse(settings.influx.url)
    if not (_port_open(kafka_host, int(kafka_port)) and _port_open(influx.hostname or "", influx.port or 8086)):
        subprocess.run([str(ROOT / "scripts" / "services"), "up"], check=True)
    return settings


@pytest.fixture
def kafka_settings(services: Settings) -> KafkaSettings:
    """Kafka settings with topics and group unique to this test, so tests cannot see each other."""
    suffix = uuid.uuid4().hex[:10]
    base = services.kafka
    return base.model_copy(
        update={
            "telemetry_topic": f"test.telemetry.{suffix}",
            "deadletter_topic": f"test.deadletter.{suffix}",
            "anomalies_topic": f"test.anomalies.{suffix}",
            "predictions_topic": f"test.predictions.{suffix}",
            "incidents_topic": f"test.incidents.{suffix}",
            "notices_topic": f"test.notices.{suffix}",
            "events_topic": f"test.events.{suffix}",
            "cohorts_topic": f"test.cohorts.{suffix}",
            "progress_topic": f"test.progress.{suffix}",
            "ingest_group": f"test-ingest-{suffix}",
            "poll_timeout_ms": 200,
        }
    )


def influxql(settings: InfluxSettings, query: str, database: str | None = None) -> dict[str, object]:
    """Run InfluxQL on /query and return the JSON answer, failing on any error in it."""
    params = {"q": query, "epoch": "ns"}
    if database:
        params["db"] = database
    response = requests.post(f"{settings.url}/query", params=params, timeout=30)
    response.raise_for_status()
    body: dict[str, object] = response.json()
    for result in body.get("results", []):  # type: ignore[attr-defined]
        if "error" in result:
            raise AssertionError(f"InfluxQL error for {query!r}: {result['error']}")
    return body


@pytest.fixture
def influx_settings(services: Settings) -> Iterator[InfluxSettings]:
    """A fresh database for this test, dropped afterwards."""
    database = f"test_{uuid.uuid4().hex[:10]}"
    settings = services.influx.model_copy(update={"database": database})
    influxql(settings, f'CREATE DATABASE "{database}"')
    yield settings
    influxql(settings, f'DROP DATABASE "{database}"')
