"""Fault injection against the real services: the database goes away while ingest runs, and
nothing Kafka holds is lost. The outage is a window of time in which a relay in front of the real
InfluxDB refuses to connect through (503), as a stopped or restarting database looks to a client;
everything else reaches the real database, so what is counted is what is stored."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from kafka import KafkaConsumer, TopicPartition

from ingest.consume import consume
from ingest.influx_writer import InfluxWriter
from ingest.kafka import TelemetryConsumer, TelemetryProducer, ensure_topics
from ingest.messages import messages_from_lines
from ingest.pipeline import IngestCore, MemoryDeadLetterSink
from tests.conftest import influxql
from tests.influx_relay import FaultyRelay
from vocab.settings import InfluxSettings, KafkaSettings, Settings

pytestmark = [pytest.mark.services, pytest.mark.slow]

OUTAGE_S = 12.0


class OutageRelay(FaultyRelay):
    """Forwards to the database, except for `outage_s` from the first write it sees (503)."""

    def __init__(self, target: str, outage_s: float) -> None:
        self.started: float | None = None

        def refuse() -> int | None:
            self.started = self.started or time.monotonic()
            return 503 if time.monotonic() - self.started < outage_s else None

        super().__init__(target, refuse)


@pytest.fixture
def relay(influx_settings: InfluxSettings) -> Iterator[OutageRelay]:
    r = OutageRelay(influx_settings.url, OUTAGE_S)
    yield r
    r.close()


T0_NS = 1_767_225_600_000_000_000


def _telemetry(nodes: int = 16, ticks: int = 30, t0: int = T0_NS) -> bytes:
    """A small cluster's GPU lines at 30 s from `t0`, with a few lines the ingest core must
    dead-letter."""
    lines = []
    rng = np.random.default_rng(3)
    for k in range(ticks):
        for n in range(nodes):
            for g in range(8):
                temp = 40 + rng.random() * 30
                lines.append(
                    f"gpu,gpu=n{n:03d}-gpu{g},node=n{n:03d} DCGM_FI_DEV_GPU_TEMP={temp:.2f},"
                    f"DCGM_FI_DEV_POWER_USAGE={300 + temp:.1f} {t0 + k * 30 * 10**9}"
                )
        lines.append(f"gpu,gpu=n000-gpu0 DCGM_FI_DEV_GPU_TEMP=oops {t0 + k * 30 * 10**9}")  # malformed
    return ("\n".join(lines) + "\n").encode()


def _stored_values(settings: InfluxSettings) -> int:
    body = influxql(settings, 'SELECT count(*) FROM "gpu"', settings.database)
    series = body["results"][0].get("series")  # type: ignore[index]
    return int(sum(series[0]["values"][0][1:])) if series else 0


def _committed(kafka: KafkaSettings) -> int:
    """The ingest group's committed offsets, summed over the topic's partitions (read without
    joining the group)."""
    reader = KafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=kafka.ingest_group, enable_auto_commit=False)
    try:
        partitions = reader.partitions_for_topic(kafka.telemetry_topic) or set()
        offsets = [reader.committed(TopicPartition(kafka.telemetry_topic, p)) for p in partitions]
    finally:
        reader.close()
    return sum(o or 0 for o in offsets)


def test_a_database_outage_during_ingest_loses_nothing_and_commits_only_what_is_stored(
    kafka_settings: KafkaSettings, influx_settings: InfluxSettings, relay: OutageRelay
) -> None:
    data = _telemetry()
    ensure_topics(kafka_settings.bootstrap, [kafka_settings.telemetry_topic], partitions=3)
    producer = TelemetryProducer(kafka_settings.bootstrap)
    produced = producer.send(kafka_settings.telemetry_topic, messages_from_lines(data))
    producer.flush()
    producer.close()
    # what the core keeps of this input, counted apart from the daemon under test
    reference = IngestCore()
    expected_values = reference.process(data).value_count
    assert reference.stats.deadlettered == 30

    settings = influx_settings.model_copy(update={"url": relay.url, "max_retries": 1, "retry_initial_s": 0.2})
    core = IngestCore()
    writer = InfluxWriter(settings, core.stats)
    letters = MemoryDeadLetterSink()
    consumer = TelemetryConsumer(kafka_settings.model_copy(update={"max_poll_records": 50}))
    committed_during_outage: list[int] = []

    def watch() -> None:  # the group's committed offsets while the database is away
        while relay.started is None:
            time.sleep(0.1)
        time.sleep(OUTAGE_S / 2)
        committed_during_outage.append(_committed(kafka_settings))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        consume(consumer, core, writer, letters, should_stop=lambda: False, idle_stop_s=10)
    finally:
        consumer.close()
        writer.close()
    watcher.join()

    assert relay.refused > 0, "the outage never happened"
    stored = _stored_values(influx_settings)
    assert stored == expected_values  # every value that could be stored is, none lost
    assert len(letters.letters) == 30 and all(x.stage in {"validate", "decode"} for x in letters.letters)
    assert core.stats.dropped == 0
    # while the database was away, nothing past what was stored before it was committed
    assert committed_during_outage and committed_during_outage[0] < produced
    assert _committed(kafka_settings) == produced


def test_asked_to_stop_while_the_database_is_away_commits_nothing_and_the_next_member_stores_it(
    kafka_settings: KafkaSettings, influx_settings: InfluxSettings, relay: OutageRelay
) -> None:
    data = _telemetry(nodes=4, ticks=5)
    ensure_topics(kafka_settings.bootstrap, [kafka_settings.telemetry_topic], partitions=1)
    producer = TelemetryProducer(kafka_settings.bootstrap)
    produced = producer.send(kafka_settings.telemetry_topic, messages_from_lines(data))
    producer.flush()
    producer.close()
    expected_values = IngestCore().process(data).value_count

    down = influx_settings.model_copy(update={"url": relay.url, "max_retries": 0})
    core = IngestCore()
    writer = InfluxWriter(down, core.stats)
    consumer = TelemetryConsumer(kafka_settings)
    stop_at = time.monotonic() + 60

    def stop() -> bool:  # a SIGTERM two seconds into the outage
        return (relay.started is not None and time.monotonic() - relay.started > 2) or time.monotonic() > stop_at

    try:
        consume(consumer, core, writer, MemoryDeadLetterSink(), should_stop=stop)
    finally:
        consumer.close()
        writer.close()
    assert _committed(kafka_settings) == 0 and _stored_values(influx_settings) == 0

    # the next member of the group, with the database back, reads it all again and stores it
    core = IngestCore()
    writer = InfluxWriter(influx_settings, core.stats)
    consumer = TelemetryConsumer(kafka_settings)
    try:
        consume(consumer, core, writer, MemoryDeadLetterSink(), should_stop=lambda: False, idle_stop_s=8)
    finally:
        consumer.close()
        writer.close()
    assert _stored_values(influx_settings) == expected_values
    assert _committed(kafka_settings) == produced


def test_the_services_script_creates_the_database_the_defaults_expect(services: Settings) -> None:
    body = influxql(services.influx, "SHOW DATABASES")
    names = {row[0] for row in body["results"][0]["series"][0]["values"]}  # type: ignore[index]
    assert InfluxSettings().database in names


def test_ingest_into_a_database_that_does_not_exist_waits_for_it_and_then_stores_everything(
    kafka_settings: KafkaSettings, influx_settings: InfluxSettings
) -> None:
    data = _telemetry(nodes=4, ticks=5)
    ensure_topics(kafka_settings.bootstrap, [kafka_settings.telemetry_topic], partitions=1)
    producer = TelemetryProducer(kafka_settings.bootstrap)
    produced = producer.send(kafka_settings.telemetry_topic, messages_from_lines(data))
    producer.flush()
    producer.close()
    expected_values = IngestCore().process(data).value_count
    influxql(influx_settings, f'DROP DATABASE "{influx_settings.database}"')  # as a fresh site's may be
    core = IngestCore()
    writer = InfluxWriter(influx_settings.model_copy(update={"max_retries": 0}), core.stats)
    consumer = TelemetryConsumer(kafka_settings)
    committed_while_missing: list[int] = []

    def operator() -> None:  # notices the error in the log and creates the database
        time.sleep(6)
        committed_while_missing.append(_committed(kafka_settings))
        influxql(influx_settings, f'CREATE DATABASE "{influx_settings.database}"')

    fixing = threading.Thread(target=operator)
    fixing.start()
    try:
        consume(consumer, core, writer, MemoryDeadLetterSink(), should_stop=lambda: False, idle_stop_s=8)
    finally:
        consumer.close()
        writer.close()
        fixing.join()
    assert committed_while_missing == [0]
    assert _stored_values(influx_settings) == expected_values
    assert _committed(kafka_settings) == produced and core.stats.dropped == 0
