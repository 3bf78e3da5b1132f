"""Hostile telemetry through the real services: lines from a clock in the year 2226, a 1 MB
entity id, a NUL inside an id and an entity the topology does not know, mixed into a healthy
cluster's stream. Ingest stores everything else (stored = produced - dead-lettered, by query),
and the root-cause daemon opens exactly the incidents the offline run opens without them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiops.cli import main
from aiops.run_daemon import RunOptions, run_kafka
from benchmarks.soak import by_incident as _by_incident
from benchmarks.soak import incident_differences as _differences
from detectors.detect_loop import read_events
from ingest.consume import consume
from ingest.influx_writer import InfluxWriter
from ingest.kafka import TelemetryConsumer, TelemetryProducer, ensure_topics
from ingest.messages import messages_from_lines
from ingest.pipeline import IngestCore, MemoryDeadLetterSink
from tests.faults.test_broker_restart import _stored_telemetry_values
from tests.integration.test_run_kafka import _consume
from vocab.settings import InfluxSettings, KafkaSettings

pytestmark = [pytest.mark.services, pytest.mark.slow]

GEN = ["--gpus", "256", "--hours", "0.5", "--interval", "30", "--seed", "11", "--faults", "psu_failure=1"]
YEAR_2226_NS = 8_124_000_000 * 10**9


def _hostile(t_ns: int) -> list[bytes]:
    return [
        f"gpu,gpu=n00003-gpu1,node=n00003 DCGM_FI_DEV_GPU_TEMP=51 {YEAR_2226_NS}".encode(),
        f"gpu,gpu={'x' * (1 << 20)},node=n00003 DCGM_FI_DEV_GPU_TEMP=51 {t_ns}".encode(),
        f"gpu,gpu=n00003-gpu\x001,node=n00003 DCGM_FI_DEV_GPU_TEMP=51 {t_ns}".encode(),
        f"gpu,gpu=zz999-gpu0,node=zz999 DCGM_FI_DEV_GPU_TEMP=51,DCGM_FI_DEV_XID_ERRORS=79i {t_ns}".encode(),
    ]


def test_hostile_lines_lose_nothing_else_and_open_no_incident(
    kafka_settings: KafkaSettings, influx_settings: InfluxSettings, tmp_path: Path
) -> None:
    clean, offline = tmp_path / "clean", tmp_path / "offline"
    assert main(["gen", *GEN, "--out", str(clean)]) == 0
    assert main(["run", "--input", str(clean), "--out", str(offline), "--no-predict"]) == 0
    lines = (offline / "incidents.jsonl").read_text().splitlines()
    expected_incidents = _by_incident([json.loads(line) for line in lines if line.strip()])
    assert expected_incidents, "the fault opened no incident: nothing to compare"

    telemetry = (clean / "telemetry.lp").read_bytes().splitlines()
    middle = len(telemetry) // 2
    t_ns = int(telemetry[middle].rpartition(b" ")[2])
    data = b"\n".join([*telemetry[:middle], *_hostile(t_ns), *telemetry[middle:]]) + b"\n"
    reference = IngestCore()
    expected_values = reference.process(data).value_count
    assert reference.stats.deadlettered == 3  # the clock, the long id and the NUL; the stranger is stored

    ensure_topics(kafka_settings.bootstrap, [kafka_settings.telemetry_topic], partitions=3)
    producer = TelemetryProducer(kafka_settings.bootstrap)
    producer.send(kafka_settings.telemetry_topic, messages_from_lines(data))
    producer.flush()
    producer.close()

    core = IngestCore()
    writer = InfluxWriter(influx_settings, core.stats)
    letters = MemoryDeadLetterSink()
    consumer = TelemetryConsumer(kafka_settings)
    try:
        consume(consumer, core, writer, letters, should_stop=lambda: False, idle_stop_s=8)
    finally:
        consumer.close()
        writer.close()
    assert _stored_telemetry_values(influx_settings) == expected_values
    assert len(letters.letters) == 3 and core.stats.dropped == 0

    settings = kafka_settings.model_copy(update={"run_group": kafka_settings.ingest_group + "-run"})
    events, _ = read_events(clean / "events.jsonl")
    stats = run_kafka(
        settings, RunOptions(30.0, clean / "topology.json", events, idle_stop_s=8, lateness_s=60), lambda: False
    )
    assert stats.deadletters == 3
    streamed = _by_incident(_consume(settings, settings.incidents_topic))
    assert _differences(streamed, expected_incidents) == []
