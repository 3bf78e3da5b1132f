"""Assemble ticks from a stream of frames: all rows of one timestamp, across measurements.

Kafka delivers a node's lines in order, but different nodes arrive interleaved and a tick may be
split across polls. The assembler holds rows until the stream is `lateness` seconds past their
timestamp (event time, never the wall clock), then releases whole ticks in time order. A row that
arrives after its tick was released is counted as late and handed back to the caller, who decides
what to do with it (the runner dead-letters it with a reason).

From Kafka, "the stream" is several partitions that a consumer reads unevenly: replaying a
backlog, one partition can be many ticks ahead of another. So the Kafka runners also cap the
release at the slowest partition's newest event time (`PartitionClock`), as stream processors do
with per-partition watermarks; lateness then only has to cover disorder within a partition.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ingest.frames import Frame, concat


@dataclass(slots=True)
class AssembledTick:
    t: float  # seconds
    frames: dict[str, Frame]


@dataclass(slots=True)
class TickAssembler:
    lateness_s: float
    _pending: dict[str, list[Frame]] = field(default_factory=lambda: defaultdict(list))
    _watermark_ns: int | None = None  # everything at or before this was released
    _newest_ns: int | None = None
    late_rows: int = 0
    cap_ns: int | None = None  # release nothing newer than this (the slowest source's clock)

    def add(self, frames: dict[str, Frame]) -> list[Frame]:
        """Buffer frames; returns the rows that came too late (already-released ticks)."""
        late: list[Frame] = []
        for name, incoming in frames.items():
            frame = incoming
            if not len(frame):
                continue
            if self._watermark_ns is not None:
                old = frame.time_ns <= self._watermark_ns
                if old.any():
                    late.append(frame.take(np.flatnonzero(old)))
                    self.late_rows += int(old.sum())
                    frame = frame.take(np.flatnonzero(~old))
                    if not len(frame):
                        continue
            self._pending[name].append(frame)
            newest = int(frame.time_ns.max())
            self._newest_ns = newest if self._newest_ns is None else max(self._newest_ns, newest)
        return late

    def ready(self) -> Iterator[AssembledTick]:
        """Ticks older than the newest timestamp by more than `lateness`, oldest first (with no
        lateness: every tick before the newest, which may still be arriving)."""
        if self._newest_ns is None:
            return
        newest = self._newest_ns if self.cap_ns is None else min(self._newest_ns, self.cap_ns)
        yield from self._release(newest - int(self.lateness_s * 1e9) - 1)

    def flush(self) -> Iterator[AssembledTick]:
        """Everything still held (end of input)."""
        if self._newest_ns is not None:
            yield from self._release(self._newest_ns)

    def _release(self, upto_ns: int) -> Iterator[AssembledTick]:
        by_time: dict[int, dict[str, Frame]] = defaultdict(dict)
        for name, parts in list(self._pending.items()):
            if not parts:
                continue
            frame = concat(parts) if len(parts) > 1 else parts[0]
            due = frame.time_ns <= upto_ns
            if not due.any():
                self._pending[name] = [frame]
                continue
            rest = np.flatnonzero(~due)
            self._pending[name] = [frame.take(rest)] if len(rest) else []
            released = frame.take(np.flatnonzero(due))
            times, inverse = np.unique(released.time_ns, return_inverse=True)
            order = np.argsort(inverse, kind="stable")
            bounds = np.flatnonzero(np.diff(inverse[order])) + 1
            for rows in np.split(order, bounds):
                by_time[int(times[inverse[rows[0]]])][name] = released.take(rows)
        for ts in sorted(by_time):
            self._watermark_ns = ts if self._watermark_ns is None else max(self._watermark_ns, ts)
            yield AssembledTick(ts / 1e9, by_time[ts])


@dataclass(slots=True)
class PartitionClock:
    """The newest event time each source (topic partition) has delivered; `cap` is the slowest.
    Sources that never delivered do not hold the stream back (an empty partition stays empty), nor
    do sources more than `stall_s` behind the fastest: a partition whose producers all went quiet
    must not stop the analysis of everything else."""

    stall_s: float = 1800.0
    newest_ns: dict[object, int] = field(default_factory=dict)

    def observe(self, stamps: list[tuple[object, int]]) -> int | None:
        """(source, event time in ms) per message; returns the cap in ns."""
        for source, ms in stamps:
            ns = int(ms) * 1_000_000
            if ns > self.newest_ns.get(source, -1):
                self.newest_ns[source] = ns
        if not self.newest_ns:
            return None
        floor = max(self.newest_ns.values()) - int(self.stall_s * 1e9)
        return min(ns for ns in self.newest_ns.values() if ns >= floor)
