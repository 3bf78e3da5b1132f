"""The detector daemon between real Kafka topics: generated telemetry in, anomalies out."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer

from aiops.detect_daemon import detect_kafka
from detectors.anomaly import Anomaly
from telemetry_gen.emit import to_kafka
from telemetry_gen.generator import GenConfig, Generation
from vocab.settings import KafkaSettings

pytestmark = pytest.mark.services


def test_detect_daemon_reads_telemetry_and_publishes_anomalies(kafka_settings: KafkaSettings) -> None:
    gen = Generation(
        GenConfig(realism="clean", gpus=128, hours=0.75, interval=30, seed=4, faults="psu_failure=1,nic_link_flap=1")
    )
    from ingest.kafka_io import ensure_topics

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
    anomalies = [Anomaly.from_json(m.value) for m in consumer]
    consumer.close()
    assert len(anomalies) == stats.anomalies > 0
    entities = {a.entity for a in anomalies}
    for fault in gen.faults:
        assert fault.root in entities or set(fault.affected) & entities, fault.kind
    assert entities <= {e for f in gen.faults for e in f.affected}  # nothing outside the faults
