"""Consuming: a group member that commits only what was fully processed, the one-active
assignor, and a reader of a whole topic from offsets its owner keeps."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.coordinator.assignors.abstract import (
    AbstractPartitionAssignor,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from ingest.deadletter import Source
from ingest.kafka.client import ENDS_EVERY_S, RECONNECT_BACKOFF_MAX_MS, KafkaIOError, security
from ingest.messages import Partition
from vocab.settings import KafkaSettings

log = logging.getLogger(__name__)


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
