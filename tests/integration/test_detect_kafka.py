"""The detector daemon between real Kafka topics: generated telemetry in, anomalies out."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka import KafkaConsumer

from aiops.detect_daemon import detect_kafka
from detectors.anomaly import Anomaly, is_presence
from telemetry_gen.emit import to_kafka
from telemetry_gen.generator import GenConfig, Generation
from vocab.settings import KafkaSettings

pytestmark = pytest.mark.services


def test_detect_daemon_reads_telemetry_and_publishes_anomalies(kafka_settings: KafkaSettings) -> None:
    gen = Generation(
        GenConfig(realism="clean", gpus=128, hours=0.75, interval=30, seed=4, faults="psu_failure=1,nic_link_flap=1")
    )
    from ingest.kafka import ensure_topics

    ensure_topics(kafka_settings.bootstrap, [kafka_settings.telemetry_topic], partitions=3)
    to_kafka(gen, kafka_settings.bootstrap, kafka_settings.telemetry_topic)
    settings = kafka_settings.model_copy(update={"detect_group": kafka_settings.ingest_group + "-detect"})
    stats = detect_kafka(settings, 30, lambda: False, gen.events(), idle_stop_s=8, lateness_s=60)
    assert stats.ticks == 90
    consumer = KafkaConsumer(
        settings.anomalies_topic,
        bootstrap_servers=settings.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    # beside the anomalies, who stopped or started reporting (presence records, for the engine)
    anomalies = [a for a in map(Anomaly.from_json, (m.value for m in consumer)) if not is_presence(a)]
    consumer.close()
    assert len(anomalies) == stats.anomalies > 0
    entities = {a.entity for a in anomalies}
    for fault in gen.faults:
        assert fault.root in entities or set(fault.affected) & entities, fault.kind
    assert entities <= {e for f in gen.faults for e in f.affected}  # nothing outside the faults


def test_detect_daemon_takes_the_schedule_from_the_events_topic(kafka_settings: KafkaSettings, tmp_path: Path) -> None:
    """Jobs holding part of a node, said only on the events topic: the anomalies are the offline
    detector's with the same events in a file (the stragglers found against their jobs' GPUs)."""
    from aiops.cli.scheduler import KafkaSink
    from detectors.detect_loop import detect_folder, read_anomalies
    from telemetry_gen.emit import write_folder

    config = GenConfig(gpus=256, hours=2, interval=30, seed=12, faults="gpu_straggler=2", job_shapes="gpus")
    gen = Generation(config)
    write_folder(gen, tmp_path / "recorded")
    detect_folder(tmp_path / "recorded", tmp_path / "offline", 30, drift_factory=None)
    offline = read_anomalies(tmp_path / "offline" / "anomalies.jsonl")
    assert {f.root for f in gen.faults} <= {a.entity for a in offline}

    from ingest.kafka import ensure_topics

    ensure_topics(kafka_settings.bootstrap, [kafka_settings.telemetry_topic], partitions=3)
    sink = KafkaSink(kafka_settings.bootstrap, kafka_settings.events_topic, lambda: False)
    sink.publish(Generation(config).events())
    sink.close()
    again = Generation(config)
    to_kafka(again, kafka_settings.bootstrap, kafka_settings.telemetry_topic)
    settings = kafka_settings.model_copy(update={"detect_group": kafka_settings.ingest_group + "-detect"})
    detect_kafka(settings, 30, lambda: False, None, idle_stop_s=8, lateness_s=60, drift_factory=None)
    consumer = KafkaConsumer(
        settings.anomalies_topic,
        bootstrap_servers=settings.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    streamed = [a for a in map(Anomaly.from_json, (m.value for m in consumer)) if not is_presence(a)]
    consumer.close()
    key = lambda a: (a.at, a.entity, a.metric, a.detector)  # noqa: E731
    assert sorted(map(key, streamed)) == sorted(map(key, offline))
