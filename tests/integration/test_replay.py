"""`aiops replay` copies a staged recording to the telemetry topic as the collectors would have
published it: the same records, keys and partitions as the generator writing to that topic
directly, each record out no sooner than its scrape time says at the chosen speed."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from aiops.cli import main
from benchmarks.scale import STAGING_TOPIC_CONFIG
from ingest.kafka import delete_topics, ensure_topics
from vocab.settings import KafkaSettings

pytestmark = pytest.mark.services

GEN = ["--gpus", "64", "--hours", "0.1", "--interval", "10", "--seed", "5", "--faults", "leaf_down=1"]


def _records(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes, int]]:
    """(partition, key, value, timestamp) of every record, in offset order per partition. Read
    with librdkafka, as the replay does: kafka-python cannot read the staging topic's zstd
    without the optional zstandard module."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}.reader", "enable.auto.commit": False})
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        out: list[tuple[int, bytes | None, bytes, int, int]] = []
        read_to = dict.fromkeys(partitions, 0)
        deadline = time.monotonic() + 30
        while any(read_to[p] < ends[p] for p in partitions):
            assert time.monotonic() < deadline, f"{topic}: read {read_to} of {ends} in 30 s"
            # consume() waits for its whole batch or its timeout, so short waits, not a big batch
            batch = consumer.consume(num_messages=100, timeout=0.2)
            for m in batch:
                partition, offset, value = m.partition(), m.offset(), m.value()
                assert m.error() is None and partition is not None and offset is not None and value is not None
                out.append((partition, m.key(), value, offset, m.timestamp()[1]))
                read_to[partition] = offset + 1
        out.sort(key=lambda r: (r[0], r[3]))
        return [(p, k, v, t) for p, k, v, _, t in out]
    finally:
        consumer.close()


def test_a_replay_lands_what_the_collectors_would_have_published(kafka_settings: KafkaSettings, tmp_path: Path) -> None:
    bootstrap = kafka_settings.bootstrap
    staging, direct, live = (f"{kafka_settings.telemetry_topic}.{n}" for n in ("staging", "direct", "live"))
    ensure_topics(bootstrap, [staging], partitions=1, configs=STAGING_TOPIC_CONFIG)
    ensure_topics(bootstrap, [direct, live], partitions=6)
    try:
        assert main(["gen", *GEN, "--kafka", bootstrap, "--topic", staging, "--truth-dir", str(tmp_path / "a")]) == 0
        assert main(["gen", *GEN, "--kafka", bootstrap, "--topic", direct, "--truth-dir", str(tmp_path / "b")]) == 0
        started_file = tmp_path / "started"
        speed = 120.0  # 6 minutes of cluster time in about 3 s
        before = time.time()
        args = ["replay", staging, "--kafka", bootstrap, "--topic", live, "--speed", str(speed)]
        assert main([*args, "--started-file", str(started_file)]) == 0
        after = time.time()

        staged = _records(bootstrap, staging)
        replayed = _records(bootstrap, live)
        expected = _records(bootstrap, direct)
        assert staged, "the generator staged nothing"
        # the same records on the same partitions, in the same order on each
        assert [(p, k, v) for p, k, v, _ in replayed] == [(p, k, v) for p, k, v, _ in expected]
        assert len({p for p, *_ in replayed}) > 1, "the keys spread over one partition only"
        assert Counter(v for *_, v, _ in staged) == Counter(v for *_, v, _ in replayed)

        # paced: the replay took at least the cluster time it covers, at that speed
        started_at = float(started_file.read_text())
        assert before <= started_at <= after
        stamps = [t for *_, t in staged]
        span_s = (max(stamps) - min(stamps)) / 1000.0
        assert span_s > 0, "the staged records carry one timestamp: CreateTime was not kept"
        assert after - started_at >= span_s / speed
    finally:
        delete_topics(bootstrap, [staging, direct, live])


def test_replaying_an_empty_topic_is_a_clear_error(
    kafka_settings: KafkaSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    staging = f"{kafka_settings.telemetry_topic}.empty"
    ensure_topics(kafka_settings.bootstrap, [staging], partitions=1, configs=STAGING_TOPIC_CONFIG)
    try:
        code = main(["replay", staging, "--kafka", kafka_settings.bootstrap, "--topic", staging + ".live"])
        assert code != 0
        assert "nothing to replay" in capsys.readouterr().err
    finally:
        delete_topics(kafka_settings.bootstrap, [staging, staging + ".live"])
