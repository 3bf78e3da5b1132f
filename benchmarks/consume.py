"""The consumer hot path: kafka-python against confluent-kafka (librdkafka) reading the same
telemetry topic to its end, each handing over what the daemons' decoder takes: (partition,
offset, timestamp, value) per message, in batches; and, when it is installed, Quix Streams (a
stream processor on Kafka) handing each message to a pipeline step. Part of `aiops bench scale`.

Both read without a group from the beginning, one process, one thread of ours; the best of
`repeat` runs. The daemons use kafka-python (the design card's); this says what the other would
buy on the consume side."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConsumeRow:
    client: str
    batch: int
    messages: int
    megabytes: float
    seconds: float

    @property
    def mb_per_s(self) -> float:
        return self.megabytes / self.seconds if self.seconds else 0.0


def _kafka_python(bootstrap: str, topic: str, batch: int) -> tuple[int, int]:
    # the client library itself, measured against the others: the one use of `kafka` outside
    # ingest/kafka/, on purpose, as confluent_kafka is imported below for the same comparison
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        max_poll_records=batch,
        fetch_max_bytes=16 << 20,
        max_partition_fetch_bytes=4 << 20,
        enable_incremental_fetch_sessions=False,
    )
    parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    ends = consumer.end_offsets(parts)
    count = size = 0
    while any(consumer.position(tp) < ends[tp] for tp in parts):
        for tp, records in consumer.poll(timeout_ms=500, max_records=batch).items():
            handed = [(tp.partition, r.offset, r.timestamp, r.value) for r in records]
            count += len(handed)
            size += sum(len(v) for *_, v in handed)
    consumer.close()
    return count, size


def _confluent(bootstrap: str, topic: str, batch: int) -> tuple[int, int]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "aiops-bench-consume",  # required by the client; nothing is committed
            "enable.auto.commit": False,
            "fetch.max.bytes": 16 << 20,
            "max.partition.fetch.bytes": 4 << 20,
        }
    )
    meta = consumer.list_topics(topic, timeout=10)
    parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(meta.topics[topic].partitions)]
    consumer.assign(parts)
    ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in parts}
    at = dict.fromkeys(ends, 0)
    count = size = 0
    while any(at[p] < ends[p] for p in ends):
        messages = consumer.consume(num_messages=batch, timeout=0.5)
        handed: list[tuple[int, int, int, bytes]] = []
        for m in messages:
            partition, offset, value = m.partition(), m.offset(), m.value()
            if m.error() is None and partition is not None and offset is not None and value is not None:
                handed.append((partition, offset, m.timestamp()[1], value))
                at[partition] = offset + 1
        count += len(handed)
        size += sum(len(v) for *_, v in handed)
    consumer.close()
    return count, size


def _quixstreams(bootstrap: str, topic: str, batch: int) -> tuple[int, int]:
    """Quix Streams, a stream processor on Kafka (on confluent-kafka): its dataframe API hands a
    pipeline one message at a time, so `batch` means nothing to it. A group of its own, from the
    beginning; stopped once every message the topic held has passed."""
    import shutil
    import tempfile
    import uuid

    from quixstreams import Application

    from ingest.kafka import topic_ends

    total = sum(topic_ends(bootstrap, [topic]).get(topic, {}).values())
    state = tempfile.mkdtemp(prefix="aiops-bench-quix-")  # it makes a state folder even with no state
    app = Application(
        broker_address=bootstrap,
        consumer_group=f"aiops-bench-quix-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        auto_create_topics=False,
        state_dir=state,
    )
    seen = [0, 0]

    def take(value: bytes) -> None:  # what the decoder would be handed
        seen[0] += 1
        seen[1] += len(value)
        if seen[0] >= total:
            app.stop()

    sdf = app.dataframe(app.topic(topic, value_deserializer="bytes"))
    sdf.update(take)
    try:
        app.run()
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return seen[0], seen[1]


def bench_consume(bootstrap: str, topic: str, batches: list[int], repeat: int = 2) -> list[ConsumeRow]:
    rows: list[ConsumeRow] = []
    clients = {"kafka-python": _kafka_python}
    try:
        import confluent_kafka  # noqa: F401

        clients["confluent-kafka"] = _confluent
    except ImportError:  # pip install -e .[bench]
        pass
    try:
        import quixstreams  # noqa: F401

        clients["quixstreams"] = _quixstreams
    except ImportError:  # pip install quixstreams (not a dependency: measured, not used)
        pass
    for name, read in clients.items():
        for batch in batches if name != "quixstreams" else batches[:1]:
            best, got = float("inf"), (0, 0)
            for _ in range(repeat):
                started = time.perf_counter()
                got = read(bootstrap, topic, batch)
                best = min(best, time.perf_counter() - started)
            rows.append(ConsumeRow(name, batch, got[0], got[1] / 1e6, best))
    return rows


__all__ = ["ConsumeRow", "bench_consume"]
