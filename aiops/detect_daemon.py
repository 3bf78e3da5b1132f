"""The detection daemon (`aiops detect --kafka`): telemetry in; anomalies, predictions and dead
letters out. The members of its group split the telemetry partitions between them: a second
member about doubles capacity (docs/detection.md, split detection).

Each partition's entities live in a loop of their own (rules, silence, drift, the predictor's
features: everything that needs only an entity's own series), checkpointed per partition with
the offset it belongs to, so a rebalance moves state instead of relearning it: a member given a
partition loads that partition's checkpoint (the state directory is shared by the members: a
volume in docker-compose), and the member that gave it up stops publishing for it. Comparisons
that span partitions (a job's GPUs, a switch role, the hall's inlets, the fabric's common link
width, the cooling loops) come from each tick's cohort summary: every loop publishes its share
of the tick to the cohorts topic as it begins the tick, every member reads all of them, and a
loop judges its tick once every partition's share is in (detectors.split). The merged summary is
exact, so the members find what one process finds.

Outputs are flushed, then offsets committed, only up to the first message of a tick not judged
yet (at-least-once); with a state directory, a partition's offsets are committed only with its
checkpoint, and a member that restores one skips what was published since it."""

from __future__ import annotations

import logging
import struct
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiops.daemon import CheckpointedDaemon, resume_offsets, usable_checkpoint
from aiops.daemon_state import CheckpointStore
from aiops.events_feed import EventsFeed
from detectors.anomaly import Anomaly
from detectors.detect_loop import DetectLoop, DetectStats, apply_events
from detectors.predict.online import OnlinePredictor
from detectors.progress_topic import idle_record, judged_record
from detectors.split import advance
from detectors.stack import DriftFactory, default_drift
from detectors.stack.summary import CohortSummary, ShareBoard
from ingest.daemon import Broker, KafkaBroker
from ingest.deadletter import DeadLetter, Source
from ingest.kafka import KafkaDeadLetterSink, KafkaIOError, TelemetryProducer, TopicReader
from ingest.messages import Partition, Polled
from vocab.settings import KafkaSettings
from vocab.thresholds import DetectorSettings

log = logging.getLogger(__name__)

_HEAD = struct.Struct(">cIq")  # b"S" share / b"I" idle, telemetry partition, tick (ns)
SHARE, IDLE = b"S", b"I"
# ticks released and not yet judged, per partition, before its partition is paused: a partition
# far ahead of the others would only wait in memory
MAX_WAITING = 3
# where the exchange stood as each of a loop's last ticks began: a member taking the partition over
# from its checkpoint reads the shares again from the oldest (another partition that had nothing
# at a tick may have sent its share of the next one a tick earlier)
BEGUN_KEPT = 4
# a poll's wait while a begun tick waits for the other members' shares, due within moments: a
# poll that waited its whole timeout for telemetry would hold the judgement back that long
SHARES_POLL_MS = 20
IDLE_REPEAT_S = 30.0  # how often a partition with nothing to judge says so again
# a begun tick that has waited this long for shares is logged with what it waits for: shares are
# due within moments of each other, so a wait this long means a member is slow, gone or stuck
STUCK_REPORT_S = 30.0


class CohortExchange:
    """The cohorts topic: this member's shares out (keyed by telemetry partition, so each
    partition's shares stay in order), every member's in, read without a group."""

    def __init__(self, topic: str, producer: TelemetryProducer, reader: TopicReader) -> None:
        self.topic = topic
        self.producer = producer
        self.reader = reader
        self.at: dict[int, int] = self._ends()  # what came before this start is of ticks long judged
        self.refused = 0
        self.received = 0  # records read
        # after a rewind, where the topic ended then: until it is read that far, the board does not
        # hold what the restored loops need, and a partition's newest share (sent since, or by this
        # member's own loops directly) would pass for "it had nothing" at the ticks being read again
        self.replay_to: dict[int, int] | None = None
        self._rewound = False

    def _ends(self) -> dict[int, int]:
        return self.reader.ends()

    def send(self, partition: int, tick_ns: int, share: CohortSummary) -> None:
        head = _HEAD.pack(SHARE, partition, tick_ns)
        self.producer.send_raw(self.topic, head + share.to_bytes(), key=str(partition).encode())

    def say_idle(self, partition: int) -> None:
        self.producer.send_raw(self.topic, _HEAD.pack(IDLE, partition, 0), key=str(partition).encode())

    def rewind(self, to: dict[int, int]) -> None:
        """Read again from `to` (a restored partition's ticks need the shares of their time)."""
        for p, offset in to.items():
            self.at[p] = min(offset, self.at.get(p, offset))
        self._rewound = True

    def rewind_to_beginning(self) -> None:
        """Read everything the topic holds again (a partition read again from its beginning)."""
        self.at = {}
        self._rewound = True

    @property
    def replaying(self) -> bool:
        """Whether shares read again after a rewind are still being read: nothing is judged meanwhile."""
        return self._rewound or self.replay_to is not None

    def read(self, board: ShareBoard) -> list[DeadLetter]:
        """What arrived since the last read, onto the board; a record that is no share is
        dead-lettered with the reason (a member of another version, a stray producer). Reading
        again after a rewind, it reads longer at a time, up to where the topic ended then."""
        if self._rewound:
            self._rewound = False
            ends = self._ends()
            self.replay_to = {q: max(end, (self.replay_to or {}).get(q, 0)) for q, end in ends.items()}
        records, self.at = self.reader.read_new(self.at, wait_s=1.0 if self.replay_to else 0.05)
        if self.replay_to is not None and all(self.at.get(q, 0) >= end for q, end in self.replay_to.items()):
            self.replay_to = None
        self.received += len(records)
        letters: list[DeadLetter] = []
        for cohort_partition, offset, value in records:
            try:
                kind, partition, tick_ns = _HEAD.unpack_from(value or b"")
                if kind == IDLE:
                    board.say_idle(partition, offset)
                elif kind == SHARE:
                    board.add(partition, tick_ns, CohortSummary.from_bytes(value[_HEAD.size :]), offset)
                else:
                    raise ValueError(f"unknown record kind {kind!r}")
            except (struct.error, ValueError) as exc:
                self.refused += 1
                where = Source(self.topic, cohort_partition, offset)
                letters.append(DeadLetter("cohorts", f"not a cohort share: {exc}"[:300], value or b"", where))
        return letters

    def close(self) -> None:
        self.reader.close()


class DetectDaemon(CheckpointedDaemon):
    """One member of the detection group: a loop per telemetry partition it holds."""

    def __init__(
        self,
        settings: KafkaSettings,
        interval_s: float,
        should_stop: Callable[[], bool],
        events: list[dict[str, object]],
        lateness_s: float,
        make: Callable[[], DetectLoop],
        state_dir: Path | None,
        checkpoint_every_s: float,
        idle_stop_s: float | None = None,
        broker: Broker | None = None,
    ) -> None:
        outputs = [
            settings.anomalies_topic,
            settings.predictions_topic,
            settings.deadletter_topic,
            settings.cohorts_topic,
            settings.progress_topic,
        ]
        broker = broker or KafkaBroker(settings)
        topic = settings.telemetry_topic
        super().__init__(should_stop, broker, [topic, *outputs], outputs, "aiops-detect", idle_stop_s, lateness_s)
        self.settings, self.interval_s = settings, interval_s
        self.lateness_s, self.make, self.checkpoint_every_s = lateness_s, make, checkpoint_every_s
        self.events = events
        self.state_dir = state_dir
        self.topic = topic
        self.dead = KafkaDeadLetterSink(self.producer, settings.deadletter_topic)
        self.exchange = self.waiting(
            lambda: CohortExchange(
                settings.cohorts_topic, self.producer, broker.reader(settings.cohorts_topic, "aiops-cohorts")
            )
        )
        self.feed = EventsFeed(broker, settings.events_topic)
        self.loops: dict[int, DetectLoop] = {}
        self.events_at: dict[int, dict[int, int]] = {}  # per loop: where the scheduler's topic was read to
        self.begun_at: dict[int, deque[dict[int, int]]] = {}  # per loop: the exchange as its last ticks began
        self.heard: dict[int, float] = {}  # per loop: when its partition last delivered (monotonic)
        self.idle_said: set[int] = set()
        self.unchecked: set[int] = set()  # taken with no checkpoint: see _cover_unchecked
        self.idle_said_at: dict[int, float] = {}  # when it was last said on the progress topic
        # partitions whose held ticks were let go (the whole input quiet for a tick's lateness)
        self.finished: set[int] = set()
        self.draining = False  # the input has ended (idle_stop_s): what is held is all there is
        self.progress = 0  # shares read and ticks judged: what a drain watches
        self.first_message_at: float | None = None
        self.last_judged_at: float | None = None
        self.last_message_at: float | None = None
        self.idle_wait_s = 0.0
        self.judged = 0  # ticks this member judged
        self.parked: dict[int, tuple[DetectLoop, int]] = {}  # revoked, with where this member stood
        self.board: ShareBoard | None = None
        self.retired = DetectStats()  # what loops handed to other members had counted
        self.last_checkpoint = time.monotonic()
        self.stuck_since: dict[tuple[int, int], float] = {}  # (partition, tick) begun: since when
        self.stuck_reported = 0.0
        self.connect([topic], settings.detect_group, sticky=True)

    # ---------------------------------------------------------------- assignment

    def _store_name(self, partition: int) -> str:
        return f"detect-{self.settings.detect_group}-p{partition}"

    def _store(self, partition: int) -> CheckpointStore | None:
        if self.state_dir is None:
            return None
        return CheckpointStore(self.state_dir, self._store_name(partition))

    def on_revoked(self, partitions: set[Partition]) -> None:
        """Loops of partitions taken away are parked with where this member stood: handed back
        in the same rebalance, they carry on; given to another member, they are dropped (it
        loads their checkpoint). Runs inside a poll: no Kafka calls here."""
        positions = self.consumer.positions()
        for topic, p in partitions:
            loop = self.loops.pop(p, None)
            if loop is not None and (topic, p) in positions:
                self.parked[p] = (loop, positions[(topic, p)])
            elif loop is not None:
                self._retire(loop)

    def on_assigned(self, partitions: set[Partition]) -> dict[Partition, int]:
        """Partitions this member now holds: a parked loop carries on where it stood; any other
        starts from its checkpoint (or from nothing at the committed offset)."""
        resume: dict[Partition, int] = {}
        for topic, p in sorted(partitions):
            if p in self.loops:
                continue
            held = self.parked.pop(p, None)
            if held is not None:
                self.loops[p] = held[0]
                resume[(topic, p)] = held[1]
                continue
            self.loops[p], at = self._restore(p)
            resume.update(at)
            self.heard[p] = time.monotonic()
        for loop, _ in self.parked.values():  # another member's now: it loads their checkpoints
            self._retire(loop)
        self.parked.clear()
        self.idle_said -= {p for _, p in partitions}
        log.warning("holding partitions %s of %s", sorted(p for _, p in partitions), self.topic)
        return resume

    def _retire(self, loop: DetectLoop) -> None:
        for name in ("values", "anomalies", "deadletters", "late_rows"):
            setattr(self.retired, name, getattr(self.retired, name) + getattr(loop.stats, name))
        self.retired.ticks = max(self.retired.ticks, loop.stats.ticks)

    def _fresh(self) -> DetectLoop:
        loop = self.make()
        loop.split = True
        return loop

    def _restore(self, partition: int) -> tuple[DetectLoop, dict[Partition, int]]:
        checkpoint = usable_checkpoint(self._store(partition), self.born, self.interval_s)
        self.begun_at[partition] = deque(maxlen=BEGUN_KEPT)
        if checkpoint is None:
            self.events_at[partition] = {}
            self.unchecked.add(partition)
            return self._fresh(), {}
        loop: DetectLoop = checkpoint.state["detect"]
        fresh = self.make()  # this start's model and events over the restored state
        loop.predictor = _carry_predictor(loop.predictor, fresh.predictor)
        apply_events(loop, self.events)
        loop.split = True
        self.events_at[partition] = dict(checkpoint.state.get("events_offsets") or {})
        self.exchange.rewind(dict(checkpoint.state.get("exchange_at") or {}))
        self.once.replaying_from(checkpoint.outputs)
        resume = resume_offsets(checkpoint)
        where = ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(resume.items()))
        log.warning("partition %d resumes from its checkpoint (%s)", partition, where)
        return loop, resume

    # ---------------------------------------------------------------- the work

    def hear_scheduler(self) -> None:
        """What the scheduler said, into every loop, each from where its own reading stood
        (loops restored from older checkpoints read more); refused records dead-lettered once."""
        told: dict[tuple[tuple[int, int], ...], tuple[list[dict[str, Any]], dict[int, int]]] = {}
        for p, loop in self.loops.items():
            key = tuple(sorted(self.events_at.get(p, {}).items()))
            if key not in told:
                events, refused, at = self.feed.take(dict(key))
                self.dead.add(refused if not told else [])
                told[key] = (events, at)
            events, at = told[key]
            loop.add_events(events)
            self.events_at[p] = at

    def on_batch(self, messages: Polled) -> None:
        if self.first_message_at is None:
            self.first_message_at = time.time()
        self.last_message_at = time.time()
        self.hear_scheduler()
        backlogged = self.consumer.backlogged()
        now = time.monotonic()
        by_partition: dict[int, list[tuple[Source, int, bytes]]] = {}
        for message in messages:
            by_partition.setdefault(message[0].partition, []).append(message)
        for p, part in sorted(by_partition.items()):
            loop = self.loops.get(p)
            if loop is None:  # revoked within this poll: its new owner reads it again
                continue
            _, letters = loop.feed_polled(part, {(t, q) for t, q in backlogged if q == p})
            self.dead.add(letters)
            self.heard[p] = now
            self.idle_said.discard(p)
            self.finished.discard(p)
        self.step()

    def step(self) -> None:
        """Shares in, ticks begun and judged, outputs out; idle partitions said; the partitions
        far ahead paused; a checkpoint when due."""
        board = self._board()
        if board is None:
            return
        self._cover_unchecked()
        self.once.arm(self.should_stop)
        self.dead.add(self.exchange.read(board))
        if self.exchange.replaying:  # judged now, a restored tick could miss a share read again below
            self.progress = self.exchange.received + self.judged
            self.consumer.poll_timeout_ms = SHARES_POLL_MS
            return

        def send(partition: int, tick_ns: int, share: CohortSummary) -> None:
            self.begun_at[partition].append(dict(self.exchange.at))
            self.exchange.send(partition, tick_ns, share)

        found: list[Anomaly] = []
        judged: list[tuple[int, int]] = []
        for _ in range(2):  # what the first pass sent may complete this member's own ticks
            for anomalies in advance(self.loops, board, send, judged).values():
                found += anomalies
        if judged:
            self.last_judged_at = time.time()
        self.judged += len(judged)
        self.progress = self.exchange.received + self.judged  # what a drain watches move
        self.publish(found, judged)
        self._say_idle(board)
        board.forget_before(min((_next_ns(loop) for loop in self.loops.values()), default=0))
        ahead = {(self.topic, p) for p, loop in self.loops.items() if len(loop.waiting) > MAX_WAITING}
        self.consumer.hold_back(ahead)
        others = self._waiting_on_others(board)
        self._report_stuck(board, ahead)
        self.consumer.poll_timeout_ms = SHARES_POLL_MS if others else self.settings.poll_timeout_ms
        if self.state_dir is None or time.monotonic() - self.last_checkpoint >= self.checkpoint_every_s:
            self.checkpoint()

    def _waiting_on_others(self, board: ShareBoard) -> bool:
        """Whether a tick begun here waits for shares of partitions other members hold."""
        for loop in self.loops.values():
            if loop.pending is not None and any(
                not board.accounted(q, loop.pending_ns) for q in range(board.partitions) if q not in self.loops
            ):
                return True
        return False

    def _report_stuck(self, board: ShareBoard, paused: set[Partition]) -> None:
        """A warning, at most every STUCK_REPORT_S, naming begun ticks that have waited that long
        and the partitions whose shares they wait for: what an operator needs to find the member."""
        now = time.monotonic()
        begun = {(p, loop.pending_ns) for p, loop in self.loops.items() if loop.pending is not None}
        self.stuck_since = {key: self.stuck_since.get(key, now) for key in begun}
        if now - self.stuck_reported < STUCK_REPORT_S:
            return
        stuck = []
        for (p, tick_ns), since in sorted(self.stuck_since.items()):
            if now - since >= STUCK_REPORT_S:
                missing = [q for q in range(board.partitions) if not board.accounted(q, tick_ns)]
                stuck.append(f"partition {p} tick {tick_ns} for {now - since:.0f} s, missing {missing}")
        if stuck:
            self.stuck_reported = now
            waiting = {p: len(loop.waiting) for p, loop in self.loops.items()}
            log.warning(
                "ticks waiting for shares: %s (ticks released per partition %s, paused %s, exchange at %s)",
                "; ".join(stuck), waiting, sorted(q for _, q in paused), self.exchange.at,
            )  # fmt: skip

    def _cover_unchecked(self) -> None:
        """A partition taken with no checkpoint and no committed offset is read from its
        beginning: whatever a member before this one published for it (before its first
        checkpoint, in a backlog a loop is rarely between ticks) is published again, so the
        outputs are read back from their beginning, each record to be skipped once, and so are
        the cohort shares (its ticks need the other partitions' shares of their time). With a
        committed offset and no checkpoint (a state directory lost), a replay may repeat some,
        and its first ticks may be judged without shares sent before this member started."""
        if not self.unchecked:
            return
        taken = {(self.topic, p) for p in self.unchecked if p in self.loops}
        self.unchecked.clear()
        if self.state_dir is None or not taken:
            return
        committed = self.waiting(lambda: self.consumer.committed(taken))
        if any(offset is None for offset in committed.values()):
            since = self.waiting(lambda: self._broker().beginnings(self.outputs))
            self.once.replaying_from(since)
            unread = sorted(p for (_, p), offset in committed.items() if offset is None)
            log.warning("partitions %s have no checkpoint and no committed offset: read from the beginning", unread)
            # its ticks from the first need the other partitions' shares of their time, which came
            # before this member's start: without them, a later share of a partition would pass
            # for "it had nothing", and its first ticks would be judged on part of their cohorts
            self.exchange.rewind_to_beginning()

    def _board(self) -> ShareBoard | None:
        if self.board is None:
            count = len(self.consumer.partitions_of(self.topic))
            if not count:
                return None
            self.board = ShareBoard(count)
        return self.board

    def _say_idle(self, board: ShareBoard) -> None:
        """A partition with nothing to judge whose input has been quiet for two scrapes and a
        tick's lateness: the others' ticks must not wait for it (its hosts stopped, or it carries
        none). Not sooner: a live partition is quiet between its scrapes, and said idle there, the
        others would judge its next tick without its share. Draining (the input has ended), a
        partition whose held ticks were let go is idle at once."""
        now = time.monotonic()
        quiet_s = self.lateness_s + 2 * self.interval_s
        backlogged = {p for _, p in self.consumer.backlogged()}
        for p, loop in self.loops.items():
            if p in self.idle_said or not loop.quiescent or p in backlogged:
                continue
            if (self.draining and p in self.finished) or now - self.heard.get(p, now) >= quiet_s:
                board.say_idle(p)
                self.exchange.say_idle(p)
                self._progress(p, idle_record(p))
                self.idle_said.add(p)
                self.idle_said_at[p] = now
        for p in self.idle_said & set(self.loops):  # said again: a root-cause daemon started since
            if now - self.idle_said_at.get(p, now) >= IDLE_REPEAT_S:  # without a checkpoint must hear it
                self._progress(p, idle_record(p))
                self.idle_said_at[p] = now

    def publish(self, anomalies: list[Anomaly], judged: list[tuple[int, int]]) -> None:
        """Findings out, then, once the broker has them, which ticks they complete: the
        root-cause daemon takes a tick whole once every partition said it was judged."""
        topic = self.settings.anomalies_topic
        for a in anomalies:
            self.producer.send_raw(topic, a.to_json(), key=a.entity.encode())
        for loop in self.loops.values():
            for prediction in loop.predictions:
                self.producer.send_raw(
                    self.settings.predictions_topic, prediction.to_json(), key=prediction.entity.encode()
                )
            loop.predictions.clear()
        self.producer.flush(should_stop=self.should_stop)
        for partition, tick_ns in judged:
            self._progress(partition, judged_record(partition, tick_ns))

    def _progress(self, partition: int, record: bytes) -> None:
        self.producer.send_raw(self.settings.progress_topic, record, key=str(partition).encode())

    def checkpoint(self) -> None:
        """Each partition whose loop has nothing begun: its state with its offsets, then those
        offsets to Kafka. A loop mid-tick waits for the next round (its state has moved past
        what its uncommitted messages would replay)."""
        held: dict[Partition, int] = {}
        for loop in self.loops.values():
            held.update(loop.held.first_held())
        saves = None
        if self.state_dir is not None:
            saves = [
                (CheckpointStore(self.state_dir, self._store_name(p)), self._state(p), {(self.topic, p)})
                for p, loop in sorted(self.loops.items())
                if loop.quiescent
            ]
        self.save_then_commit(saves, held)
        self.last_checkpoint = time.monotonic()

    def _state(self, partition: int) -> dict[str, Any]:
        begun = self.begun_at.get(partition)
        return {
            "detect": self.loops[partition],
            "interval_s": self.interval_s,
            "events_offsets": dict(self.events_at.get(partition, {})),
            "exchange_at": dict(begun[0]) if begun else dict(self.exchange.at),
        }

    def let_go(self) -> None:
        """The input went quiet for a tick's lateness: every loop's held ticks are released."""
        for p, loop in self.loops.items():
            loop.finish()
            self.finished.add(p)
        self.step()

    def drain(self, quiet_s: float) -> None:
        """The input went idle for good (a replay, a test): every held tick is released, and
        judged as the other members' shares come. Still a member meanwhile: partitions that a
        member leaving hands over are taken (with their checkpoints) and finished too. Gives up
        once nothing has moved for `quiet_s` (the members that held the missing shares are gone)."""
        if self.last_message_at is not None:
            self.idle_wait_s = time.time() - self.last_message_at
        self.draining = True
        self.let_go()
        moved, last = time.monotonic(), self.progress
        while not self.should_stop() and time.monotonic() - moved < quiet_s:
            if all(loop.quiescent for loop in self.loops.values()) and not self.consumer.backlogged():
                return  # (a partition held back until the others caught up may still hold records)
            messages = self.consumer.poll()
            if messages:
                self.on_batch(messages)
                self.let_go()
            else:
                self.step()
                # handed over meanwhile and read to the end: what it has is all there is
                behind = {p for _, p in self.consumer.backlogged()}
                for p in set(self.loops) - self.finished - behind:
                    self.loops[p].finish()
                    self.finished.add(p)
            if self.progress != last:
                moved, last = time.monotonic(), self.progress
        if not all(loop.quiescent for loop in self.loops.values()):
            log.warning("stopped with ticks not judged: the other members' shares of them did not come")

    def on_quiet(self) -> None:
        self.step()

    def at_end(self, idle: bool) -> None:
        if idle:
            self.drain(quiet_s=max(4 * (self.idle_stop_s or 0.0), 60.0))
        self.checkpoint()

    def close(self) -> None:
        if self.connected:
            self.consumer.close()
        self.feed.close()
        self.exchange.close()
        self.producer.close()

    def run(self) -> DetectStats:
        started = time.monotonic()
        try:
            self.serve()
        except KafkaIOError as exc:  # asked to stop while the broker was away: nothing more committed
            log.warning("%s", exc)
        finally:
            self.close()
        stats = self._stats()
        stats.seconds = time.monotonic() - started
        return stats

    def _stats(self) -> DetectStats:
        """Counts over the partitions this member held; ticks: the most any partition judged."""
        out = DetectStats()
        loops = [*self.loops.values(), *(held for held, _ in self.parked.values())]
        for name in ("values", "anomalies", "deadletters", "late_rows"):
            total = sum(getattr(loop.stats, name) for loop in loops) + getattr(self.retired, name)
            setattr(out, name, total)
        out.ticks = max([loop.stats.ticks for loop in loops] + [self.retired.ticks])
        out.first_message_at, out.last_judged_at = self.first_message_at, self.last_judged_at
        out.idle_wait_s = self.idle_wait_s
        return out


def _next_ns(loop: DetectLoop) -> int:
    """The oldest tick the loop will still ask the board about."""
    if loop.pending is not None:
        return loop.pending_ns
    if loop.waiting:
        return loop.waiting[0].ns
    return (loop.done_through_ns or 0) + 1


def _carry_predictor(restored: OnlinePredictor | None, given: OnlinePredictor | None) -> OnlinePredictor | None:
    """The restored predictor's state under this start's model (models are files, not state)."""
    if given is None or restored is None:
        return given
    restored.model = given.model
    return restored


def detect_kafka(
    settings: KafkaSettings,
    interval_s: float,
    should_stop: Callable[[], bool],
    events: list[dict[str, object]] | None = None,
    idle_stop_s: float | None = None,
    lateness_s: float = 60.0,
    drift_factory: DriftFactory | None = default_drift,
    predictor: OnlinePredictor | None = None,
    detector_settings: DetectorSettings | None = None,
    state_dir: Path | None = None,
    checkpoint_every_s: float = 30.0,
) -> DetectStats:
    """One member of the detection group until asked to stop (or, with `idle_stop_s`, until the
    input has been quiet that long and what was held is judged). Rows too late for their tick
    are counted and left out."""

    def make() -> DetectLoop:
        own = None if predictor is None else predictor.fresh()  # state of its own per partition
        loop = DetectLoop(interval_s, drift_factory, own, detector_settings, lateness_s)
        apply_events(loop, events or [])
        return loop

    member = DetectDaemon(
        settings, interval_s, should_stop, list(events or []), lateness_s, make, state_dir, checkpoint_every_s,
        idle_stop_s,
    )  # fmt: skip
    return member.run()


__all__ = ["CohortExchange", "DetectDaemon", "detect_kafka"]
