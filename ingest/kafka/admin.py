"""Topics: create, delete, where they begin and end, what they hold, which cluster they are on."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import BrokerResponseError, KafkaError, TopicAlreadyExistsError

from ingest.kafka.client import KafkaIOError, security

Offsets = dict[str, dict[int, int]]  # topic -> partition -> offset

# Records carry event time, which can be days old in a replay or a backfill; a topic that kept
# data by that time would let time-based retention delete it before anyone consumed it. Topics
# the project creates keep data by the time the broker appended it.
TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime"}


def _admin(bootstrap: str, request_timeout_ms: int = 30_000) -> KafkaAdminClient:
    try:
        return KafkaAdminClient(
            bootstrap_servers=bootstrap, client_id="aiops-admin", request_timeout_ms=request_timeout_ms, **security()
        )
    except KafkaError as exc:
        raise KafkaIOError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc


def _io_error(what: str, exc: KafkaError) -> KafkaIOError:
    """kafka-python's error as the project's: a broker's answer that says it stands (not
    authorised, a bad topic setting) is not retriable; the rest (the broker away, a connection
    dropped mid-request, a controller moving) is."""
    return KafkaIOError(f"{what}: {exc}", retriable=not isinstance(exc, BrokerResponseError) or exc.retriable)


def _reader(bootstrap: str, **options: object) -> KafkaConsumer:
    """A consumer outside any group, for reading offsets and records."""
    try:
        return KafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None, **security(), **options
        )
    except KafkaError as exc:
        raise KafkaIOError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc


def ensure_topics(
    bootstrap: str, topics: Sequence[str], partitions: int = 6, configs: Mapping[str, str] | None = None
) -> None:
    """Create topics that do not exist yet (idempotent), retained by log-append time unless
    `configs` says otherwise (topic configs over TOPIC_CONFIG)."""
    admin = _admin(bootstrap)
    try:
        existing = set(admin.list_topics())
        topic_configs = {**TOPIC_CONFIG, **(configs or {})}
        new = [
            NewTopic(t, num_partitions=partitions, replication_factor=1, topic_configs=topic_configs)
            for t in topics
            if t not in existing
        ]
        if new:
            with contextlib.suppress(TopicAlreadyExistsError):  # created by someone else meanwhile
                admin.create_topics(new)
    except KafkaError as exc:  # a broker going away mid-request (a restart): "socket disconnected"
        raise _io_error(f"cannot create {list(topics)} at {bootstrap}", exc) from exc
    finally:
        admin.close()


def delete_topics(bootstrap: str, topics: Sequence[str]) -> None:
    """Delete topics that exist (a benchmark's scratch topics; the broker frees their disk)."""
    admin = _admin(bootstrap)
    try:
        present = [t for t in topics if t in set(admin.list_topics())]
        if present:
            admin.delete_topics(present)
    except KafkaError as exc:
        raise _io_error(f"cannot delete {list(topics)} at {bootstrap}", exc) from exc
    finally:
        admin.close()


def cluster_and_topic_ids(bootstrap: str, topics: Sequence[str]) -> tuple[str, dict[str, str]]:
    """The cluster's id and each topic's id, as the broker says now (KafkaIOError if it is away)."""
    admin = _admin(bootstrap)
    try:
        cluster = admin.describe_cluster()
        described = admin.describe_topics(list(topics))
    except KafkaError as exc:
        raise KafkaIOError(f"cannot describe the topics at {bootstrap}: {exc}") from exc
    finally:
        admin.close()
    ids = {str(t["name"]): str(t["topic_id"]) for t in described if t.get("topic_id") is not None}
    return str(cluster.get("cluster_id")), ids


def topic_beginnings(bootstrap: str, topics: Sequence[str]) -> Offsets:
    """Each partition's first offset still held, per topic (KafkaIOError if the broker is away)."""
    return _offsets(bootstrap, topics, "begin")


def topic_ends(bootstrap: str, topics: Sequence[str]) -> Offsets:
    """Each partition's end offset, per topic: where the next record will go (KafkaIOError if the
    broker is away)."""
    return _offsets(bootstrap, topics, "end")


def _offsets(bootstrap: str, topics: Sequence[str], where: str) -> Offsets:
    reader = _reader(bootstrap)
    try:
        parts = [TopicPartition(t, p) for t in topics for p in sorted(reader.partitions_for_topic(t) or ())]
        found = reader.beginning_offsets(parts) if where == "begin" else reader.end_offsets(parts)
        out: Offsets = {}
        for tp, offset in found.items():
            out.setdefault(tp.topic, {})[tp.partition] = int(offset)
        return out
    except KafkaError as exc:
        raise KafkaIOError(f"cannot read where {list(topics)} {where}: {exc}") from exc
    finally:
        reader.close()


@dataclass(frozen=True, slots=True)
class Record:
    """One record as the broker holds it (timestamp: ms, the broker's append time on the
    project's topics)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes


def records_since(bootstrap: str, since: Offsets, timeout_s: float = 60.0) -> tuple[list[Record], bool]:
    """The records after `since` (topic -> partition -> offset) up to the ends the broker has now,
    and whether all of them were read within `timeout_s` (KafkaIOError if the broker is away)."""
    parts = [TopicPartition(t, p) for t, ps in since.items() for p in ps]
    if not parts:
        return [], True
    reader = _reader(bootstrap)
    out: list[Record] = []
    try:
        reader.assign(parts)
        ends = reader.end_offsets(parts)
        for tp in parts:
            reader.seek(tp, since[tp.topic][tp.partition])
        deadline = time.monotonic() + timeout_s
        waiting = {tp for tp in parts if reader.position(tp) < ends[tp]}
        while waiting and time.monotonic() < deadline:
            for tp, records in reader.poll(timeout_ms=1000).items():
                out += [_record(tp, r) for r in records if r.offset < ends[tp]]
                if reader.position(tp) >= ends[tp]:
                    waiting.discard(tp)
        return out, not waiting
    except KafkaError as exc:
        raise KafkaIOError(f"cannot read the records since {since}: {exc}") from exc
    finally:
        reader.close()


def _record(tp: TopicPartition, r: object) -> Record:
    return Record(tp.topic, tp.partition, r.offset, r.timestamp, r.key, r.value)  # type: ignore[attr-defined]


def whole_topic(bootstrap: str, topic: str, quiet_s: float = 8.0) -> Iterator[Record]:
    """Every record of a topic from its beginning, until none has come for `quiet_s` (a bench or
    a check reading what a run published)."""
    reader = _reader(bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=int(quiet_s * 1000))
    try:
        parts = [TopicPartition(topic, p) for p in sorted(reader.partitions_for_topic(topic) or ())]
        reader.assign(parts)
        reader.seek_to_beginning(*parts)
        for r in reader:
            yield Record(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value)
    finally:
        reader.close()


def first_records(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[Record]:
    """The first record of each partition that has one, waiting up to `timeout_s` for them."""
    reader = _reader(bootstrap)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(reader.partitions_for_topic(topic) or ())]
        reader.assign(parts)
        reader.seek_to_beginning(*parts)
        firsts: list[Record] = []
        deadline = time.monotonic() + timeout_s
        waiting = set(parts)
        while waiting and time.monotonic() < deadline:
            for tp, records in reader.poll(timeout_ms=500, max_records=len(parts) * 10).items():
                if tp in waiting and records:
                    firsts.append(_record(tp, records[0]))
                    waiting.discard(tp)
                    reader.pause(tp)
        return firsts
    finally:
        reader.close()


def group_lag(bootstrap: str, topic: str, groups: Mapping[str, str]) -> dict[str, int | None]:
    """Per name, the messages on the topic its consumer group has not committed (None where the
    broker could not say)."""
    out: dict[str, int | None] = dict.fromkeys(groups)
    try:
        reader = _reader(bootstrap, request_timeout_ms=5000)
        admin = _admin(bootstrap, request_timeout_ms=5000)
    except KafkaIOError:  # the broker is away
        return out
    try:
        parts = [TopicPartition(topic, p) for p in sorted(reader.partitions_for_topic(topic) or ())]
        ends = reader.end_offsets(parts)
        for name, group in groups.items():
            committed = admin.list_group_offsets(group).get(group, {})  # kafka-python 3's name and shape
            out[name] = sum(int(end) - (committed[tp].offset if tp in committed else 0) for tp, end in ends.items())
    except KafkaError:
        pass
    finally:
        reader.close()
        admin.close()
    return out
