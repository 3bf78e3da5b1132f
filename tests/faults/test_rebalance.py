"""Ingest members come and go in one consumer group while telemetry flows (a member joins, one
leaves, another joins): partitions move between them, and every value is stored once the stream
is done, with the group's offsets at the end of the topic."""

from __future__ import annotations

import threading
import time

import pytest

from ingest.consume import consume
from ingest.influx_writer import InfluxWriter
from ingest.kafka import TelemetryConsumer, TelemetryProducer, ensure_topics
from ingest.messages import messages_from_lines
from ingest.pipeline import IngestCore, MemoryDeadLetterSink
from tests.faults.test_store_outage import T0_NS, _committed, _stored_values, _telemetry
from vocab.settings import InfluxSettings, KafkaSettings

pytestmark = [pytest.mark.services, pytest.mark.slow]


def test_ingest_members_joining_and_leaving_lose_nothing(
    kafka_settings: KafkaSettings, influx_settings: InfluxSettings
) -> None:
    ensure_topics(kafka_settings.bootstrap, [kafka_settings.telemetry_topic], partitions=6)
    bursts = [_telemetry(nodes=16, ticks=2, t0=T0_NS + k * 60 * 10**9) for k in range(20)]
    expected = sum(IngestCore().process(b).value_count for b in bursts)
    produced = 0
    settings = kafka_settings.model_copy(update={"max_poll_records": 200})

    def produce() -> None:
        nonlocal produced
        producer = TelemetryProducer(settings.bootstrap)
        for burst in bursts:
            produced += producer.send(settings.telemetry_topic, messages_from_lines(burst))
            producer.flush()
            time.sleep(1.0)
        producer.close()

    leave = {name: threading.Event() for name in ("a", "b", "c")}
    polled: dict[str, int] = dict.fromkeys(leave, 0)

    def member(name: str) -> None:
        core = IngestCore()
        writer = InfluxWriter(influx_settings, core.stats)
        consumer = TelemetryConsumer(settings)

        def count(batch: dict[str, object]) -> None:
            polled[name] += int(batch["messages"])  # type: ignore[call-overload]

        try:
            consume(consumer, core, writer, MemoryDeadLetterSink(), leave[name].is_set, on_batch=count)
        finally:
            consumer.close()
            writer.close()

    producing = threading.Thread(target=produce)
    members = {name: threading.Thread(target=member, args=(name,)) for name in leave}
    producing.start()
    members["a"].start()
    time.sleep(5)
    members["b"].start()  # joins: the partitions are split between a and b
    time.sleep(5)
    leave["a"].set()  # leaves: b takes a's partitions
    members["a"].join()
    members["c"].start()  # joins: split again between b and c
    producing.join()
    deadline = time.monotonic() + 120
    while _stored_values(influx_settings) < expected and time.monotonic() < deadline:
        time.sleep(1)
    for name in ("b", "c"):
        leave[name].set()
        members[name].join()
    assert _stored_values(influx_settings) == expected
    assert _committed(settings) == produced
    assert all(polled.values()), f"a member got nothing, no rebalance was shown: {polled}"
