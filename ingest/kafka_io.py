"""Kafka edges: publish telemetry, consume it at least once, dead-letter what cannot be used.

Messages carry line protocol, one or more lines each (Telegraf writes one; we group the lines of
one node or switch at one tick, which keeps per-entity order and cuts per-message overhead). The
key is the node or switch id, so all of a node's telemetry lands on one partition in order.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
import pandas as pd
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.coordinator.assignors.abstract import (
    AbstractPartitionAssignor,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.errors import KafkaError, KafkaTimeoutError, TopicAlreadyExistsError
from kafka.structs import OffsetAndMetadata
from numpy.typing import NDArray

from ingest.deadletter import DeadLetter, Source
from ingest.lineprotocol import MAX_RECORD_BYTES, decode
from ingest.pipeline import Batch, DeadLetterSink, FrameSink, IngestCore, SinkUnavailableError, WindowedSink
from vocab.catalog import measurement
from vocab.settings import KafkaSettings

log = logging.getLogger(__name__)
T = TypeVar("T")

# The most bytes one message may take, both ways: what our producer may send (its request size)
# and what the consumer decodes. Kafka's own default is 1 MiB and our producer groups at most 1 MiB
# of lines per message (messages_from_lines); 8 MiB leaves room for a site whose Telegraf sends
# bigger batches. A message over it is dead-lettered whole, unread: the poll's joined buffer, and
# the work on it, stay bounded whatever one sender does.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
JOIN_TIMEOUT_S = 20.0  # a first group join normally takes a few seconds
MAX_REJOINS = 3  # when running until idle (tests, batch jobs); a daemon keeps trying
QUIET_CHECK_S = 5.0  # how often a quiet input is confirmed with the broker (one small request)
ENDS_EVERY_S = 2.0  # how often end offsets are asked for partitions no fetch has answered yet


class KafkaIOError(RuntimeError):
    """Kafka could not be reached or refused a request."""


# Records carry event time, which can be days old in a replay or a backfill; a topic that kept
# data by that time would let time-based retention delete it before anyone consumed it. Topics
# the project creates keep data by the time the broker appended it.
TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime"}


def until_reachable(connect: Callable[[], T], should_stop: Callable[[], bool]) -> T:
    """`connect()`, again and again while the broker is away (a daemon started during a broker
    restart waits for it instead of exiting), with backoff up to 30 s. KafkaIOError if asked to
    stop first."""
    delay = 1.0
    while True:
        try:
            return connect()
        except KafkaIOError as exc:
            if should_stop():
                raise
            log.warning("%s; trying again in %.0f s", exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 30.0)


def security() -> dict[str, object]:
    """The broker's TLS settings for a client (AIOPS_KAFKA__SECURITY_PROTOCOL and the ssl_* files,
    vocab/settings.py), read from the environment as every other setting; none for PLAINTEXT."""
    from vocab.settings import Settings

    return Settings().kafka.client_security()


def ensure_topics(
    bootstrap: str, topics: Sequence[str], partitions: int = 6, configs: Mapping[str, str] | None = None
) -> None:
    """Create topics that do not exist yet (idempotent), retained by log-append time unless
    `configs` says otherwise (topic configs over TOPIC_CONFIG)."""
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap, client_id="aiops-admin", request_timeout_ms=30_000, **security()
        )
    except KafkaError as exc:
        raise KafkaIOError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
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
    finally:
        admin.close()


def delete_topics(bootstrap: str, topics: Sequence[str]) -> None:
    """Delete topics that exist (a benchmark's scratch topics; the broker frees their disk)."""
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap, client_id="aiops-admin", request_timeout_ms=30_000, **security()
    )
    try:
        present = [t for t in topics if t in set(admin.list_topics())]
        if present:
            admin.delete_topics(present)
    finally:
        admin.close()


# ---------------------------------------------------------------- producing


@dataclass(frozen=True, slots=True)
class Message:
    key: bytes | None
    value: bytes
    timestamp_ms: int | None


def messages_from_lines(data: bytes, max_bytes: int = 1 << 20) -> Iterator[Message]:
    """Group a line-protocol file into messages: one per (partition key, timestamp), in file order.

    Lines whose key cannot be told (unknown measurement, not valid line protocol) are still sent,
    alone and without a key, so the consumer can dead-letter them with the reason.
    """
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    decoded = decode(data)
    n = len(lines)
    keys = np.full(n, "", dtype=object)
    stamps = np.full(n, -1, dtype=np.int64)
    for name, frame in decoded.frames.items():
        spec = measurement(name)
        rows = decoded.line_no[name]
        stamps[rows] = frame.time_ns
        if spec is not None:
            keys[rows] = frame.tag(spec.partition_tag)
    group = _runs_per_key(keys, stamps)
    order = np.argsort(group, kind="stable")
    bounds = np.flatnonzero(np.diff(group[order])) + 1
    for members in np.split(order, bounds):
        first = int(members[0])
        key = str(keys[first])
        chunk: list[bytes] = []
        size = 0
        for i in members.tolist():
            line = lines[i]
            if not line.strip() or line.startswith(b"#"):
                continue
            if not key:  # unkeyed lines travel one per message
                yield Message(None, line, None)
                continue
            if chunk and size + len(line) > max_bytes:
                yield Message(key.encode(), b"\n".join(chunk), int(stamps[first] // 1_000_000))
                chunk, size = [], 0
            chunk.append(line)
            size += len(line) + 1
        if chunk:
            yield Message(key.encode(), b"\n".join(chunk), int(stamps[first] // 1_000_000))


def _runs_per_key(keys: NDArray[np.object_], stamps: NDArray[np.int64]) -> NDArray[np.int64]:
    """Group ids for lines: one group per run of equal timestamps within each key's own lines,
    numbered in order of first appearance. A line that comes back to an old timestamp later in
    the file starts a new group, so grouping never moves a line ahead of its key's later lines."""
    key_code, _ = pd.factorize(keys)
    order = np.argsort(key_code, kind="stable")
    k, t = key_code[order], stamps[order]
    new_run = np.ones(len(order), dtype=np.bool_)
    new_run[1:] = (k[1:] != k[:-1]) | (t[1:] != t[:-1])
    run = np.empty(len(order), dtype=np.int64)
    run[order] = np.cumsum(new_run)
    group, _ = pd.factorize(run)
    return np.asarray(group, dtype=np.int64)


# How long a record may wait for a broker that is away before the producer gives it up. Outages
# of minutes (a broker restart, a rolling upgrade) must lose nothing; past an hour something
# else is wrong, and a record that failed stops the daemon before it commits (see flush).
OUTAGE_TOLERANCE_MS = 3_600_000
# Reconnect attempts back off exponentially, by default up to 30 s: a broker back after a restart
# would go unnoticed for up to half a minute. One attempt every 2 s at most costs nothing.
RECONNECT_BACKOFF_MAX_MS = 2_000


class TelemetryProducer:
    def __init__(self, bootstrap: str, client_id: str = "aiops-producer") -> None:
        self.failed = 0  # records the broker never took (after OUTAGE_TOLERANCE_MS)
        # (topic, key, value) -> True for a record already on its topic: a daemon replaying from
        # its checkpoint skips what it published before a crash (aiops.checkpoint.PublishedSince)
        self.already_published: Callable[[str, bytes | None, bytes], bool] | None = None
        try:
            self._producer = KafkaProducer(
                bootstrap_servers=bootstrap,
                client_id=client_id,
                **security(),
                acks="all",
                linger_ms=20,
                batch_size=1 << 20,
                max_request_size=MAX_MESSAGE_BYTES,
                delivery_timeout_ms=OUTAGE_TOLERANCE_MS,
                reconnect_backoff_max_ms=RECONNECT_BACKOFF_MAX_MS,
                max_block_ms=OUTAGE_TOLERANCE_MS,  # a full buffer waits for the broker: backpressure
            )
        except KafkaError as exc:
            raise KafkaIOError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc

    def _failed(self, exc: BaseException) -> None:
        self.failed += 1
        if self.failed == 1:
            log.error("a record was not delivered: %s", exc)

    def send(self, topic: str, messages: Iterator[Message] | Sequence[Message]) -> int:
        count = 0
        for m in messages:
            self._producer.send(topic, key=m.key, value=m.value, timestamp_ms=m.timestamp_ms).add_errback(self._failed)
            count += 1
        return count

    def send_raw(self, topic: str, value: bytes, key: bytes | None = None, partition: int | None = None) -> None:
        if self.already_published is not None and self.already_published(topic, key, value):
            return
        self._producer.send(topic, key=key, value=value, partition=partition).add_errback(self._failed)

    def flush(self, timeout_s: float = 60.0, should_stop: Callable[[], bool] | None = None) -> None:
        """Wait until the broker has everything sent so far. With `should_stop`, a broker that
        is away is waited for (logged every `timeout_s`) until it is back or the daemon is asked
        to stop (KafkaIOError: the caller must not commit). A record the broker never took
        raises KafkaIOError too: committing past it would lose it."""
        while True:
            try:
                self._producer.flush(timeout=timeout_s)
                break
            except KafkaTimeoutError:
                if should_stop is None or should_stop():
                    raise KafkaIOError(f"Kafka took nothing for {timeout_s:.0f} s; not committed") from None
                log.warning("Kafka has not taken what was sent for %.0f s; waiting for the broker", timeout_s)
        if self.failed:
            raise KafkaIOError(f"{self.failed} records were not delivered; not committed (they will be produced again)")

    def close(self) -> None:
        self._producer.close()


class KafkaDeadLetterSink:
    """Dead letters to a topic as JSON (stage, reason, the line, where it came from)."""

    def __init__(self, producer: TelemetryProducer, topic: str) -> None:
        self._producer = producer
        self._topic = topic

    def add(self, letters: Sequence[DeadLetter]) -> None:
        for letter in letters:
            self._producer.send_raw(self._topic, letter.to_json(), key=letter.category.encode())

    def flush(self, should_stop: Callable[[], bool] | None = None) -> None:
        self._producer.flush(should_stop=should_stop)


# ---------------------------------------------------------------- consuming


Partition = tuple[str, int]  # (topic, partition)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: TelemetryConsumer) -> None:
        self._owner = owner

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self._owner._revoked({(tp.topic, tp.partition) for tp in revoked})

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._owner._assigned(assigned)


STANDBY = b"standby"


class OneActiveAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """Every partition to one member of the group, the others stand by: for a stage whose state
    spans partitions (the root-cause engine compares and walks the whole fleet, peer cohorts
    cross nodes), two members splitting the partitions would be two half-blind engines. The
    oldest member gets them: the one holding them keeps them when others join (a newcomer is
    always younger), and when it leaves or dies the longest-waiting standby takes them all (and
    restores the checkpoint: state moves with them). Each member puts its start time in its join
    metadata; the others are told to stand by in their assignment's user data (an empty
    assignment alone may also mean the topic's partitions were not known yet)."""

    name = "aiops-one-active"
    version = 0

    def __init__(self) -> None:
        self.started_ns = time.time_ns()
        self.standby = False  # another member holds the partitions
        self.generation = -1  # of the last assignment received; -1 before the first

    def metadata(self, topics: set[str]) -> ConsumerProtocolSubscription:
        return ConsumerProtocolSubscription(self.version, sorted(topics), str(self.started_ns).encode())

    def assign(self, cluster: Any, members: list[Any]) -> dict[str, ConsumerProtocolAssignment]:
        def seniority(member: Any) -> tuple[int, str]:
            started = bytes(member.metadata.user_data or b"").decode()
            return (int(started) if started.isdigit() else 0, str(member.member_id))

        chosen = min(members, key=seniority)
        topics = sorted({t for m in members for t in m.metadata.topics})
        everything = [(t, sorted(cluster.partitions_for_topic(t) or ())) for t in topics]
        return {
            m.member_id: ConsumerProtocolAssignment(self.version, everything, b"")
            if m is chosen
            else ConsumerProtocolAssignment(self.version, [], STANDBY)
            for m in members
        }

    def on_assignment(self, assignment: ConsumerProtocolAssignment, generation: int) -> None:
        # told to stand by, as opposed to chosen while the topic's partitions were not yet known
        self.standby = assignment.user_data == STANDBY
        self.generation = generation


class TelemetryConsumer:
    """A consumer-group member that commits only what was fully processed."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str | Sequence[str] | None = None,
        group: str | None = None,
        on_revoked: Callable[[set[Partition]], None] | None = None,
        start_at: Mapping[Partition, int] | None = None,
        on_assigned: Callable[[set[Partition]], Mapping[Partition, int]] | None = None,
        one_active: bool = False,
        sticky: bool = False,
    ) -> None:
        """`topic`: what it reads (default the telemetry), or several topics (the root-cause
        daemon reads the findings of split detection). `start_at`: where to read from on the
        first assignment (a checkpoint's offsets), instead
        of the group's committed offsets. `on_assigned`: called with partitions this member gets,
        returns where to read them from (a checkpoint loaded then). `one_active`: all partitions
        to one member of the group, the others stand by (OneActiveAssignor). `sticky`: a
        rebalance moves as few partitions as it can (each move costs its new owner a checkpoint
        load), Kafka's StickyPartitionAssignor."""
        self._topics = [topic or settings.telemetry_topic] if isinstance(topic, str | None) else list(topic)
        self._group = group or settings.ingest_group
        self._settings = settings
        # how long a poll waits for records; a caller waiting on something else (split detection,
        # on the other members' shares) lowers it meanwhile
        self.poll_timeout_ms = settings.poll_timeout_ms
        self._on_revoked = on_revoked
        self._next: dict[Partition, int] = {}  # per partition, the offset after the last one consumed
        self._ends: dict[Partition, int] = {}  # end offsets asked for partitions no fetch answered yet
        self._ends_asked = -float("inf")
        self._held_back: set[Partition] = set()  # paused by hold_back: far ahead of the others
        self._start_at = dict(start_at or {})
        self._on_assigned = on_assigned
        self._assignor = OneActiveAssignor() if one_active else None
        self._sticky = sticky
        self._last_poll_error = -float("inf")
        self._consumer = self._connect()

    def _revoked(self, partitions: set[Partition]) -> None:
        """A rebalance took partitions away: their offsets are the new owner's to commit. The
        callback is told first, while `positions()` still says where this member stood."""
        if self._on_revoked is not None:
            self._on_revoked(partitions)
        for p in partitions:
            self._next.pop(p, None)
            self._ends.pop(p, None)
        # `_held_back` is left alone: kafka-python tells the listener every partition is revoked
        # (an eager rebalance) yet keeps the paused flag of each one the member is handed back;
        # forgetting it here left such a partition paused for good (`_assigned` trims the set)

    def _assigned(self, partitions: set[TopicPartition]) -> None:
        # the whole new assignment (eager): a partition held back and handed back is still paused;
        # one given away comes back, if ever, with fresh unpaused state
        given = {(tp.topic, tp.partition) for tp in partitions}
        self._held_back &= given
        if self._on_assigned is not None:  # also with nothing: a one-active member now stands by
            self._start_at.update(self._on_assigned(given))
        for tp in partitions:
            offset = self._start_at.pop((tp.topic, tp.partition), None)
            if offset is not None:
                self._consumer.seek(tp, offset)
                # what came before the offset is done (a checkpoint, or the loop carried on holds
                # it): said so at once, or a partition that delivers nothing more before the next
                # rebalance would have no position, and its loop and checkpoint would lose theirs
                self._next[(tp.topic, tp.partition)] = offset
                log.info("resuming %s[%d] at the checkpoint's offset %d", tp.topic, tp.partition, offset)

    def _connect(self) -> KafkaConsumer:
        try:
            consumer = KafkaConsumer(
                bootstrap_servers=self._settings.bootstrap,
                **self._settings.client_security(),
                group_id=self._group,
                client_id="aiops-ingest",
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                max_poll_records=self._settings.max_poll_records,
                fetch_max_bytes=16 << 20,
                max_partition_fetch_bytes=4 << 20,
                # a broker restart must be noticed in seconds: the default backoff grows to 30 s
                reconnect_backoff_max_ms=RECONNECT_BACKOFF_MAX_MS,
                # after a broker restart, kafka-python 3.0 kept fetching with a session id the new
                # broker did not know, and stalled ~25 s until FetchSessionIdNotFound; full fetch
                # requests cost little at our partition counts
                enable_incremental_fetch_sessions=False,
                **({"partition_assignment_strategy": [self._assignor]} if self._assignor else {}),
                **({"partition_assignment_strategy": [StickyPartitionAssignor()]} if self._sticky else {}),
            )
            consumer.subscribe(self._topics, listener=_Rebalance(self))
            return consumer
        except KafkaError as exc:
            raise KafkaIOError(f"cannot reach Kafka at {self._settings.bootstrap}: {exc}") from exc

    def rejoin(self, should_stop: Callable[[], bool]) -> bool:
        """Leave and join the group again as a new member. kafka-python 3.0 now and then never
        completes a first join against a 4.x broker; a fresh member gets through. A broker that
        is away meanwhile is waited for; False if asked to stop first."""
        log.warning("consumer of group %s got no partitions; joining again", self._group)
        self._consumer.close(autocommit=False)
        self._revoked(set(self._next))
        self._held_back = set()  # a new consumer: nothing paused
        if self._assignor is not None:  # a new member: nothing held, no assignment yet
            self._assignor.standby, self._assignor.generation = False, -1
        delay = 1.0
        while True:
            try:
                self._consumer = self._connect()
                return True
            except KafkaIOError as exc:
                if should_stop():
                    return False
                log.warning("%s; trying again in %.0f s", exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 30.0)

    def poll(self) -> list[tuple[Source, int, bytes]]:
        """Messages of one poll as (where, timestamp ms, value), in partition order."""
        self._unpark_resumed()
        try:
            records = self._consumer.poll(timeout_ms=self.poll_timeout_ms)
        except KafkaError as exc:  # the broker away while joining or finding the coordinator
            now = time.monotonic()
            if now - self._last_poll_error > 30:
                log.warning("poll failed (%s); waiting for the broker", exc)
                self._last_poll_error = now
            time.sleep(min(1.0, self.poll_timeout_ms / 1000))
            return []
        out: list[tuple[Source, int, bytes]] = []
        for tp, messages in records.items():
            for m in messages:
                if m.value is not None:
                    out.append((Source(tp.topic, tp.partition, m.offset), m.timestamp, m.value))
            if messages:
                self._next[(tp.topic, tp.partition)] = messages[-1].offset + 1
        return out

    def _unpark_resumed(self) -> None:
        """Work around kafka-python 3.0.12: it parks the records it had fetched for a partition
        that is paused, and puts them back once the partition resumes, but only while its in-line
        slot holds nothing; after the first batch it drained, the slot holds an exhausted batch,
        so a resumed partition never delivers again, nor is it fetched again (it has parked
        records): the daemon waits for it forever. Emptying the slot when it holds nothing left
        and a resumed partition is parked lets the client's own restore run. Private attributes,
        read defensively; `tests/faults/test_backlog.py` and `test_commit_only_done.py` pause and
        resume partitions against the real broker and stall without it."""
        fetcher = getattr(self._consumer, "_fetcher", None)
        parked = getattr(fetcher, "_paused_partition_records", None)
        if not parked or getattr(fetcher, "_next_partition_records", None):
            return
        paused = self._consumer.paused()
        if any(tp not in paused for tp in parked):
            fetcher._next_partition_records = None  # type: ignore[union-attr]

    def backlogged(self) -> set[Partition]:
        """Partitions the broker holds records for that this member has not taken yet, and those
        it cannot yet say about (no fetch answered for them, no end offset known): a partition is
        only taken for caught up once the broker said so. From the high-water marks of the last
        fetches (no request); for a partition none has answered yet, from an end-offsets request,
        at most every `ENDS_EVERY_S`."""
        out: set[Partition] = set()
        unknown = []
        for tp in self._consumer.assignment():
            p = (tp.topic, tp.partition)
            high = self._consumer.highwater(tp)
            if high is None:
                high = self._ends.get(p)
            taken = self._taken(tp)
            if high is None or taken is None:
                unknown.append(tp)
                out.add(p)
            elif taken < high:
                out.add(p)
        now = time.monotonic()
        if unknown and now - self._ends_asked >= ENDS_EVERY_S:
            self._ends_asked = now
            try:
                ends = self._consumer.end_offsets(unknown, timeout_ms=2000)
            except KafkaError as exc:  # the broker away: still unknown, still waited for
                log.debug("end offsets unknown (%s)", exc)
            else:
                self._ends.update({(tp.topic, tp.partition): int(end) for tp, end in ends.items()})
        return out

    def _taken(self, tp: TopicPartition) -> int | None:
        """Where this member reads the partition next: after the last record it took, else its
        fetch position (the committed offset, a seek, or the reset), None if not known yet."""
        taken = self._next.get((tp.topic, tp.partition))
        if taken is not None:
            return taken
        try:
            return self._consumer.position(tp, timeout_ms=1000)  # type: ignore[no-any-return]
        except KafkaError:
            return None

    def committed(self, partitions: AbstractSet[Partition]) -> dict[Partition, int | None]:
        """The group's committed offset of each partition (None: never committed), asked now."""
        try:
            return {p: self._consumer.committed(TopicPartition(*p)) for p in partitions}
        except KafkaError as exc:
            raise KafkaIOError(f"cannot read the committed offsets of group {self._group}: {exc}") from exc

    def ends_of(self, topics: AbstractSet[str]) -> dict[Partition, int]:
        """The end offsets, now, of the partitions of `topics` this member holds (a request)."""
        held = [tp for tp in self._consumer.assignment() if tp.topic in topics]
        try:
            ends = self._consumer.end_offsets(held) if held else {}
        except KafkaError as exc:
            raise KafkaIOError(f"cannot read the ends of {sorted(topics)}: {exc}") from exc
        return {(tp.topic, tp.partition): int(o) for tp, o in ends.items()}

    def reached(self, ends: Mapping[Partition, int]) -> bool:
        """Whether this member has taken everything before `ends` in each of those partitions it
        still holds."""
        held = {(tp.topic, tp.partition): tp for tp in self._consumer.assignment()}
        for p, end in ends.items():
            if p in held:
                taken = self._taken(held[p])
                if taken is None or taken < end:
                    return False
        return True

    def hold_back(self, partitions: AbstractSet[Partition]) -> None:
        """Fetch nothing more from these partitions until they are no longer named (they ran far
        ahead of the others: what they deliver would only wait in memory); the others resume.
        Records already fetched for a paused partition are fetched again after it resumes."""
        assignment = {(tp.topic, tp.partition): tp for tp in self._consumer.assignment()}
        wanted = {p for p in partitions if p in assignment}
        pause = [assignment[p] for p in wanted - self._held_back]
        resume = [assignment[p] for p in self._held_back - wanted if p in assignment]
        if pause:
            self._consumer.pause(*pause)
        if resume:
            self._consumer.resume(*resume)
        self._held_back = wanted

    def lag(self) -> int:
        """Messages on the broker this member has not taken yet, from the high-water marks of
        the last fetches (no request: cheap enough to ask every poll)."""
        total = 0
        for tp in self._consumer.assignment():
            high = self._consumer.highwater(tp)
            taken = self._next.get((tp.topic, tp.partition))
            if high is not None and taken is not None:
                total += max(0, high - taken)
        return total

    def caught_up(self, timeout_s: float = 2.0, held_back_taken: bool = False) -> bool:
        """Whether the broker confirms, now, that this member has taken everything its
        partitions hold. False when the broker cannot say (away, or slow to answer): a silent
        broker is not a quiet input. `held_back_taken`: a partition held back (hold_back) counts
        as taken (its records wait on the others, and when the others wait on a tick that only the
        input's quiet lets go, the last of a finite input, they would keep it from ever coming)."""
        held = self._consumer.assignment()
        if not held:
            return False
        skip = self._held_back if held_back_taken else set()
        assignment = [tp for tp in held if (tp.topic, tp.partition) not in skip]
        if not assignment:
            return True
        try:
            ends = self._consumer.end_offsets(assignment, timeout_ms=int(timeout_s * 1000))
        except KafkaError:
            return False
        for tp in assignment:
            taken = self._next.get((tp.topic, tp.partition))
            if taken is None:  # nothing taken from it here: caught up only if it is empty from our start
                try:
                    taken = self._consumer.position(tp, timeout_ms=int(timeout_s * 1000))
                except KafkaError:
                    return False
            if taken is None or taken < ends.get(tp, 0):
                return False
        return True

    @property
    def holding_back(self) -> bool:
        """Whether some partitions are held back (hold_back)."""
        return bool(self._held_back)

    @property
    def assigned(self) -> bool:
        """Whether the group gave this member any partitions yet (joining takes a while)."""
        return bool(self._consumer.assignment())

    @property
    def standing_by(self) -> bool:
        """A member of a one-active group that joined and was given nothing: it waits, polling
        to stay in the group, until the active member leaves."""
        return self._assignor is not None and self._assignor.generation >= 0 and self._assignor.standby

    def partitions_of(self, topic: str) -> set[int]:
        """The partitions the topic has (as the client's metadata says)."""
        return set(self._consumer.partitions_for_topic(topic) or ())

    def positions(self) -> dict[Partition, int]:
        """Per partition consumed here, the offset after the last message taken."""
        return dict(self._next)

    def commit(self, held: Mapping[Partition, int] | None = None, only: AbstractSet[Partition] | None = None) -> bool:
        """Commit what was consumed, except, per partition in `held`, from that offset on (its
        messages are not done yet). False if the broker could not take it (it is away, or the
        group moved on): those offsets are read again, by this member or another (at-least-once),
        and the next commit that succeeds covers them."""
        done = self.done(held)
        offsets = {
            TopicPartition(*p): OffsetAndMetadata(o, "", -1) for p, o in done.items() if only is None or p in only
        }
        if not offsets:
            return True
        try:
            self._consumer.commit(offsets)
            return True
        except KafkaError as exc:
            log.warning("offset commit failed (%s); the batch will be read again", exc)
            return False

    def done(self, held: Mapping[Partition, int] | None = None) -> dict[Partition, int]:
        """Per partition consumed here, where a restart must read from: after everything
        consumed, or the first offset still `held`."""
        held = held or {}
        return {p: min(after, held.get(p, after)) for p, after in self._next.items()}

    def pause(self) -> None:
        """Stop fetching (the store is away): the member stays in its group, Kafka keeps the data."""
        self._consumer.pause(*self._consumer.assignment())

    def resume(self) -> None:
        """Fetch again (the store is back), except the partitions held back (hold_back)."""
        held = {(tp.topic, tp.partition) for tp in self._consumer.paused()} - self._held_back
        self._consumer.resume(*(TopicPartition(*p) for p in held))

    def wait_paused(self, seconds: float) -> None:
        """Wait while paused, polling so the group keeps this member. Partitions a rebalance hands
        over meanwhile are paused too, and anything fetched from them is put back (seek)."""
        records = self._consumer.poll(timeout_ms=int(seconds * 1000))
        for tp, messages in records.items():
            self._consumer.seek(tp, messages[0].offset)
        self.pause()

    def close(self) -> None:
        self._consumer.close()


Polled = list[tuple[Source, int, bytes]]


class TopicReader:
    """Every partition of one topic, read without a consumer group from offsets its owner keeps
    (the scheduler's events: every daemon needs all of them, whichever telemetry partitions it
    holds, and keeps its position with its checkpoint instead of committing it)."""

    def __init__(self, bootstrap: str, topic: str, client_id: str = "aiops-events") -> None:
        self.topic = topic
        try:
            self._consumer = KafkaConsumer(
                bootstrap_servers=bootstrap,
                **security(),
                group_id=None,
                client_id=client_id,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                reconnect_backoff_max_ms=RECONNECT_BACKOFF_MAX_MS,
                enable_incremental_fetch_sessions=False,
            )
        except KafkaError as exc:
            raise KafkaIOError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
        self._partitions: list[TopicPartition] = []
        self._at: dict[int, int] = {}  # where the consumer stands, as it was last told or read

    def _assign(self) -> None:
        known = self._consumer.partitions_for_topic(self.topic) or set()
        parts = [TopicPartition(self.topic, p) for p in sorted(known)]
        if parts != self._partitions:
            self._consumer.assign(parts)
            self._partitions = parts
            self._at = {}

    def read_new(
        self, since: Mapping[int, int], wait_s: float = 2.0
    ) -> tuple[list[tuple[int, int, bytes]], dict[int, int]]:
        """Records after `since` (partition -> next offset; a partition not in it from its
        beginning) up to the ends the broker has now: [(partition, offset, value)], and the next
        offsets. KafkaIOError if the broker cannot be asked."""
        try:
            self._assign()
            if not self._partitions:
                return [], dict(since)
            for tp in self._partitions:  # a fresh start or a restored checkpoint: stand there
                want = since.get(tp.partition)
                if self._at.get(tp.partition) != want or want is None:
                    if want is None:
                        self._consumer.seek_to_beginning(tp)
                    else:
                        self._consumer.seek(tp, want)
            ends = {tp: int(o) for tp, o in self._consumer.end_offsets(self._partitions).items()}
            out: list[tuple[int, int, bytes]] = []
            deadline = time.monotonic() + wait_s
            while any(self._consumer.position(tp) < end for tp, end in ends.items()):
                if time.monotonic() > deadline:
                    break  # the rest next time
                for tp, records in self._consumer.poll(timeout_ms=200).items():
                    out += [(tp.partition, r.offset, r.value) for r in records]
            self._at = {tp.partition: int(self._consumer.position(tp)) for tp in self._partitions}
        except KafkaError as exc:
            self._at = {}
            raise KafkaIOError(f"cannot read {self.topic}: {exc}") from exc
        out.sort(key=lambda r: (r[0], r[1]))
        return out, dict(self._at)

    def ends(self) -> dict[int, int]:
        """Each partition's end offset now (where the next record will go)."""
        try:
            self._assign()
            return {tp.partition: int(o) for tp, o in self._consumer.end_offsets(self._partitions).items()}
        except KafkaError as exc:
            raise KafkaIOError(f"cannot read {self.topic}: {exc}") from exc

    def close(self) -> None:
        self._consumer.close()


@dataclass(frozen=True, slots=True)
class Joined:
    """A poll's messages as one decodable batch."""

    data: bytes
    default_times: NDArray[np.int64]  # each line's default time: its message's timestamp
    record_ends: NDArray[np.int64]  # byte offset of each message's end: no record runs past one
    source_of: Callable[[int], Source | None]  # the message a batch line came from


def joined(messages: Sequence[tuple[Source, int, bytes]]) -> Joined:
    """One decodable batch from many messages. A message boundary is a line boundary (a message
    without a final newline gets one) and a record boundary (decode's `record_ends`: a quote left
    open never reaches into the next message). A message over MAX_MESSAGE_BYTES stands as one
    blank line (`process_messages` dead-letters it), which keeps the line count `line_offsets`
    finds for it."""
    values = [_bounded(v) for _, _, v in messages]
    values = [v if v.endswith(b"\n") else v + b"\n" for v in values]
    counts = np.array([v.count(b"\n") for v in values], dtype=np.int64)
    ends = np.cumsum(counts)
    default_times = np.repeat(np.array([ts for _, ts, _ in messages], dtype=np.int64) * 1_000_000, counts)
    record_ends = np.cumsum(np.array([len(v) for v in values], dtype=np.int64))

    def source_of(line_no: int) -> Source | None:
        i = int(np.searchsorted(ends, line_no, side="right"))
        return messages[i][0] if i < len(messages) else None

    return Joined(b"".join(values), default_times, record_ends, source_of)


def join_messages(
    messages: Sequence[tuple[Source, int, bytes]],
) -> tuple[bytes, NDArray[np.int64], Callable[[int], Source | None]]:
    """One decodable batch from many messages, each line's default time (its message's
    timestamp, for lines that carry none, as Telegraf does), and a map from line to message.
    (Without the message ends: `joined` has them, and `process_messages` uses it.)"""
    batch = joined(messages)
    return batch.data, batch.default_times, batch.source_of


def _bounded(value: bytes) -> bytes:
    return value if len(value) <= MAX_MESSAGE_BYTES else b""


def oversized(messages: Sequence[tuple[Source, int, bytes]]) -> list[DeadLetter]:
    """A dead letter for each message over MAX_MESSAGE_BYTES, keeping its head (its offset in the
    source finds the rest: a dead letter must fit in a message of the dead-letter topic)."""
    return [
        DeadLetter(
            "decode",
            f"message of {len(v):,} bytes is over the bound of {MAX_MESSAGE_BYTES:,} bytes a message may take",
            v[:MAX_RECORD_BYTES],
            source,
        )
        for source, _, v in messages
        if len(v) > MAX_MESSAGE_BYTES
    ]


def per_partition(messages: Sequence[tuple[Source, int, bytes]]) -> list[tuple[Partition, Polled]]:
    """A poll's messages by partition, each partition's in their order."""
    out: dict[Partition, Polled] = {}
    for message in messages:
        out.setdefault((message[0].topic, message[0].partition), []).append(message)
    return list(out.items())


def process_messages(core: IngestCore, messages: Sequence[tuple[Source, int, bytes]], partition: Partition) -> Batch:
    """The ingest core over one partition's messages of a poll; a failure of ours dead-letters
    them whole (with the reason) instead of stopping the cluster's monitoring."""
    batch = joined(messages)
    try:
        out = core.process(
            batch.data,
            default_time_ns=batch.default_times,
            source_of=batch.source_of,
            stream=partition,
            record_ends=batch.record_ends,
        )
        if too_big := oversized(messages):  # each stands as one line of the batch, refused unread
            core.stats.lines += len(too_big)
            core.stats.rejected += len(too_big)
            core.stats.deadlettered += len(too_big)
            core.stats.reasons.update(letter.category for letter in too_big)
            out.deadletters[:0] = too_big
        return out
    except Exception as exc:
        log.exception("ingest failed on a batch of %d messages; dead-lettering them whole", len(messages))
        letters = [DeadLetter("internal", f"internal error: {exc!r}"[:500], v, src) for src, _, v in messages]
        core.stats.deadlettered += len(letters)
        return Batch({}, letters)


def event_time_ms(value: bytes, fallback_ms: int) -> int:
    """The event time of a message: the timestamp of its last line (a producer groups one
    entity's lines of one time per message, as ours and Telegraf's do). The record's own
    timestamp is the broker's append time on the project's topics, so it is only the fallback,
    for lines that carry no timestamp."""
    last = value.rstrip(b"\n").rpartition(b"\n")[2]
    token = last.rpartition(b" ")[2]
    if last.count(b" ") >= 2 and token.isdigit() and len(token) <= 19:
        return int(token) // 1_000_000
    return fallback_ms


def polls(
    consumer: TelemetryConsumer,
    should_stop: Callable[[], bool],
    idle_stop_s: float | None = None,
    on_idle: Callable[[], None] | None = None,
    idle_s: float = 60.0,
    on_empty: Callable[[], None] | None = None,
) -> Iterator[Polled]:
    """Non-empty polls until asked to stop, or until nothing arrived for `idle_stop_s` once the
    group gave this member partitions (joining a group takes a while and is not idleness).
    `on_idle` is called once when the input has been quiet for `idle_s` (it stopped: a stage
    that holds data for late arrivals lets it go), and again after the next quiet spell. Quiet
    (for either) means the broker confirms, every `QUIET_CHECK_S` of the spell and at its end,
    that there is nothing more to take: while the broker is away, producers buffer, and what they
    buffered arrives after it is back, so a spell counts only from the broker's return.
    `on_empty` is called after every poll that brought nothing (work that waits on others)."""
    # idle: nothing more to take (stopping waits for it); quiet: nothing more but what is held
    # back (letting held ticks go waits only for that: the held-back records wait on those ticks)
    idle_since = quiet_since = joining_since = quiet_checked = time.monotonic()
    idle_told = False
    rejoins = 0
    while not should_stop():
        messages = consumer.poll()
        now = time.monotonic()
        if messages:
            idle_since = quiet_since = quiet_checked = now
            idle_told = False
            yield messages
            continue
        if on_empty is not None:
            on_empty()
        telling = on_idle is not None and not idle_told
        spell_over = (telling and now - quiet_since > idle_s) or (
            idle_stop_s is not None and now - idle_since > idle_stop_s
        )
        watching = telling or idle_stop_s is not None
        if watching and consumer.assigned and (spell_over or now - quiet_checked >= QUIET_CHECK_S):
            if not consumer.caught_up(held_back_taken=True):
                idle_since = quiet_since = now
            elif consumer.holding_back and not consumer.caught_up():
                idle_since = now
            now = quiet_checked = time.monotonic()
        if on_idle is not None and not idle_told and consumer.assigned and now - quiet_since > idle_s:
            idle_told = True
            on_idle()
        if not consumer.assigned:
            idle_since = now
            if consumer.standing_by:
                joining_since = now
            elif now - joining_since > JOIN_TIMEOUT_S:
                rejoins += 1
                if idle_stop_s is not None and rejoins > MAX_REJOINS:
                    raise KafkaIOError(f"no partitions assigned after {rejoins} attempts to join the group")
                if not consumer.rejoin(should_stop):
                    return
                joining_since = time.monotonic()
        elif idle_stop_s is not None and now - idle_since > idle_stop_s:
            return
        if consumer.assigned:
            joining_since = now


STORE_RETRY_MAX_S = 30.0


def store(
    frames: FrameSink, consumer: TelemetryConsumer, should_stop: Callable[[], bool]
) -> Sequence[tuple[bytes, str]] | None:
    """Flush until the store takes the batch; while it is away, pause the consumer (Kafka is the
    buffer) and retry with backoff. None if asked to stop before it came back."""
    delay, since = 1.0, time.monotonic()
    paused = False
    while True:
        try:
            refused = frames.flush()
            break
        except SinkUnavailableError as exc:
            if not paused:
                log.error("the store is unavailable (%s); pausing consumption until it is back", exc)
                consumer.pause()
                paused = True
            if should_stop():
                return None
            consumer.wait_paused(delay)
            delay = min(delay * 2, STORE_RETRY_MAX_S)
    if paused:
        consumer.resume()
        log.warning("the store is back after %.0f s; consumption resumed", time.monotonic() - since)
    return refused


def line_offsets(
    messages: Sequence[tuple[Source, int, bytes]], line_no: Mapping[str, NDArray[np.int64]]
) -> dict[str, NDArray[np.int64]]:
    """Per measurement, the offset of the message each row came from (rows named by their line
    in the batch `join_messages` made of these messages)."""
    counts = np.array(
        [(v := _bounded(value)).count(b"\n") + (not v.endswith(b"\n")) for _, _, value in messages], dtype=np.int64
    )
    ends = np.cumsum(counts)
    offsets = np.array([source.offset for source, _, _ in messages], dtype=np.int64)
    last = len(offsets) - 1
    return {
        name: offsets[np.minimum(np.searchsorted(ends, rows, side="right"), last)] for name, rows in line_no.items()
    }


def consume(
    consumer: TelemetryConsumer,
    core: IngestCore,
    frames: FrameSink,
    deadletters: DeadLetterSink,
    should_stop: Callable[[], bool],
    idle_stop_s: float | None = None,
    on_batch: Callable[[dict[str, object]], None] | None = None,
) -> None:
    """Poll, process, flush both sinks, then commit: a crash anywhere before the commit means
    the batch is read again (at-least-once); the database and the topics tolerate the repeat.

    A sink that holds rows until their window closes (a WindowedSink: downsampling) is told each
    row's partition and offset, and each partition is committed only up to its first message
    with rows still held. When the input has been quiet for the sink's `quiet_after_s`, or a run
    until idle ends, its open windows are closed and written: what arrived is what there is.
    Asked to stop, nothing open is written (it is read again on restart)."""
    windowed = frames if isinstance(frames, WindowedSink) else None

    def settle() -> bool:
        """Flush both sinks and commit what they stored; False if asked to stop meanwhile."""
        refused = store(frames, consumer, should_stop)
        if refused is None:
            return False  # asked to stop while the store was away: nothing committed, read again on restart
        if refused:
            deadletters.add([DeadLetter("store", f"refused by the database: {why}", line) for line, why in refused])
            core.stats.deadlettered += len(refused)
        try:
            deadletters.flush(should_stop)
        except KafkaIOError as exc:  # asked to stop while the broker was away: read again on restart
            log.warning("%s", exc)
            return False
        consumer.commit(cast(Mapping[Partition, int], windowed.held()) if windowed is not None else None)
        return True

    def close_windows() -> None:
        if windowed is not None:
            windowed.close_all()
            settle()

    quiet: dict[str, Any] = {}  # at full resolution nothing waits for a quiet input
    if windowed is not None:
        quiet = {"on_idle": close_windows, "idle_s": windowed.quiet_after_s}
    for messages in polls(consumer, should_stop, idle_stop_s, **quiet):
        values = letters = 0
        for partition, part in per_partition(messages):  # each judged against its own event time
            batch = process_messages(core, part, partition)
            if windowed is not None:
                windowed.write_stream(batch.frames, partition, line_offsets(part, batch.line_no))
            else:
                frames.write(batch.frames)
            deadletters.add(batch.deadletters)
            values, letters = values + batch.value_count, letters + len(batch.deadletters)
        if not settle():
            return
        if on_batch is not None:
            on_batch({"messages": len(messages), "values": values, "deadletters": letters})
    if windowed is not None and not should_stop():  # a run until idle ended: its windows are complete
        close_windows()
