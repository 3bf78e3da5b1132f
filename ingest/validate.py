"""Check decoded frames against the metric catalog and against each entity's clock.

Decoding accepts any valid line protocol; this stage decides what the service can use:
- a measurement the catalog does not know, or a row without its entity id tag, is dead-lettered;
- a catalog field of the wrong kind of type (text where a number belongs) dead-letters the row;
  numeric types are converted to the catalog's (exporters disagree on 1 vs 1i);
- DCGM "blank" sentinels become missing values (counted): they mean "no reading", and a detector
  fed 9.2e18 as a temperature would alarm forever;
- a row further behind or ahead of the stream's event time than the lateness bound (a setting)
  is dead-lettered: it cannot be placed (a clock years off, a replay of last month).
Everything else is kept, as a time-series database keeps it: rows of one entity and timestamp
(Telegraf's one-line-per-sample output, a sample split across messages) are merged later, field
by field; a row late for its tick but inside the bound is stored and left out of detection by the
tick assembler. Fields the catalog does not list are kept: stored raw, detectors ignore them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from ingest.frames import Column, Frame
from ingest.lineprotocol import Decoded
from vocab.catalog import (
    DCGM_FP64_BLANK,
    DCGM_INT32_BLANK,
    DCGM_INT64_BLANK,
    FieldType,
    Measurement,
    MetricKind,
    measurement,
)
from vocab.entities import id_problem

_NUMERIC = (FieldType.FLOAT, FieldType.INT, FieldType.UINT)


@dataclass(frozen=True, slots=True)
class RowReject:
    stage: str
    line_no: int
    reason: str


@dataclass(slots=True)
class Validated:
    frames: dict[str, Frame] = field(default_factory=dict)
    line_no: dict[str, NDArray[np.int64]] = field(default_factory=dict)
    rejects: list[RowReject] = field(default_factory=list)
    sentinels_masked: int = 0
    uncatalogued_values: int = 0  # values of fields the catalog does not know: stored, counted


# How far a point may be from the stream's event time and still be stored: an hour covers a
# collector's buffer replayed after an outage, and dead-letters a clock that is days or years off.
LATENESS_BOUND_S = 3600.0


class Validator:
    """Stateful only in the stream's event-time watermark; everything else is a pure function of
    the batch."""

    def __init__(self, lateness_bound_s: float = LATENESS_BOUND_S) -> None:
        self.clock = _StreamClock(int(lateness_bound_s * 1e9))

    def __call__(self, decoded: Decoded, check_ids: bool = True) -> Validated:
        """`check_ids=False` when the raw batch holds no control byte and no line longer than
        an id may be (IngestCore checks that on the bytes, in one vectorised pass)."""
        out = Validated()
        for name, decoded_frame in decoded.frames.items():
            rows = decoded.line_no[name]
            spec = measurement(name)
            if spec is None:
                out.rejects += [RowReject("validate", int(i), f"unknown measurement {name!r}") for i in rows]
                continue
            keep = np.ones(len(decoded_frame), dtype=np.bool_)
            reasons: dict[int, str] = {}
            ids = decoded_frame.tag(spec.id_tag)
            missing_id = ids == ""
            for r in np.flatnonzero(missing_id):
                reasons[int(r)] = f"missing entity id tag {spec.id_tag!r}"
            keep &= ~missing_id
            if check_ids:
                for row, entity_id in enumerate(ids.tolist()):
                    problem = id_problem(entity_id) if entity_id else None
                    if problem:
                        reasons[row] = f"{spec.id_tag}: {problem}"
                        keep[row] = False
            fields: dict[str, Column] = {}
            for key, col in decoded_frame.fields.items():
                metric = spec.metric(key)
                if metric is None:
                    fields[key] = col
                    out.uncatalogued_values += int(col.present.sum())
                elif metric.type == col.type:
                    fields[key] = col
                elif metric.type in _NUMERIC and col.type in _NUMERIC:
                    fields[key] = _convert(col, metric.type)
                else:
                    wrong = col.present & keep
                    for r in np.flatnonzero(wrong):
                        reasons.setdefault(int(r), f"field {key!r} should be {metric.type}, got {col.type}")
                    keep &= ~wrong
            frame = Frame(name, decoded_frame.time_ns, decoded_frame.tags, fields)
            if spec.name == "gpu":
                out.sentinels_masked += _mask_dcgm_blanks(frame, spec)
            for row, reason in self.clock.check(frame.time_ns, keep).items():
                reasons.setdefault(row, reason)
                keep[row] = False
            out.rejects += [
                RowReject("lateness" if why.startswith("outside the lateness bound") else "validate", int(rows[r]), why)
                for r, why in sorted(reasons.items())
            ]
            if keep.all():
                out.frames[name], out.line_no[name] = frame, rows
            elif keep.any():
                index = np.flatnonzero(keep)
                out.frames[name], out.line_no[name] = frame.take(index), rows[index]
        return out


def _convert(col: Column, target: FieldType) -> Column:
    dtype = {FieldType.FLOAT: np.float64, FieldType.INT: np.int64, FieldType.UINT: np.uint64}[target]
    with np.errstate(invalid="ignore", over="ignore"):
        converted = np.where(col.present, col.values, 0).astype(dtype)
    if target != FieldType.FLOAT and col.type == FieldType.FLOAT:
        # A DCGM int64 blank (0x7ffffffffffffff0) that went through a float (Telegraf's prometheus
        # input makes every sample a float) arrives as 9223372036854776000, past the integer
        # range: a plain cast wraps it to -2**63. Saturate instead, so the blank check sees it.
        top = np.iinfo(np.int64 if target == FieldType.INT else np.uint64).max
        converted[col.present & (np.asarray(col.values, dtype=np.float64) >= float(top))] = top
    present = col.present.copy()
    if target != FieldType.FLOAT:  # a float like 1.5 sent for an integer field is kept rounded down
        present &= np.isfinite(col.values.astype(np.float64))
    return Column(target, converted, present)


def _mask_dcgm_blanks(frame: Frame, spec: Measurement) -> int:
    """Turn DCGM blank sentinels into missing values, in place; returns how many."""
    masked = 0
    for key, col in frame.fields.items():
        metric = spec.metric(key)
        if metric is None or col.type in (FieldType.STRING, FieldType.BOOL):
            continue
        values = np.asarray(col.values)
        if col.type == FieldType.FLOAT:
            blank = values >= DCGM_FP64_BLANK
        elif metric.kind is MetricKind.COUNTER:  # 64-bit counters
            blank = values >= DCGM_INT64_BLANK
        else:  # 32-bit gauges and states
            blank = values >= DCGM_INT32_BLANK
        blank &= col.present
        if blank.any():
            col.present = col.present & ~blank
            masked += int(blank.sum())
    return masked


class _StreamClock:
    """The stream's event time (the newest accepted timestamp), and the rows too far from it.

    The first batch, and a batch whose bulk jumped past the bound (the stream resuming after an
    outage), are judged against their own median timestamp, so one line from a broken clock can
    neither set the watermark nor be accepted with it. Nothing may be further ahead of the wall
    clock than the bound either: a batch of one line stamped in the year 2226 would otherwise set
    the watermark and push every real line behind it."""

    def __init__(self, bound_ns: int, wall_ns: Callable[[], int] = time.time_ns) -> None:
        self.bound_ns = bound_ns
        self.watermark_ns: int | None = None
        self._wall_ns = wall_ns

    def check(self, time_ns: NDArray[np.int64], candidate: NDArray[np.bool_]) -> dict[int, str]:
        rows = np.flatnonzero(candidate)
        if not len(rows):
            return {}
        bad: dict[int, str] = {}
        now = self._wall_ns()
        future = time_ns[rows] > now + self.bound_ns
        for r in rows[future].tolist():
            bad[int(r)] = (
                f"outside the lateness bound: {(int(time_ns[r]) - now) / 1e9:.0f} s ahead of the wall clock "
                f"(bound {self.bound_ns / 1e9:g} s)"
            )
        rows = rows[~future]
        if not len(rows):
            return bad
        t = time_ns[rows]
        median = int(np.median(t))
        reference = self.watermark_ns
        if reference is None or median > reference + self.bound_ns:
            reference = median
        behind, ahead = t < reference - self.bound_ns, t > reference + self.bound_ns
        bound_s = self.bound_ns / 1e9
        for r in np.flatnonzero(behind | ahead).tolist():
            off = (int(t[r]) - reference) / 1e9
            where = "behind" if off < 0 else "ahead of"
            bad[int(rows[r])] = (
                f"outside the lateness bound: {abs(off):.0f} s {where} the stream's event time (bound {bound_s:g} s)"
            )
        ok = ~(behind | ahead)
        if ok.any():
            newest = int(t[ok].max())
            self.watermark_ns = newest if self.watermark_ns is None else max(self.watermark_ns, newest)
        return bad
