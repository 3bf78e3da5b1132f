"""Assemble ticks from a stream of frames: all rows of one scrape window, across measurements.

Real collectors do not stamp a tick with one timestamp: each host has its own clock (seconds
off, with jitter, truncated to whole seconds) and scrapes at its own phase. So a tick is a window
of the scrape grid, not a timestamp: every row lands on the nearest multiple of the configured
interval, and the rows of one entity in one window merge field by field.

Kafka delivers a node's lines in order, but different nodes arrive interleaved and a tick may be
split across polls. The assembler holds rows until the stream is `lateness` seconds past their
window (event time, never the wall clock), then releases whole ticks in time order. A row that
arrives after its tick was released is counted as late and handed back to the caller: it is
stored by ingest, and kept out of detection.

From Kafka, "the stream" is several partitions that a consumer reads unevenly: catching up on a
backlog, the broker hands out a few partitions at a time, and one can be hours ahead of another
that has delivered nothing yet. So the Kafka runners also cap the release at the slowest
partition's event time (`PartitionClock`), as stream processors do with per-partition watermarks,
counting a partition the broker still holds records for as behind even before it delivers
anything; lateness then only has to cover disorder within a partition.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterator, Sequence, Set
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from ingest.frames import Frame, concat, merge_rows
from vocab.catalog import measurement


@dataclass(slots=True)
class AssembledTick:
    t: float  # seconds: the grid point of the scrape window
    frames: dict[str, Frame]
    ns: int = 0  # the same grid point in ns (exact: what held messages are compared with)


@dataclass(slots=True)
class _Pending:
    frames: list[Frame] = field(default_factory=list)
    ticks: list[NDArray[np.int64]] = field(default_factory=list)  # each row's grid point (ns)
    arrival: list[NDArray[np.int64]] = field(default_factory=list)  # each row's place in the stream


@dataclass(slots=True)
class TickAssembler:
    """Rows in, whole ticks out: every row lands on the nearest point of the scrape grid
    (multiples of the interval since the epoch), so a host whose clock is off by a few seconds,
    or that scrapes at its own phase, still lands on the tick it belongs to. A tick is released
    once the stream is `lateness_s` past the end of its window; the rows of one entity in one
    window merge (the newest value of each field wins), as a time-series database merges points
    of one series."""

    interval_s: float
    lateness_s: float = 0.0
    _pending: dict[str, _Pending] = field(default_factory=lambda: defaultdict(_Pending))
    _watermark_ns: int | None = None  # every tick at or before this was released
    _newest_ns: int | None = None
    _arrived: int = 0
    late_rows: int = 0
    cap_ns: int | None = None  # release nothing newer than this (the slowest source's clock)

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise ValueError(f"the scrape interval must be positive, got {self.interval_s}")

    @property
    def _interval_ns(self) -> int:
        return round(self.interval_s * 1e9)

    @property
    def released_through_ns(self) -> int | None:
        """Every tick at or before this grid point was analysed (None: none yet)."""
        return self._watermark_ns

    def grid(self, time_ns: NDArray[np.int64]) -> NDArray[np.int64]:
        """The nearest grid point of each time (half-way rounds up: windows are [t-I/2, t+I/2))."""
        step = self._interval_ns
        return ((time_ns + step // 2) // step) * step

    def add(self, frames: dict[str, Frame]) -> list[Frame]:
        """Buffer frames; returns the rows that came too late (their tick was already released)."""
        late: list[Frame] = []
        for name, incoming in frames.items():
            frame = incoming
            if not len(frame):
                continue
            ticks = self.grid(frame.time_ns)
            if self._watermark_ns is not None:
                old = ticks <= self._watermark_ns
                if old.any():
                    late.append(frame.take(np.flatnonzero(old)))
                    self.late_rows += int(old.sum())
                    keep = np.flatnonzero(~old)
                    frame, ticks = frame.take(keep), ticks[keep]
                    if not len(frame):
                        continue
            pending = self._pending[name]
            pending.frames.append(frame)
            pending.ticks.append(ticks)
            pending.arrival.append(np.arange(self._arrived, self._arrived + len(frame), dtype=np.int64))
            self._arrived += len(frame)
            newest = int(frame.time_ns.max())
            self._newest_ns = newest if self._newest_ns is None else max(self._newest_ns, newest)
        return late

    def ready(self) -> Iterator[AssembledTick]:
        """Ticks whose window closed `lateness` ago (with no lateness: as soon as the stream has
        passed the window's end), oldest first."""
        if self._newest_ns is None:
            return
        newest = self._newest_ns if self.cap_ns is None else min(self._newest_ns, self.cap_ns)
        # tick T's window ends at T + I/2; it is complete once the stream is there
        yield from self._release(newest - int(self.lateness_s * 1e9) - self._interval_ns // 2)

    def flush(self) -> Iterator[AssembledTick]:
        """Everything still held (end of input)."""
        if self._newest_ns is not None:
            yield from self._release(None)

    def _release(self, upto_ns: int | None) -> Iterator[AssembledTick]:
        by_tick: dict[int, dict[str, Frame]] = defaultdict(dict)
        for name, pending in list(self._pending.items()):
            if not pending.frames:
                continue
            frame = concat(pending.frames) if len(pending.frames) > 1 else pending.frames[0]
            ticks = np.concatenate(pending.ticks)
            arrival = np.concatenate(pending.arrival)
            due = ticks <= upto_ns if upto_ns is not None else np.ones(len(ticks), dtype=np.bool_)
            if not due.any():
                pending.frames, pending.ticks, pending.arrival = [frame], [ticks], [arrival]
                continue
            rest = np.flatnonzero(~due)
            if len(rest):
                pending.frames, pending.ticks, pending.arrival = [frame.take(rest)], [ticks[rest]], [arrival[rest]]
            else:
                pending.frames, pending.ticks, pending.arrival = [], [], []
            index = np.flatnonzero(due)
            released, released_ticks, released_arrival = frame.take(index), ticks[index], arrival[index]
            spec = measurement(name)
            values, inverse = np.unique(released_ticks, return_inverse=True)
            order = np.argsort(inverse, kind="stable")
            bounds = np.flatnonzero(np.diff(inverse[order])) + 1
            for rows in np.split(order, bounds):
                part = released.take(rows)
                if spec is not None:
                    part = merge_rows(part, spec.id_tag, released_arrival[rows])
                by_tick[int(values[inverse[rows[0]]])][name] = part
        for ts in sorted(by_tick):
            self._watermark_ns = ts if self._watermark_ns is None else max(self._watermark_ns, ts)
            yield AssembledTick(ts / 1e9, by_tick[ts], ts)


# a cap no tick is at or before: nothing is released while a partition that holds data has not
# delivered any of it yet
NOTHING_YET_NS = 0


@dataclass(slots=True)
class PartitionClock:
    """How far each source (topic partition) has delivered, in event time, and so how far the
    stream as a whole has: `cap` is the newest time every source that still matters has reached.

    The rule, per source:
    - *behind* (the broker holds records for it that this member has not taken, or cannot yet say:
      `backlogged`): it holds the stream at the newest time it delivered, and at nothing if it
      delivered nothing yet. However unevenly the broker hands out partitions while catching up,
      no tick is analysed before every such partition has delivered it, so no entity is ever
      called silent because its partition had not been read yet;
    - *caught up* (everything on the broker was taken): the newest time it delivered holds the
      stream too, so that a tick waits for the live edge of every partition, unless it is more
      than `stall_s` behind the fastest, or it never delivered anything: its producers went quiet
      (an empty partition stays empty), and it must not stop the analysis of everything else.

    `ahead(bound)` names the sources that ran more than `bound` past the slowest source still
    behind: pausing them (as ingest pauses during a store outage) bounds what waits in memory
    while the broker hands out one partition far ahead of another. Only a source that is behind
    is worth waiting for this way: one that is caught up has nothing more to deliver, and pausing
    the others for it would stop the stream."""

    stall_s: float = 1800.0
    newest_ns: dict[object, int] = field(default_factory=dict)
    behind_ns: int | None = None  # the slowest source still behind, at the last observation

    def observe(self, stamps: Sequence[tuple[object, int]], backlogged: Set[object] = frozenset()) -> int | None:
        """(source, event time in ms) per message, and the sources still behind; returns the cap
        in ns (None: nothing constrains the stream yet)."""
        for source, ms in stamps:
            ns = int(ms) * 1_000_000
            if ns > self.newest_ns.get(source, -1):
                self.newest_ns[source] = ns
        behind = [self.newest_ns.get(source, NOTHING_YET_NS) for source in backlogged]
        self.behind_ns = min(behind) if behind else None
        if self.newest_ns:
            floor = max(self.newest_ns.values()) - int(self.stall_s * 1e9)
            behind += [ns for ns in self.newest_ns.values() if ns >= floor]
        return min(behind) if behind else None

    def ahead(self, bound_s: float) -> set[object]:
        """Sources that delivered more than `bound_s` past the slowest source still behind
        (none when every source is caught up)."""
        if self.behind_ns is None:
            return set()
        limit = self.behind_ns + int(bound_s * 1e9)
        return {source for source, ns in self.newest_ns.items() if ns > limit}

    def forget(self, sources: Set[object]) -> None:
        """Partitions this member no longer owns: their clocks are the new owner's."""
        for source in sources:
            self.newest_ns.pop(source, None)


Source = tuple[str, int]  # (topic, partition)


@dataclass(slots=True)
class HeldMessages:
    """Kafka messages whose rows still wait in the assembler for their tick to close. Their
    offsets are not done: committing past them and then crashing would lose those ticks, so a
    partition commits up to its first held message (docs/ingest.md: commit only what is done).

    A message is judged by its event time (the timestamp of its last line; a producer groups one
    entity's lines of one scrape per message, as ours and Telegraf's do): it is done once the tick
    that time lands on was released, or when the ingest core dead-lettered it as too far ahead."""

    _held: dict[Source, deque[tuple[int, int]]] = field(default_factory=dict)  # (offset, tick ns)

    def hold(self, source: Source, offset: int, tick_ns: int) -> None:
        self._held.setdefault(source, deque()).append((offset, tick_ns))

    def release(self, through_ns: int | None) -> None:
        """Forget messages whose tick was released, in offset order per partition: a partition
        commits only up to its first message still held, whatever follows it."""
        if through_ns is None:
            return
        for source, held in list(self._held.items()):
            while held and held[0][1] <= through_ns:
                held.popleft()
            if not held:
                del self._held[source]

    def first_held(self) -> dict[Source, int]:
        """Per partition, the offset of the first message still held: commit up to it, not past."""
        return {source: held[0][0] for source, held in self._held.items()}

    def forget(self, sources: set[Source]) -> None:
        """Partitions this member no longer owns (a rebalance): their new owner reads them again."""
        for source in sources:
            self._held.pop(source, None)
