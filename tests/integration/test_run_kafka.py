"""The whole pipeline as a daemon between real Kafka topics gives the incidents the offline
runner gives on the same data: `aiops gen --kafka` -> `aiops run --kafka` -> aiops.incidents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer

from aiops.cli import main
from benchmarks.soak import by_incident as _by_incident
from benchmarks.soak import incident_differences as _differences
from vocab.settings import KafkaSettings

pytestmark = pytest.mark.services

GEN = ["--gpus", "256", "--hours", "1", "--interval", "30", "--seed", "8"]
FAULTS = ["--faults", "leaf_down=1,psu_failure=1,pfc_storm=1,gpu_straggler=1"]


def _consume(settings: KafkaSettings, topic: str) -> list[dict[str, Any]]:
    consumer = KafkaConsumer(
        topic, bootstrap_servers=settings.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000
    )
    records = [json.loads(m.value) for m in consumer]
    consumer.close()
    return records


def test_daemon_incidents_equal_the_offline_runs(
    kafka_settings: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in (
        "telemetry_topic",
        "anomalies_topic",
        "predictions_topic",
        "incidents_topic",
        "notices_topic",
        "deadletter_topic",
    ):
        monkeypatch.setenv(f"AIOPS_KAFKA__{key.upper()}", getattr(kafka_settings, key))
    from ingest.kafka import ensure_topics

    ensure_topics(kafka_settings.bootstrap, [kafka_settings.telemetry_topic], partitions=3)
    side = tmp_path / "side"
    assert main(["gen", *GEN, *FAULTS, "--kafka", kafka_settings.bootstrap, "--truth-dir", str(side)]) == 0
    group = ["--group", kafka_settings.ingest_group + "-run"]
    daemon = ["run", "--kafka", kafka_settings.bootstrap, "--topology", str(side / "topology.json"), "--interval", "30"]
    daemon += ["--events", str(side / "events.jsonl"), *group, "--stop-when-idle", "8", "--no-predict"]
    assert main(daemon) == 0
    streamed = _consume(kafka_settings, kafka_settings.incidents_topic)

    assert main(["gen", *GEN, *FAULTS, "--out", str(tmp_path / "recorded")]) == 0
    out = tmp_path / "offline"
    assert main(["run", "--input", str(tmp_path / "recorded"), "--out", str(out), "--no-predict"]) == 0
    lines = (out / "incidents.jsonl").read_text().splitlines()
    offline = [json.loads(line) for line in lines if line.strip()]

    assert offline, "the faults opened no incident at all"
    assert _differences(_by_incident(streamed), _by_incident(offline)) == []
    truth = [json.loads(line) for line in (side / "truth.jsonl").read_text().splitlines()]
    roots = {i["root_cause"]["entity"] for i in offline if i["status"] != "warning"}
    # every fault, but a faint straggler (aiops eval's bands: severity under 0.3): a GPU 6.7 % slow
    # from 18 minutes before the end of the hour is inside its chips' spread, and its fall from
    # its own place needs longer watching than that (docs/detection.md); the others have hard
    # signals (a PSU's status, link states, pause counters) whatever their severity
    faint_straggler = {f["root"] for f in truth if f["kind"] == "gpu_straggler" and f["severity"] < 0.3}
    assert {f["root"] for f in truth} - faint_straggler <= roots
    anomalies = _consume(kafka_settings, kafka_settings.anomalies_topic)
    assert len(anomalies) == sum(1 for line in (out / "anomalies.jsonl").read_text().splitlines() if line)
