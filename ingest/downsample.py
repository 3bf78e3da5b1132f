"""Raw telemetry to the store per window instead of per scrape: the storage choice at scale.

A 100,000-GPU cluster scraped every 10 s sends ~715k values/s; InfluxDB OSS on one machine takes
a fraction of that (docs/ingest.md, "Storage at scale"). Raw telemetry at full resolution stays
in Kafka for replay; this FrameSink wrapper writes one point per series per aligned window
[k*W, (k+1)*W) of event time, stamped at the window start:

- gauges: the mean under the field's own name (dashboards keep working), `<field>_max` and
  `<field>_min` beside it (a temperature's peak, an optic's dip survive the window);
- counters, text and booleans: the last value by time (a cumulative counter's last value loses
  nothing: the rate over any span of whole windows is the same);
- states (an enumeration or bitmask: an XID code, a link up or down): the last value under the
  field's own name (a mean of 1 = OK and 0 = failed is no state) with `_max` and `_min`, so an XID
  or a link down for one scrape of the window is still seen.

Windows close per stream (a Kafka partition) once the stream's event time has passed the window's
end plus a lateness. Rows of a window already closed are counted (`late_for_window`), never
written: a second, partial aggregate would overwrite the complete one. Rows of open windows are
only in memory, so `held()` says, per stream, the first offset that still has rows in an open
window: the consumer commits only up to there and a restart reads those messages again. A
restarted reader treats every window before the first one a stream shows it as closed (written
before the restart; `repeated_after_restart`), so re-read rows of an older window do not
overwrite its stored aggregate with a partial one.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from ingest.frames import Column, Frame, concat
from ingest.pipeline import FrameSink, IngestStats
from vocab.catalog import FieldType, MetricKind, measurement

# How long a window stays open after its end, in event time: a collector's flush interval plus
# broker delay, as the detection daemons hold a tick (AIOPS_TICK_LATENESS_S defaults to 60 s too)
DEFAULT_LATENESS_S = 60.0
# A stream's event time, per batch: this percentile of the batch's row times, not the newest, so
# one host whose clock runs minutes ahead cannot close everyone's windows early (the detection
# daemons judge a partition's progress the same way)
WATERMARK_PERCENTILE = 90.0

_NUMERIC = (FieldType.FLOAT, FieldType.INT, FieldType.UINT)


@dataclass(eq=False, slots=True)
class _Piece:
    """Rows of one measurement from one batch of a stream, waiting for their windows."""

    frame: Frame
    window: NDArray[np.int64]  # window index of each row
    offset: NDArray[np.int64] | None  # the Kafka offset each row came from (None: not from Kafka)
    # the earliest window and offset, so that a flush or a commit skips a piece without a pass
    # over its rows (a partition's open windows hold many pieces: one per poll)
    first_window: int = field(init=False)
    first_offset: int | None = field(init=False)

    def __post_init__(self) -> None:
        self.first_window = int(self.window.min()) if len(self.window) else 0
        self.first_offset = int(self.offset.min()) if self.offset is not None and len(self.offset) else None


@dataclass(slots=True)
class _Stream:
    first_window: int  # windows before this were closed before this reader started
    closed_before: int  # windows before this are closed
    watermark_ns: int | None = None
    pieces: list[_Piece] = field(default_factory=list)


class Downsampler:
    """A FrameSink that aggregates each series per window and writes the aggregates to `inner`.

    Use `write_stream` with the stream (partition) and each row's offset; plain `write` is one
    stream without offsets (a file, tests). `flush` closes the windows whose time has come, hands
    their aggregates to `inner` and flushes it. Counters go to `stats`: rows folded into
    aggregates (`aggregated_rows`), the points that stand for them (`aggregate_points`), rows
    waiting in open windows (`open_rows`), rows for closed windows (`late_for_window`,
    `repeated_after_restart`) and rows a rebalance took away (`released_rows`)."""

    def __init__(
        self,
        inner: FrameSink,
        window_s: float,
        lateness_s: float = DEFAULT_LATENESS_S,
        stats: IngestStats | None = None,
    ) -> None:
        if window_s <= 0:
            raise ValueError(f"a downsampling window must be positive, got {window_s}")
        if lateness_s < 0:
            raise ValueError(f"a lateness cannot be negative, got {lateness_s}")
        self.inner = inner
        self.window_ns = round(window_s * 1e9)
        self.lateness_ns = round(lateness_s * 1e9)
        self.stats = stats if stats is not None else IngestStats()
        self._streams: dict[Hashable, _Stream] = {}

    @property
    def quiet_after_s(self) -> float:
        """A stream quiet for a whole window and its lateness has stopped (its collectors, or a
        replay ended): its open windows are closed then, as the detection daemons let their
        held ticks go. Shorter would cut windows at every gap between two scrapes."""
        return (self.window_ns + self.lateness_ns) / 1e9

    # ------------------------------------------------------------ rows in

    def write(self, frames: dict[str, Frame]) -> None:
        self.write_stream(frames, None, None)

    def write_stream(
        self, frames: Mapping[str, Frame], stream: Hashable, offsets: Mapping[str, NDArray[np.int64]] | None
    ) -> None:
        """Rows of one stream (a partition's messages of a poll), each with the offset of the
        message it came from (`offsets[measurement]`, row for row; None: not from Kafka)."""
        pieces = self._pieces(frames, offsets)
        if not pieces:
            return
        state = self._streams.get(stream)
        if state is None:
            first = _first_window(pieces)
            state = self._streams[stream] = _Stream(first_window=first, closed_before=first)
        times = np.concatenate([p.frame.time_ns for p in pieces])
        batch_time = int(np.percentile(times, WATERMARK_PERCENTILE, method="higher"))
        state.watermark_ns = batch_time if state.watermark_ns is None else max(state.watermark_ns, batch_time)
        for piece in pieces:
            kept = self._drop_closed(piece, state)
            if kept is not None:
                state.pieces.append(kept)
                self.stats.open_rows += len(kept.frame)

    def _pieces(self, frames: Mapping[str, Frame], offsets: Mapping[str, NDArray[np.int64]] | None) -> list[_Piece]:
        """The batch's rows that carry a value, with their windows; all-blank rows store nothing."""
        out = []
        for name, frame in frames.items():
            has_value = np.zeros(len(frame), dtype=np.bool_)
            for col in frame.fields.values():
                has_value |= col.present
            self.stats.blank_rows += int(len(frame) - has_value.sum())
            if not has_value.any():
                continue
            keep = np.flatnonzero(has_value)
            row_offsets = offsets.get(name) if offsets is not None else None
            out.append(
                _Piece(
                    frame.take(keep) if len(keep) < len(frame) else frame,
                    frame.time_ns[keep] // self.window_ns,
                    row_offsets[keep] if row_offsets is not None else None,
                )
            )
        return out

    def _drop_closed(self, piece: _Piece, state: _Stream) -> _Piece | None:
        """The piece without its rows for windows already closed (counted); None if none is left."""
        if piece.first_window >= state.closed_before:
            return piece
        closed = piece.window < state.closed_before
        if not closed.any():
            return piece
        before_start = piece.window < state.first_window
        self.stats.repeated_after_restart += int(before_start.sum())
        self.stats.late_for_window += int((closed & ~before_start).sum())
        return _take(piece, np.flatnonzero(~closed)) if not closed.all() else None

    # ------------------------------------------------------------ windows out

    def flush(self) -> Sequence[tuple[bytes, str]]:
        """Close every window whose stream's time passed its end plus the lateness, hand the
        aggregates to the inner sink, and flush it (raising, as it does, while the store is away:
        the aggregates stay in its buffer)."""
        for state in self._streams.values():
            if state.watermark_ns is not None:
                boundary = (state.watermark_ns - self.lateness_ns) // self.window_ns
                state.closed_before = max(state.closed_before, boundary)
        self._close()
        return self.inner.flush()

    def close_all(self) -> None:
        """Close every open window (the input went quiet, or a replay ended): what arrived is
        what there is. Rows that come later for those windows are late."""
        for state in self._streams.values():
            if state.pieces:
                newest = max(int(p.window.max()) for p in state.pieces)
                state.closed_before = max(state.closed_before, newest + 1)
        self._close()

    def _close(self) -> None:
        closing: dict[str, list[_Piece]] = {}
        for state in self._streams.values():
            still_open = []
            for piece in state.pieces:
                if piece.first_window >= state.closed_before:
                    still_open.append(piece)
                    continue
                done = piece.window < state.closed_before
                if done.any():
                    closing.setdefault(piece.frame.measurement, []).append(_take(piece, np.flatnonzero(done)))
                if not done.all():
                    still_open.append(_take(piece, np.flatnonzero(~done)) if done.any() else piece)
            state.pieces = still_open
        aggregates: dict[str, Frame] = {}
        for name, pieces in closing.items():
            frame = concat([p.frame for p in pieces])
            window = np.concatenate([p.window for p in pieces])
            aggregates[name] = aggregate(frame, window, self.window_ns)
            self.stats.open_rows -= len(frame)
            self.stats.aggregated_rows += len(frame)
            self.stats.aggregate_points += len(aggregates[name])
        if aggregates:
            self.inner.write(aggregates)

    # ------------------------------------------------------------ offsets

    def held(self) -> dict[Hashable, int]:
        """Per stream with rows in open windows, the first offset that has one: a commit must not
        go past it (those rows are only in memory)."""
        out: dict[Hashable, int] = {}
        for stream, state in self._streams.items():
            firsts = [p.first_offset for p in state.pieces if p.first_offset is not None]
            if firsts:
                out[stream] = min(firsts)
        return out

    def forget(self, streams: Iterable[Hashable]) -> None:
        """Streams this reader no longer reads (a rebalance took the partitions): their open rows
        are dropped unwritten; the partition's next owner reads them again from the commit."""
        for stream in streams:
            state = self._streams.pop(stream, None)
            if state is not None:
                released = sum(len(p.frame) for p in state.pieces)
                self.stats.open_rows -= released
                self.stats.released_rows += released


def _first_window(pieces: list[_Piece]) -> int:
    """The first window a stream shows this reader: that of its first message (the one a commit
    stopped at holds rows of the earliest window still open then), or of the batch's earliest row
    when the rows carry no offsets."""
    offsets = [p.offset for p in pieces if p.offset is not None and len(p.offset)]
    if not offsets:
        return min(int(p.window.min()) for p in pieces)
    first = min(int(o.min()) for o in offsets)
    return min(
        int(p.window[p.offset == first].min()) for p in pieces if p.offset is not None and (p.offset == first).any()
    )


def _take(piece: _Piece, index: NDArray[np.intp]) -> _Piece:
    return _Piece(
        piece.frame.take(index), piece.window[index], piece.offset[index] if piece.offset is not None else None
    )


# ---------------------------------------------------------------- the aggregation


def aggregate(frame: Frame, window: NDArray[np.int64], window_ns: int) -> Frame:
    """One row per series (the measurement's tag set) and window, stamped at the window start.

    Rows of one series and timestamp are first merged field by field, the row that came last
    winning, as InfluxDB merges points (a sample split across lines, a message delivered twice),
    so an aggregate is that of exactly what full resolution would have stored."""
    group = _groups(frame, window)
    order = np.lexsort((np.arange(len(frame)), frame.time_ns, group))  # by series-window, time, arrival
    g, t = group[order], frame.time_ns[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    repeats = (g[1:] == g[:-1]) & (t[1:] == t[:-1])
    spec = measurement(frame.measurement)
    out: dict[str, Column] = {}
    extremes: dict[str, Column] = {}
    for name, col in frame.fields.items():
        values, present = col.values[order], col.present[order]
        sample_starts = starts
        if repeats.any():
            values, present, sample_starts = _merge_samples(values, present, g, t, starts)
        metric = spec.metric(name) if spec is not None else None
        kind = metric.kind if metric is not None else MetricKind.GAUGE  # unknown numeric fields: gauges
        if col.type not in _NUMERIC or kind is MetricKind.COUNTER:
            out[name] = _last(col.type, values, present, sample_starts)
            continue
        if kind is MetricKind.STATE:
            out[name] = _last(col.type, values, present, sample_starts)
        else:
            out[name] = _mean(col.type, values, present, sample_starts)
        extremes.update(_extremes(name, col.type, values, present, sample_starts))
    for name, col in extremes.items():  # a field the input itself has under such a name keeps its own
        out.setdefault(name, col)
    first = order[starts]
    tags = {k: v[first] for k, v in frame.tags.items()}
    return Frame(frame.measurement, window[first] * window_ns, tags, out)


def _groups(frame: Frame, window: NDArray[np.int64]) -> NDArray[np.int64]:
    """A dense id per (tag set, window). A missing tag is the empty string, as InfluxDB leaves an
    absent tag out of the series key."""
    key = pd.factorize(window)[0].astype(np.int64)
    for values in frame.tags.values():
        codes, uniques = pd.factorize(values)
        # combined and made dense again each step, so the mixed-radix key never overflows
        key = pd.factorize(key * (len(uniques) + 1) + codes.astype(np.int64))[0].astype(np.int64)
    return key


def _merge_samples(
    values: NDArray[np.generic],
    present: NDArray[np.bool_],
    g: NDArray[np.int64],
    t: NDArray[np.int64],
    starts: NDArray[np.intp],
) -> tuple[NDArray[np.generic], NDArray[np.bool_], NDArray[np.intp]]:
    """Rows (sorted by group, time, arrival) of one group and time merged into one sample: per
    field the last present value. Returns the samples and where each group's samples start."""
    n = len(g)
    new_sample = np.r_[True, (g[1:] != g[:-1]) | (t[1:] != t[:-1])]
    sample_starts = np.flatnonzero(new_sample)
    last = np.maximum.reduceat(np.where(present, np.arange(n), -1), sample_starts)
    has = last >= 0
    merged = values[np.where(has, last, sample_starts)]
    sample_of_row = np.cumsum(new_sample) - 1
    return merged, has, sample_of_row[starts].astype(np.intp)


def _last(
    ftype: FieldType, values: NDArray[np.generic], present: NDArray[np.bool_], starts: NDArray[np.intp]
) -> Column:
    """The last present value of each group (rows sorted by time within a group)."""
    last = np.maximum.reduceat(np.where(present, np.arange(len(values)), -1), starts)
    has = last >= 0
    return Column(ftype, values[np.where(has, last, 0)], has)


def _mean(
    ftype: FieldType, values: NDArray[np.generic], present: NDArray[np.bool_], starts: NDArray[np.intp]
) -> Column:
    """The mean of each group's present values. An integer field keeps its type (rounded to the
    nearest): InfluxDB refuses a float for a field a shard already holds as an integer, so a site
    turning downsampling on mid-shard would have every point refused; half a MHz, a percent or a
    MiB is below what those fields resolve anyway."""
    as_float = np.where(present, values.astype(np.float64), 0.0)
    count = np.add.reduceat(present.astype(np.int64), starts)
    total = np.add.reduceat(as_float, starts)
    has = count > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(has, total / np.maximum(count, 1), 0.0)
    if ftype is FieldType.FLOAT:
        return Column(ftype, mean, has)
    dtype = np.int64 if ftype is FieldType.INT else np.uint64
    return Column(ftype, np.rint(mean).astype(dtype), has)


def _extremes(
    name: str, ftype: FieldType, values: NDArray[np.generic], present: NDArray[np.bool_], starts: NDArray[np.intp]
) -> dict[str, Column]:
    """`<name>_max` and `<name>_min` of each group, in the field's own type (exact, no rounding)."""
    typed = np.asarray(values)
    low: float | int
    high: float | int
    if ftype is FieldType.FLOAT:
        low, high = -np.inf, np.inf
    else:
        info = np.iinfo(typed.dtype)
        low, high = int(info.min), int(info.max)
    has = np.add.reduceat(present.astype(np.int64), starts) > 0
    top = np.maximum.reduceat(np.where(present, typed, low), starts).astype(typed.dtype)
    bottom = np.minimum.reduceat(np.where(present, typed, high), starts).astype(typed.dtype)
    return {f"{name}_max": Column(ftype, top, has), f"{name}_min": Column(ftype, bottom, has)}
