"""A broker that plays a script, for the daemons' rules without Kafka (tests/unit/test_daemons.py).

It keeps what the real one would for the rules under test: the records each output topic holds,
the offsets each group committed, and, per consumer, the partitions assigned and where it stands.
A consumer's script is a list of steps its polls play in order: an assignment (the rebalance
callbacks run inside that poll, as kafka-python runs them), messages, or a failure. What a
consumer does is recorded in `log`, so a test can say in which order things happened.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from ingest.deadletter import Source
from ingest.kafka import KafkaIOError, Offsets, Record, TelemetryConsumer, TelemetryProducer, TopicReader
from ingest.messages import Partition, Polled


@dataclass
class Assign:
    """A rebalance: every partition revoked, then these assigned (kafka-python's eager protocol)."""

    partitions: set[Partition]


@dataclass
class Messages:
    """The next `count` records of a partition the broker holds, from where the consumer stands
    (after a rebalance: the offset the daemon resumed at, or the group's committed offset, as
    kafka-python fetches again from there)."""

    partition: Partition
    count: int


@dataclass
class Fail:
    error: Exception


Step = Assign | Messages | Fail


@dataclass
class FakeBroker:
    topics: dict[str, dict[int, list[Record]]] = field(default_factory=dict)
    committed: dict[str, dict[Partition, int]] = field(default_factory=dict)  # per group
    log: list[str] = field(default_factory=list)
    ends_fail: int = 0  # the next calls of ends() that find the broker away
    scripts: list[list[Step]] = field(default_factory=list)  # one per consumer made, in order
    consumers: list[FakeConsumer] = field(default_factory=list)
    on_commit: Callable[[dict[Partition, int]], None] | None = None  # told each commit as it happens

    def ensure_topics(self, topics: Sequence[str], partitions: int = 6) -> None:
        for t in topics:
            self.topics.setdefault(t, {p: [] for p in range(partitions)})

    def incarnation(self, topics: Sequence[str]) -> tuple[str, dict[str, str]]:
        return "fake-cluster", {t: f"id-{t}" for t in topics}

    def ends(self, topics: Sequence[str]) -> Offsets:
        if self.ends_fail:
            self.ends_fail -= 1
            self.log.append("ends failed")
            raise KafkaIOError("the broker is away")
        return {t: {p: len(rs) for p, rs in self.topics.get(t, {}).items()} for t in topics}

    def beginnings(self, topics: Sequence[str]) -> Offsets:
        return {t: dict.fromkeys(self.topics.get(t, {}), 0) for t in topics}

    def records_since(self, since: Offsets) -> tuple[list[Record], bool]:
        out = [r for t, parts in since.items() for p, o in parts.items() for r in self.topics.get(t, {}).get(p, [])[o:]]
        return out, True

    def producer(self, client_id: str) -> TelemetryProducer:
        return FakeProducer(self)

    def consumer(
        self,
        topics: Sequence[str],
        group: str,
        on_revoked: Callable[[set[Partition]], None],
        on_assigned: Callable[[set[Partition]], Mapping[Partition, int]],
        one_active: bool = False,
        sticky: bool = False,
    ) -> TelemetryConsumer:
        script = self.scripts[len(self.consumers)] if len(self.consumers) < len(self.scripts) else []
        consumer = FakeConsumer(self, group, list(script), on_revoked, on_assigned)
        self.consumers.append(consumer)
        return consumer

    def reader(self, topic: str, client_id: str) -> TopicReader:
        return FakeReader(self, topic)

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes, timestamp_ms: int = 0) -> None:
        records = self.topics.setdefault(topic, {}).setdefault(partition, [])
        records.append(Record(topic, partition, len(records), timestamp_ms, key, value))


class FakeProducer(TelemetryProducer):
    def __init__(self, broker: FakeBroker) -> None:  # no client: nothing to connect
        self.broker = broker
        self.failed = 0
        self.already_published = None

    def send_raw(self, topic: str, value: bytes, key: bytes | None = None, partition: int | None = None) -> None:
        if self.already_published is not None and self.already_published(topic, key, value):
            return
        self.broker.append(topic, partition or 0, key, value)

    def flush(self, timeout_s: float = 60.0, should_stop: Callable[[], bool] | None = None) -> None:
        return None

    def close(self) -> None:
        return None


class FakeConsumer(TelemetryConsumer):
    def __init__(
        self,
        broker: FakeBroker,
        group: str,
        script: list[Step],
        on_revoked: Callable[[set[Partition]], None],
        on_assigned: Callable[[set[Partition]], Mapping[Partition, int]],
    ) -> None:  # no client: the script is the broker
        self.broker, self.group, self.script = broker, group, script
        self.on_revoked_cb, self.on_assigned_cb = on_revoked, on_assigned
        self._next: dict[Partition, int] = {}
        self._given: set[Partition] = set()
        self.poll_timeout_ms = 0
        self.closed = False

    # ---------------------------------------------------------------- the script

    def poll(self) -> Polled:
        """The next step that brings records; a rebalance runs inside the poll that brings the
        step after it (as kafka-python hands an assignment over within a poll that may fetch at
        once). Empty once the script is played: then the daemon's idle rules apply."""
        while self.script:
            step = self.script.pop(0)
            if isinstance(step, Assign):
                self._rebalance(step)
                continue
            if isinstance(step, Fail):
                raise step.error
            topic, partition = step.partition
            first = self._next.get(step.partition, 0)
            records = self.broker.topics.get(topic, {}).get(partition, [])[first : first + step.count]
            self._next[step.partition] = first + len(records)
            if records:  # a partition read to its end brings nothing: the step after it, in the same poll
                return [(Source(topic, partition, r.offset), r.timestamp_ms, r.value) for r in records]
        return []

    def _rebalance(self, step: Assign) -> None:
        self.on_revoked_cb(set(self._given))
        self._next = {}
        self._given = set(step.partitions)
        resume = self.on_assigned_cb(set(step.partitions))
        committed = self.broker.committed.get(self.group, {})
        for p in step.partitions:
            at = resume.get(p, committed.get(p))
            if at is not None:
                self._next[p] = at
        self.broker.log.append(f"assigned {sorted(step.partitions)} resume {sorted(resume.items())}")

    # ---------------------------------------------------------------- what the daemons ask

    @property
    def assigned(self) -> bool:
        return bool(self._given)

    @property
    def standing_by(self) -> bool:
        return False

    @property
    def holding_back(self) -> bool:
        return False

    def caught_up(self, timeout_s: float = 2.0, held_back_taken: bool = False) -> bool:
        return not self.script

    def rejoin(self, should_stop: Callable[[], bool]) -> bool:
        return not should_stop()

    def backlogged(self) -> set[Partition]:
        """Partitions the broker holds records for that this member has not taken."""
        return {p for p in self._given if self._next.get(p, 0) < len(self.broker.topics.get(p[0], {}).get(p[1], []))}

    def hold_back(self, partitions: AbstractSet[Partition]) -> None:
        return None

    def lag(self) -> int:
        return 0

    def positions(self) -> dict[Partition, int]:
        return dict(self._next)

    def committed(self, partitions: AbstractSet[Partition]) -> dict[Partition, int | None]:
        mine = self.broker.committed.get(self.group, {})
        return {p: mine.get(p) for p in partitions}

    def ends_of(self, topics: AbstractSet[str]) -> dict[Partition, int]:
        ends = self.broker.ends(sorted(topics))
        return {(t, p): o for t, parts in ends.items() for p, o in parts.items()}

    def reached(self, ends: Mapping[Partition, int]) -> bool:
        return all(self._next.get(p, 0) >= o for p, o in ends.items())

    def partitions_of(self, topic: str) -> set[int]:
        return {p for t, p in self._given if t == topic}

    def commit(self, held: Mapping[Partition, int] | None = None, only: AbstractSet[Partition] | None = None) -> bool:
        done = {p: o for p, o in self.done(held).items() if only is None or p in only}
        if self.broker.on_commit is not None:
            self.broker.on_commit(done)
        self.broker.committed.setdefault(self.group, {}).update(done)
        self.broker.log.append(f"commit {sorted(done.items())}")
        return True

    def done(self, held: Mapping[Partition, int] | None = None) -> dict[Partition, int]:
        held = held or {}
        return {p: min(after, held.get(p, after)) for p, after in self._next.items()}

    def close(self) -> None:
        self.closed = True


class FakeReader(TopicReader):
    def __init__(self, broker: FakeBroker, topic: str) -> None:  # no client
        self.broker, self.topic = broker, topic

    def read_new(
        self, since: Mapping[int, int], wait_s: float = 2.0
    ) -> tuple[list[tuple[int, int, bytes]], dict[int, int]]:
        parts = self.broker.topics.get(self.topic, {})
        out = [(p, r.offset, r.value) for p, rs in parts.items() for r in rs[since.get(p, 0) :]]
        return out, {p: len(rs) for p, rs in parts.items()}

    def ends(self) -> dict[int, int]:
        return {p: len(rs) for p, rs in self.broker.topics.get(self.topic, {}).items()}

    def close(self) -> None:
        return None
