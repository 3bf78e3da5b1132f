"""Telemetry through the real Kafka broker: frames survive, bad lines are dead-lettered with their
reason, and a consumer group member that stops mid-stream loses nothing."""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Sequence

import pytest
from kafka import KafkaConsumer

from ingest.consume import consume
from ingest.deadletter import DeadLetter
from ingest.frames import Frame, concat, frame_differences
from ingest.kafka import KafkaDeadLetterSink, TelemetryConsumer, TelemetryProducer, ensure_topics
from ingest.lineprotocol import decode
from ingest.messages import Partition, messages_from_lines
from ingest.pipeline import Batch, IngestCore, MemoryFrameSink
from tests.conftest import SAMPLE_LP
from vocab.catalog import measurement
from vocab.settings import KafkaSettings

pytestmark = pytest.mark.services

BAD_MARKER = b"# the lines below are the bad input"


def _sample(good_only: bool) -> bytes:
    data = SAMPLE_LP.read_bytes()
    return data[: data.index(BAD_MARKER)] if good_only else data


def _produce(kafka: KafkaSettings, data: bytes, partitions: int = 3) -> int:
    ensure_topics(kafka.bootstrap, [kafka.telemetry_topic, kafka.deadletter_topic], partitions=partitions)
    producer = TelemetryProducer(kafka.bootstrap)
    sent = producer.send(kafka.telemetry_topic, messages_from_lines(data))
    producer.flush()
    producer.close()
    return sent


def _merge(batches: list[dict[str, Frame]]) -> dict[str, Frame]:
    parts: dict[str, list[Frame]] = defaultdict(list)
    for batch in batches:
        for name, frame in batch.items():
            parts[name].append(frame)
    return {name: concat(frames) for name, frames in parts.items()}


def _read_topic(bootstrap: str, topic: str, expect: int) -> list[tuple[bytes | None, bytes, int]]:
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000)
    out = [(m.key, m.value, m.partition) for m in consumer]
    consumer.close()
    assert len(out) >= expect
    return out


def test_lines_produced_come_back_as_identical_frames(kafka_settings: KafkaSettings) -> None:
    data = _sample(good_only=True)
    expected = decode(data).frames
    _produce(kafka_settings, data)
    sink = MemoryFrameSink()
    letters: list[DeadLetter] = []

    class Letters:
        def add(self, new: Sequence[DeadLetter]) -> None:
            letters.extend(new)

        def flush(self, should_stop: object = None) -> None:
            pass

    consumer = TelemetryConsumer(kafka_settings)
    try:
        consume(consumer, IngestCore(), sink, Letters(), should_stop=lambda: False, idle_stop_s=8)
    finally:
        consumer.close()
    assert letters == []
    assert frame_differences(expected, _merge(sink.batches)) == []


def test_messages_are_keyed_by_node_or_switch_and_each_key_stays_on_one_partition(
    kafka_settings: KafkaSettings,
) -> None:
    _produce(kafka_settings, _sample(good_only=True))
    partitions: dict[bytes, set[int]] = defaultdict(set)
    for key, value, partition in _read_topic(kafka_settings.bootstrap, kafka_settings.telemetry_topic, 1):
        assert key is not None
        partitions[key].add(partition)
        frames = decode(value).frames
        for name, frame in frames.items():
            tag = {"switch": "switch", "switch_port": "switch", "cooling": "rack"}.get(name, "node")
            assert set(frame.tag(tag)) == {key.decode()}, name
    assert {k.decode() for k in partitions} >= {"n00000", "n00001", "leaf-p0-r0", "rack0000"}
    assert all(len(p) == 1 for p in partitions.values())
    assert len(set().union(*partitions.values())) > 1  # keys really spread over partitions


def test_malformed_lines_are_dead_lettered_with_reason_and_valid_lines_kept(kafka_settings: KafkaSettings) -> None:
    good = decode(_sample(good_only=True)).frames
    _produce(kafka_settings, _sample(good_only=False))
    producer = TelemetryProducer(kafka_settings.bootstrap)
    sink = MemoryFrameSink()
    consumer = TelemetryConsumer(kafka_settings)
    core = IngestCore()
    try:
        consume(consumer, core, sink, KafkaDeadLetterSink(producer, kafka_settings.deadletter_topic), lambda: False, 8)
    finally:
        consumer.close()
        producer.close()
    received = _merge(sink.batches)
    # every valid line arrived; the sentinel-only line is kept as a row with its value masked
    gpu = received["gpu"]
    assert len(gpu) == len(good["gpu"]) + 1
    assert (
        frame_differences(
            {k: v for k, v in good.items() if k != "gpu"}, {k: v for k, v in received.items() if k != "gpu"}
        )
        == []
    )
    letters = [
        DeadLetter.from_json(v) for _, v, _ in _read_topic(kafka_settings.bootstrap, kafka_settings.deadletter_topic, 5)
    ]
    reasons = sorted(letter.reason.split(" at column")[0] for letter in letters)
    assert reasons[:2] == [
        "invalid value 'hot' for field 'DCGM_FI_DEV_GPU_TEMP'",
        "missing field separator after key '1767225900000000000'",
    ]
    # two days behind the stream; how far exactly depends on the partition read first
    assert reasons[2].startswith("outside the lateness bound: ") and "behind the stream's event time" in reasons[2]
    assert reasons[3:] == ["timestamp out of int64 range", "unknown measurement 'mystery_device'"]
    for letter in letters:  # each points at the message that carried it
        assert letter.source is not None
        assert letter.source.topic == kafka_settings.telemetry_topic
        assert letter.line in _sample(good_only=False)
    assert core.stats.deadlettered == 5
    assert core.stats.sentinels_masked == 1


def test_consumer_stopped_mid_stream_and_restarted_in_the_same_group_loses_nothing(
    kafka_settings: KafkaSettings,
) -> None:
    data = _sample(good_only=True)
    expected = decode(data).frames
    _produce(kafka_settings, data, partitions=3)
    small = kafka_settings.model_copy(update={"max_poll_records": 40})
    seen = MemoryFrameSink()

    class Discard:
        def add(self, new: Sequence[DeadLetter]) -> None:
            assert list(new) == []

        def flush(self, should_stop: object = None) -> None:
            pass

    # First member: processes and commits three batches, then is stopped.
    first = TelemetryConsumer(small)
    batches = {"n": 0}

    def stop_after_three() -> bool:
        return batches["n"] >= 3

    def count(_: dict[str, object]) -> None:
        batches["n"] += 1

    consume(first, IngestCore(), seen, Discard(), stop_after_three, on_batch=count)
    first.close()
    committed_rows = sum(len(f) for b in seen.batches for f in b.values())
    assert 0 < committed_rows < sum(len(f) for f in expected.values())

    # Second member crashes: it polls a batch and dies before committing.
    crashed = TelemetryConsumer(small)
    polled: list[object] = []
    for _ in range(20):
        polled = list(crashed.poll())
        if polled:
            break
    assert polled, "the crashed member never got a batch"
    crashed._consumer.close(autocommit=False)

    # Third member finishes the stream; what the crashed member held is delivered again.
    rest = MemoryFrameSink()
    last = TelemetryConsumer(small)
    consume(last, IngestCore(), rest, Discard(), lambda: False, idle_stop_s=8)
    last.close()

    merged = _merge(seen.batches + rest.batches)
    for name, frame in merged.items():  # at-least-once: no duplicates expected without a crash of a committed batch
        spec = measurement(name)
        assert spec is not None
        key = frame.tag(spec.id_tag)
        pairs = set(zip(key.tolist(), frame.time_ns.tolist(), strict=True))
        assert len(pairs) == len(frame), f"{name}: rows delivered twice although every batch was committed"
    assert frame_differences(expected, merged) == []


def test_dead_letter_payload_is_json_with_stage_reason_line_and_source() -> None:
    body = json.loads(DeadLetter("decode", "bad", b"x y", None).to_json())
    assert body == {"stage": "decode", "reason": "bad", "line": "x y"}


def test_an_internal_error_dead_letters_the_batch_and_the_consumer_goes_on(kafka_settings: KafkaSettings) -> None:
    _produce(kafka_settings, _sample(good_only=True)[:2000].rsplit(b"\n", 1)[0] + b"\n")

    class Broken(IngestCore):
        def process(self, *args: object, **kwargs: object) -> Batch:
            raise RuntimeError("simulated bug")

    producer = TelemetryProducer(kafka_settings.bootstrap)
    consumer = TelemetryConsumer(kafka_settings)
    core = Broken()
    try:
        consume(
            consumer,
            core,
            MemoryFrameSink(),
            KafkaDeadLetterSink(producer, kafka_settings.deadletter_topic),
            lambda: False,
            3,
        )
    finally:
        consumer.close()
        producer.close()
    letters = [
        DeadLetter.from_json(v) for _, v, _ in _read_topic(kafka_settings.bootstrap, kafka_settings.deadletter_topic, 1)
    ]
    assert {letter.stage for letter in letters} == {"internal"}
    assert all("simulated bug" in letter.reason and letter.source is not None for letter in letters)
    assert core.stats.deadlettered == len(letters)
    # committed: a new member of the group finds nothing left to read
    again = TelemetryConsumer(kafka_settings)
    try:
        assert not any(again.poll() for _ in range(5))
    finally:
        again.close()


def test_topics_keep_old_event_time_by_append_time(kafka_settings: KafkaSettings) -> None:
    """A replay of last year's telemetry is not deleted by time-based retention: the project's
    topics stamp records with the broker's append time, and the event time is read from the
    lines themselves."""
    import time

    from ingest.messages import event_time_ms

    a_year_ago_ns = time.time_ns() - 365 * 86_400 * 10**9
    line = f"gpu,cluster=c,node=n1,gpu=n1-gpu0 DCGM_FI_DEV_GPU_TEMP=40 {a_year_ago_ns}".encode()
    sent = _produce(kafka_settings, line, partitions=1)
    assert sent == 1
    records = _read_topic(kafka_settings.bootstrap, kafka_settings.telemetry_topic, expect=1)
    consumer = KafkaConsumer(
        kafka_settings.telemetry_topic,
        bootstrap_servers=kafka_settings.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    stamps = [m.timestamp for m in consumer]
    consumer.close()
    assert len(records) == len(stamps) == 1
    assert abs(stamps[0] - time.time() * 1000) < 600_000  # appended now, not a year ago
    assert event_time_ms(records[0][1], stamps[0]) == a_year_ago_ns // 1_000_000


def test_a_partition_held_back_does_not_keep_the_input_from_going_quiet(kafka_settings: KafkaSettings) -> None:
    """Split detection holds back a partition far ahead of the others; when the others wait on a
    tick that only the input's quiet lets go (the last tick of a replay), the held-back records
    must not count as input still to come for letting held ticks go, or the quiet never comes and
    the member waits forever; they still count for stopping, since they are not done."""
    topic = kafka_settings.telemetry_topic
    ensure_topics(kafka_settings.bootstrap, [topic], partitions=2)
    producer = TelemetryProducer(kafka_settings.bootstrap)

    def send(partition: int, n: int) -> None:
        for i in range(n):
            producer.send_raw(topic, f"m{partition}-{i}".encode(), partition=partition)
        producer.flush()

    send(0, 5)
    consumer = TelemetryConsumer(kafka_settings)
    try:
        taken = {0: 0, 1: 0}
        for _ in range(100):
            for where, _, _ in consumer.poll():
                taken[where.partition] += 1
            if consumer.assigned and taken[0] == 5:
                break
        assert taken == {0: 5, 1: 0}
        consumer.hold_back({(topic, 1)})
        send(1, 3)  # arrives while it is held back
        assert consumer.caught_up(held_back_taken=True)  # nothing more will come while it is held back
        assert not consumer.caught_up()  # yet it is not idle: there is more to take
        consumer.hold_back(set())
        assert not consumer.caught_up()  # released: it has records to take
        for _ in range(100):
            for where, _, _ in consumer.poll():
                taken[where.partition] += 1
            if taken[1] == 3:
                break
        assert taken == {0: 5, 1: 3} and consumer.caught_up()
    finally:
        consumer.close()
        producer.close()


def test_a_partition_held_back_through_a_rebalance_it_stays_with_is_let_go(kafka_settings: KafkaSettings) -> None:
    """kafka-python keeps a partition's paused flag through a rebalance that leaves it with the
    same member, while the listener hears every partition revoked: a member that forgot it held
    the partition back would never resume it, and split detection waited for its shares forever
    (the three-member SIGKILL test hung now and then under load)."""
    topic = kafka_settings.telemetry_topic
    ensure_topics(kafka_settings.bootstrap, [topic], partitions=1)
    producer = TelemetryProducer(kafka_settings.bootstrap)
    rebalances: list[set[Partition]] = []

    def heard(partitions: set[Partition]) -> dict[Partition, int]:
        rebalances.append(partitions)
        return {}

    first = TelemetryConsumer(kafka_settings, sticky=True, on_assigned=heard)
    stop = threading.Event()
    second: list[TelemetryConsumer] = []

    def join_and_poll() -> None:  # the newcomer's rebalance: the sticky assignor leaves the partition where it is
        second.append(TelemetryConsumer(kafka_settings, sticky=True))
        while not stop.is_set():
            assert second[0].poll() == []

    newcomer = threading.Thread(target=join_and_poll, daemon=True)
    try:
        for _ in range(100):
            first.poll()
            if first.assigned:
                break
        first.hold_back({(topic, 0)})
        before = len(rebalances)
        newcomer.start()
        for _ in range(200):
            first.poll()
            if len(rebalances) > before:
                break
        assert rebalances[-1] == {(topic, 0)}  # it stayed with the first member, held back
        for i in range(3):
            producer.send_raw(topic, f"m{i}".encode(), partition=0)
        producer.flush()
        first.hold_back(set())  # no longer far ahead
        taken = []
        for _ in range(100):
            taken += first.poll()
            if len(taken) == 3:
                break
        assert [value for _, _, value in taken] == [b"m0", b"m1", b"m2"]
    finally:
        stop.set()
        newcomer.join(timeout=30)
        for consumer in (first, *second):
            consumer.close()
        producer.close()


def test_a_partition_resumed_at_a_checkpoint_has_its_position_before_it_delivers(
    kafka_settings: KafkaSettings,
) -> None:
    """A member that resumes a partition at its checkpoint's offset and gets nothing more from it
    before the next rebalance must still know where it stands: its loop is handed on (or saved)
    with that position, and its commit says it, instead of the partition looking never read."""
    topic = kafka_settings.telemetry_topic
    ensure_topics(kafka_settings.bootstrap, [topic], partitions=1)
    producer = TelemetryProducer(kafka_settings.bootstrap)
    for i in range(5):
        producer.send_raw(topic, f"m{i}".encode(), partition=0)
    producer.flush()
    producer.close()
    consumer = TelemetryConsumer(kafka_settings, start_at={(topic, 0): 5})  # the checkpoint had all five
    try:
        delivered = []
        for _ in range(30):
            delivered += consumer.poll()
            if consumer.assigned:
                break
        assert consumer.assigned and delivered == []
        assert consumer.positions() == {(topic, 0): 5}
        assert consumer.done() == {(topic, 0): 5}
    finally:
        consumer.close()
