"""What the root-cause engine reads when detection runs elsewhere (split across the members of
`aiops detect --kafka`): the anomalies and predictions topics, and the progress topic, on which
each telemetry partition's detector says which tick it has judged (after that tick's anomalies
and predictions were acknowledged by the broker) or that it has nothing to judge (its input went
quiet). A tick goes to the engine once every partition has judged it or fallen idle: the engine
then sees each tick whole, as in one process, whichever member judged which part of it.

Apart from Kafka: the daemon (aiops.pipeline, `aiops run --kafka --from-detection`) feeds it polls
and tells it, by `release`, how far it has read every findings partition."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from detectors.anomaly import Anomaly, Prediction, is_presence
from detectors.coverage import CoverageWatch, Notice
from detectors.detect_loop import DetectStats
from detectors.ticks import HeldMessages
from ingest.deadletter import DeadLetter, Source

_MARK = struct.Struct(">cIq")  # b"D" judged / b"I" idle, telemetry partition, tick (ns; 0 when idle)
JUDGED, IDLE = b"D", b"I"


def judged_record(partition: int, tick_ns: int) -> bytes:
    """Partition `partition` judged the tick at `tick_ns`; its findings are on their topics."""
    return _MARK.pack(JUDGED, partition, tick_ns)


def idle_record(partition: int) -> bytes:
    """Partition `partition` has nothing to judge: no tick should wait for it."""
    return _MARK.pack(IDLE, partition, 0)


def read_mark(value: bytes) -> tuple[bytes, int, int]:
    """(kind, partition, tick ns) of a progress record; ValueError if it is none."""
    if len(value) != _MARK.size:
        raise ValueError(f"a progress record is {_MARK.size} bytes, not {len(value)}")
    kind, partition, tick_ns = _MARK.unpack(value)
    if kind not in (JUDGED, IDLE):
        raise ValueError(f"unknown progress record kind {kind!r}")
    return kind, partition, tick_ns


def tick_key(t: float) -> int:
    """A tick's key in ms: event times in seconds (floats) and tick grid points in ns meet here."""
    return round(t * 1000)


@dataclass(slots=True)
class TickProgress:
    """Per telemetry partition: the last tick it judged, and whether it fell idle since."""

    partitions: int
    judged: dict[int, int] = field(default_factory=dict)  # partition -> last tick judged (ms)
    idle: set[int] = field(default_factory=set)

    def mark(self, kind: bytes, partition: int, tick_ms: int) -> None:
        if kind == IDLE:
            self.idle.add(partition)
            return
        self.idle.discard(partition)
        self.judged[partition] = max(tick_ms, self.judged.get(partition, tick_ms))

    def complete_through(self) -> int | None:
        """The newest tick every partition has judged or is idle past (ms); None while a
        partition has said nothing yet."""
        waiting_on = [self.judged.get(p) for p in range(self.partitions) if p not in self.idle]
        if any(at is None for at in waiting_on):
            return None
        if waiting_on:
            return min(at for at in waiting_on if at is not None)
        return max(self.judged.values(), default=None)  # every partition idle: all it judged


@dataclass(slots=True)
class _Tick:
    anomalies: list[Anomaly] = field(default_factory=list)
    predictions: list[Prediction] = field(default_factory=list)


class FindingsLoop:
    """The engine's front in the root-cause daemon when detection runs elsewhere: the same
    interface the pipeline uses of a detect loop (polls in, ticks to `tick_listener`, messages
    held until their tick is analysed), over the detectors' outputs instead of telemetry."""

    def __init__(
        self,
        interval_s: float,
        telemetry_partitions: int,
        anomalies_topic: str,
        predictions_topic: str,
        progress_topic: str,
    ) -> None:
        self.interval_s = interval_s
        self.topics = (anomalies_topic, predictions_topic, progress_topic)
        self.progress = TickProgress(telemetry_partitions)
        self.ticks: dict[int, _Tick] = {}  # tick (ms) -> what was found in it, not analysed yet
        self.released_through: int | None = None  # every tick at or before it analysed (ms)
        self.held = HeldMessages()
        # stats.late_rows: findings that came for a tick already analysed (counted, not analysed;
        # the daemon's run summary says how many, as it says a detect loop's late rows)
        self.stats = DetectStats()
        self.tick_listener: Callable[[float, list[Anomaly], list[Prediction]], None] | None = None
        # what a detect loop also offers the pipeline, empty here: the detectors' notices,
        # predictions and job utilisation stay with the detection members
        self.notices: list[Notice] = []
        self.predictions: list[Prediction] = []
        self.coverage = CoverageWatch()
        self.predictor = None
        self.track_jobs = False
        self.job_utilisation: dict[str, float] = {}

    def __getstate__(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__dict__ if name != "tick_listener"}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self.tick_listener = None

    def feed_polled(
        self, messages: Sequence[tuple[Source, int, bytes]], backlogged: AbstractSet[tuple[str, int]] = frozenset()
    ) -> tuple[list[Anomaly], list[DeadLetter]]:
        """One poll of the findings topics: anomalies and predictions kept by tick, progress
        noted. Nothing is analysed here: the daemon releases once it has read far enough.
        Returns no anomalies (they are on their topic already) and what could not be read."""
        anomalies_topic, predictions_topic, progress_topic = self.topics
        letters: list[DeadLetter] = []
        for source, _, value in messages:
            try:
                if source.topic == progress_topic:
                    kind, partition, tick_ns = read_mark(value)
                    tick = tick_ns // 1_000_000
                    self.progress.mark(kind, partition, tick)
                    if kind == JUDGED:
                        self._hold(source, self._tick(tick))
                elif source.topic == anomalies_topic:
                    anomaly = Anomaly.from_json(value)
                    self._hold(source, self._tick(tick_key(anomaly.at), anomaly))
                elif source.topic == predictions_topic:
                    prediction = Prediction.from_json(value)
                    self._hold(source, self._tick(tick_key(prediction.at), prediction))
            except (ValueError, TypeError, KeyError) as exc:  # JSON errors are ValueErrors
                letters.append(DeadLetter("findings", f"not a finding: {exc}"[:300], value or b"", source))
        self.stats.deadletters += len(letters)
        return [], letters

    def _tick(self, tick: int, finding: Anomaly | Prediction | None = None) -> int | None:
        """The finding into its tick; None (counted) if that tick was analysed already."""
        if self.released_through is not None and tick <= self.released_through:
            self.stats.late_rows += finding is not None
            return None
        found = self.ticks.setdefault(tick, _Tick())
        if isinstance(finding, Anomaly):
            found.anomalies.append(finding)
        elif finding is not None:
            found.predictions.append(finding)
        return tick

    def _hold(self, source: Source, tick: int | None) -> None:
        if tick is not None:
            self.held.hold((source.topic, source.partition), source.offset, tick)

    def ready_through(self) -> int | None:
        """The newest tick that can be analysed once the findings topics are read to their ends
        as of now (ms); None if none beyond what was analysed."""
        through = self.progress.complete_through()
        if through is None or not self.ticks or min(self.ticks) > through:
            return None
        return through

    def release(self, through: int) -> None:
        """Every tick at or before `through` (ms) to the engine, in order: the daemon has read
        the findings topics past where they stood when the progress said so."""
        for tick in sorted(t for t in self.ticks if t <= through):
            found = self.ticks.pop(tick)
            self.stats.ticks += 1
            self.stats.anomalies += sum(not is_presence(a) for a in found.anomalies)  # presence: no anomaly
            if self.tick_listener is not None:
                self.tick_listener(tick / 1000, found.anomalies, found.predictions)
        self.released_through = max(through, self.released_through or through)
        self.held.release(self.released_through)

    def finish(self) -> list[Anomaly]:
        """The end of a replay: what is held is all there is, analysed whole or not."""
        if self.ticks:
            self.release(max(self.ticks))
        return []

    # what a detect loop is asked by the daemon, with nothing to do here

    def ahead_partitions(self) -> set[tuple[str, int]]:
        return set()

    def forget_partitions(self, partitions: AbstractSet[tuple[str, int]]) -> None:
        self.held.forget(set(partitions))

    def add_events(self, events: Iterable[dict[str, object]]) -> None:
        """The scheduler's events matter to the detectors; the engine reads them from the schedule."""


__all__ = [
    "IDLE",
    "JUDGED",
    "FindingsLoop",
    "TickProgress",
    "idle_record",
    "judged_record",
    "read_mark",
    "tick_key",
]
