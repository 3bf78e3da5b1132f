"""The ingest core: bytes in, validated frames and dead letters out, with counters.

Pure apart from the validator's per-entity clocks, so the daemon (Kafka), the offline runner (a
file) and the embedded demo (an in-process queue) all run the same code, and it can be tested
without services.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from ingest.deadletter import DeadLetter, Source
from ingest.frames import Frame
from ingest.lineprotocol import DefaultTime, decode
from ingest.validate import LATENESS_BOUND_S, Validator


@dataclass(slots=True)
class IngestStats:
    """Cumulative counters; written to InfluxDB as measurement `aiops_ingest`.

    Every line is accounted for: once the writer has flushed,
    lines == written + deadlettered + dropped + blank_rows
             + late_for_window + repeated_after_restart + open_rows + released_rows
             + (aggregated_rows - aggregate_points).
    At full resolution the second and third rows are zero. Downsampled (ingest/downsample.py),
    the database takes one point per series and window, standing for several rows: the last
    term is the rows folded away, and `written` and refused lines count points.
    """

    lines: int = 0
    values: int = 0
    rejected: int = 0  # not valid line protocol
    deadlettered: int = 0  # everything dead-lettered, any stage
    sentinels_masked: int = 0
    uncatalogued_values: int = 0  # stored as they came: fields a collector sends beyond the catalog
    written: int = 0  # lines the database accepted
    retried: int = 0  # write attempts repeated after a 5xx or a timeout
    dropped: int = 0  # lines lost: none since the store keeps them until written (Kafka is the buffer)
    blank_rows: int = 0  # rows whose every value was a blank sentinel: nothing to store
    # downsampling (ingest/downsample.py); all zero at full resolution
    aggregated_rows: int = 0  # rows folded into window aggregates handed to the store
    aggregate_points: int = 0  # the points (one per series and window) that stand for them
    open_rows: int = 0  # rows waiting in memory for their window to close (a level, not a count)
    late_for_window: int = 0  # rows for a window already closed and written: counted, not written
    repeated_after_restart: int = 0  # rows of a window written before this reader started: stored
    released_rows: int = 0  # rows of open windows a rebalance took away: read again by the next owner
    reasons: Counter[str] = field(default_factory=Counter)

    def as_fields(self) -> dict[str, int]:
        return {
            "lines": self.lines,
            "values": self.values,
            "rejected": self.rejected,
            "deadlettered": self.deadlettered,
            "sentinels_masked": self.sentinels_masked,
            "uncatalogued_values": self.uncatalogued_values,
            "written": self.written,
            "retried": self.retried,
            "dropped": self.dropped,
            "blank_rows": self.blank_rows,
            "aggregated_rows": self.aggregated_rows,
            "aggregate_points": self.aggregate_points,
            "open_rows": self.open_rows,
            "late_for_window": self.late_for_window,
            "repeated_after_restart": self.repeated_after_restart,
            "released_rows": self.released_rows,
        }


@dataclass(slots=True)
class Batch:
    frames: dict[str, Frame]
    deadletters: list[DeadLetter]
    # per measurement, the batch line each row came from (to tell which message it was)
    line_no: dict[str, NDArray[np.int64]] = field(default_factory=dict)

    @property
    def value_count(self) -> int:
        return sum(f.value_count for f in self.frames.values())


class SinkUnavailableError(RuntimeError):
    """The store cannot take writes now; nothing was dropped (the consumer waits and retries)."""


class FrameSink(Protocol):
    def write(self, frames: dict[str, Frame]) -> None: ...

    def flush(self) -> Sequence[tuple[bytes, str]]:
        """Store what was written; returns the lines refused for good with the reason, raises
        SinkUnavailableError (keeping them) while the store is away."""
        ...


@runtime_checkable
class WindowedSink(FrameSink, Protocol):
    """A sink that keeps rows in memory until their window closes (ingest/downsample.py): it is
    told which stream (partition) rows came from and each row's offset, and says which offsets
    it still holds, so the consumer commits nothing it has not stored."""

    def write_stream(
        self, frames: Mapping[str, Frame], stream: Hashable, offsets: Mapping[str, NDArray[np.int64]] | None
    ) -> None: ...

    def held(self) -> dict[Hashable, int]: ...

    @property
    def quiet_after_s(self) -> float:
        """How long the input must be quiet before the open windows are closed anyway."""
        ...

    def close_all(self) -> None: ...

    def forget(self, streams: Iterable[Hashable]) -> None: ...


class DeadLetterSink(Protocol):
    def add(self, letters: Sequence[DeadLetter]) -> None: ...

    def flush(self, should_stop: Callable[[], bool] | None = None) -> None:
        """Publish what was added; with `should_stop`, wait out a broker that is away."""
        ...


SourceOf = Callable[[int], Source | None]


class IngestCore:
    def __init__(self, stats: IngestStats | None = None, lateness_bound_s: float = LATENESS_BOUND_S) -> None:
        self.validator = Validator(lateness_bound_s)
        self.stats = stats if stats is not None else IngestStats()

    def process(
        self,
        data: bytes,
        default_time_ns: DefaultTime = None,
        source_of: SourceOf | None = None,
        stream: object = None,
        record_ends: Sequence[int] | NDArray[np.int64] | None = None,
    ) -> Batch:
        """Decode and validate one batch of line protocol.

        `source_of(line_no)` tells where a batch line came from (Kafka partition and offset), so
        a dead letter points back at its message. `stream`: the partition the whole batch was
        read from, whose own event time its rows are judged against (None: one stream).
        `record_ends`: where the messages the batch was joined from end (no record runs past one).
        """
        decoded = decode(data, default_time_ns, record_ends)
        validated = self.validator(decoded, stream=stream)

        def where(line_no: int) -> Source | None:
            return source_of(line_no) if source_of is not None else None

        letters = [DeadLetter("decode", r.reason, r.line, where(r.line_no)) for r in decoded.rejects]
        letters += [DeadLetter(r.stage, r.reason, decoded.line(r.line_no), where(r.line_no)) for r in validated.rejects]
        batch = Batch(validated.frames, letters, validated.line_no)
        s = self.stats
        s.lines += decoded.lines
        s.values += batch.value_count
        s.rejected += len(decoded.rejects)
        s.deadlettered += len(letters)
        s.sentinels_masked += validated.sentinels_masked
        s.uncatalogued_values += validated.uncatalogued_values
        s.reasons.update(letter.category for letter in letters)
        return batch


class MemoryFrameSink:
    """Keeps what it is given: the embedded demo's and the tests' sink."""

    def __init__(self) -> None:
        self.batches: list[dict[str, Frame]] = []

    def write(self, frames: dict[str, Frame]) -> None:
        self.batches.append(frames)

    def flush(self) -> Sequence[tuple[bytes, str]]:
        return []


class MemoryDeadLetterSink:
    def __init__(self) -> None:
        self.letters: list[DeadLetter] = []

    def add(self, letters: Sequence[DeadLetter]) -> None:
        self.letters.extend(letters)

    def flush(self, should_stop: Callable[[], bool] | None = None) -> None:
        pass
