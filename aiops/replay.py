"""`aiops replay`: a recorded telemetry topic published again at the pace it was scraped.

A cluster of 100,000 GPUs scrapes 715k values a second. Generating and encoding that as it
happens costs this machine more than a core (the generator and the line-protocol producer), which
a real cluster spends on its own hosts, not on the monitoring machine. So a live measurement at
that size records the cluster once into a staging topic (one partition, so the records stay in
scrape order; CreateTime, so each record keeps its scrape time; compressed at rest) and this
copies the raw records to the live topic when their scrape time comes round, keyed as they were,
so each lands on the partition the collectors' producer would have chosen (librdkafka's
`murmur2_random` is the Java client's and kafka-python's partitioner for keyed records).

The copy is raw bytes through librdkafka (confluent-kafka): it decodes nothing, which keeps its
CPU to a few percent of a core at 23 MB/s. It is also how an operator replays a recorded incident
into a staging stack.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class ReplayStats:
    records: int = 0
    bytes: int = 0
    started_at: float = 0.0  # wall clock (s) when the first record was released
    behind_max_s: float = 0.0  # the most a record went out after it was due (this process kept up?)


def release_at(started_at: float, first_ms: int, record_ms: int, speed: float) -> float:
    """When (wall clock) a record scraped at `record_ms` goes out, the first having been scraped
    at `first_ms` and released at `started_at`."""
    return started_at + (record_ms - first_ms) / 1000.0 / speed


def replay(
    bootstrap: str,
    source: str,
    target: str,
    speed: float = 1.0,
    should_stop: Callable[[], bool] = lambda: False,
    on_start: Callable[[float], None] | None = None,
) -> ReplayStats:
    """Copy partition 0 of `source`, from its beginning to the end it had when this started, to
    `target`, each record when its scrape time (the record's CreateTime) comes round at `speed`
    (1: real time). `on_start(wall clock)` is told when the first record goes out."""
    try:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
    except ImportError as exc:  # an optional dependency (the `bench` extra)
        raise RuntimeError("aiops replay needs confluent-kafka: pip install 'aiops-gpu[bench]'") from exc

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"aiops-replay-{target}",  # never committed: assign() below, no subscription
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 32 << 20,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "aiops-replay",
            "partitioner": "murmur2_random",  # = the Java client's (and kafka-python's) for keyed records
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 2 << 20,  # a 100,000-GPU tick is ~230 MB, released at once
            "queue.buffering.max.messages": 2_000_000,
        }
    )
    failed: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    stats = ReplayStats()
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(source, 0), timeout=30)
        if high <= low:
            raise RuntimeError(f"nothing to replay on {source}")
        consumer.assign([TopicPartition(source, 0, OFFSET_BEGINNING)])
        first_ms: int | None = None
        offset = low
        while offset < high - 1 and not should_stop():
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                _, record_ms = msg.timestamp()
                if first_ms is None:
                    first_ms, stats.started_at = record_ms, time.time()
                    if on_start is not None:
                        on_start(stats.started_at)
                due = release_at(stats.started_at, first_ms, record_ms, speed)
                while (wait := due - time.time()) > 0:
                    producer.poll(min(wait, 0.5))  # serve delivery reports while waiting
                stats.behind_max_s = max(stats.behind_max_s, time.time() - due)
                while True:
                    try:
                        producer.produce(target, value=msg.value(), key=msg.key(), on_delivery=delivered)
                        break
                    except BufferError:  # the local queue is full: let the broker catch up
                        producer.poll(0.1)
                stats.records += 1
                stats.bytes += len(msg.value() or b"")
                offset = msg.offset() or offset
            producer.poll(0)
            if failed:
                raise RuntimeError(f"{len(failed)} records were not delivered to {target}: {failed[0]}")
        while producer.flush(5.0) > 0:
            if should_stop():
                break
        if failed:
            raise RuntimeError(f"{len(failed)} records were not delivered to {target}: {failed[0]}")
    finally:
        consumer.close()
    return stats


__all__ = ["ReplayStats", "release_at", "replay"]
