"""Check decoded frames against the metric catalog and against each entity's clock.

Decoding accepts any valid line protocol; this stage decides what the service can use:
- a measurement the catalog does not know, or a row without its entity id tag, is dead-lettered;
- a catalog field of the wrong kind of type (text where a number belongs) dead-letters the row;
  numeric types are converted to the catalog's (exporters disagree on 1 vs 1i);
- DCGM "blank" sentinels become missing values (counted): they mean "no reading", and a detector
  fed 9.2e18 as a temperature would alarm forever;
- a row whose timestamp is not newer than the last accepted one for the same entity is dead-
  lettered as a duplicate or as out of order (event time only ever moves forward per entity).
Fields the catalog does not list are kept: they are stored raw, detectors ignore them.
"""

from __future__ import annotations

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
from vocab.entities import EntityIndex

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


class Validator:
    """Stateful only in the per-entity clocks; everything else is a pure function of the batch."""

    def __init__(self) -> None:
        self._clocks: dict[str, _EntityClock] = {}

    def __call__(self, decoded: Decoded) -> Validated:
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
            fields: dict[str, Column] = {}
            for key, col in decoded_frame.fields.items():
                metric = spec.metric(key)
                if metric is None or metric.type == col.type:
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
            clock = self._clocks.setdefault(name, _EntityClock())
            late = clock.check(ids, frame.time_ns, keep)
            for row, reason in late.items():
                reasons.setdefault(row, reason)
                keep[row] = False
            out.rejects += [
                RowReject("validate" if "order" not in why and "duplicate" not in why else "order", int(rows[r]), why)
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
        values = np.where(col.present, col.values, 0).astype(dtype)
    present = col.present.copy()
    if target != FieldType.FLOAT:  # a float like 1.5 sent for an integer field is kept rounded down
        present &= np.isfinite(col.values.astype(np.float64))
    return Column(target, values, present)


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


class _EntityClock:
    """The newest accepted timestamp of each entity, in an array indexed by entity."""

    def __init__(self) -> None:
        self.entities = EntityIndex()
        self.last_ns = np.zeros(0, dtype=np.int64)

    def check(
        self, ids: NDArray[np.object_], time_ns: NDArray[np.int64], candidate: NDArray[np.bool_]
    ) -> dict[int, str]:
        """Rows (among candidates) that are not newer than what their entity already has."""
        rows = np.flatnonzero(candidate)
        if not len(rows):
            return {}
        idx = self.entities.add(ids[rows])
        if len(self.entities) > len(self.last_ns):
            grown = np.full(len(self.entities), np.iinfo(np.int64).min, dtype=np.int64)
            grown[: len(self.last_ns)] = self.last_ns
            self.last_ns = grown
        t = time_ns[rows]
        before = np.maximum(self.last_ns[idx], _previous_max_in_group(idx, t))
        stale = t <= before
        bad: dict[int, str] = {}
        for r in np.flatnonzero(stale):
            if t[r] == before[r]:
                bad[int(rows[r])] = f"duplicate timestamp for {ids[rows[r]]}"
            else:
                bad[int(rows[r])] = (
                    f"out of order for {ids[rows[r]]}: {(before[r] - t[r]) / 1e9:g} s older than its last sample"
                )
        ok = ~stale
        np.maximum.at(self.last_ns, idx[ok], t[ok])
        return bad


def _previous_max_in_group(group: NDArray[np.int64], values: NDArray[np.int64]) -> NDArray[np.int64]:
    """For each row, the largest value among earlier rows of its group (int64 min if none).

    Exact for int64 (nanosecond times do not survive a round trip through float64): rank the
    values, encode (group, rank) in one monotonic key, and take a running maximum.
    """
    n = len(values)
    floor = np.iinfo(np.int64).min
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(group, kind="stable")
    g, v = group[order], values[order]
    uniques, rank = np.unique(v, return_inverse=True)
    running = np.maximum.accumulate(g * n + rank)
    prev = np.empty(n, dtype=np.int64)
    prev[0] = floor
    prev[1:] = uniques[running[:-1] % n]
    starts = np.ones(n, dtype=np.bool_)
    starts[1:] = g[1:] != g[:-1]
    prev[starts] = floor
    out = np.empty(n, dtype=np.int64)
    out[order] = prev
    return out
