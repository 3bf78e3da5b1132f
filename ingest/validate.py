"""Check decoded frames against the metric catalog and against each entity's clock.

Decoding accepts any valid line protocol; this stage decides what the service can use:
- a measurement the catalog does not know, or a row without its entity id tag, is dead-lettered;
- a row whose entity id, `node` or `job` tag the id grammar (vocab.ids) refuses is dead-lettered
  naming the rule: `node=n[0-15]` is a host list to Slurm, and an action taken on that row's node
  would reach sixteen;
- a catalog field of the wrong kind of type (text where a number belongs) dead-letters the row;
  numeric types are converted to the catalog's (exporters disagree on 1 vs 1i);
- DCGM "blank" sentinels become missing values (counted), in catalogued fields and in `DCGM_*`
  fields the catalog does not list alike (ingest/dcgm_blanks.py): they mean "no reading", and a
  detector fed 9.2e18 as a temperature would alarm forever;
- a row further behind or ahead of the stream's event time than the lateness bound (a setting)
  is dead-lettered: it cannot be placed (a clock years off, a replay of last month).
Everything else is kept, as a time-series database keeps it: rows of one entity and timestamp
(Telegraf's one-line-per-sample output, a sample split across messages) are merged later, field
by field; a row late for its tick but inside the bound is stored and left out of detection by the
tick assembler. Fields the catalog does not list are kept: stored raw, detectors ignore them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from ingest.dcgm_blanks import blank_mask, is_string_blank, width_of
from ingest.frames import Column, Frame
from ingest.lineprotocol import Decoded
from vocab.catalog import FieldType, Measurement, measurement
from vocab.ids import Refusal, entity_refusal, job_refusal, node_refusal

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
# The stream's clock advances through a batch this many rows at a time: small enough that a block
# spans little event time even in a backlog (a tick of one partition is thousands of rows), large
# enough that a host with a broken clock (a message of a few dozen rows) cannot move its median
CLOCK_BLOCK_ROWS = 1024
# Ids the grammar accepted are remembered, so a batch costs one set lookup per distinct id, not a
# grammar check per row. A 10,000-GPU cluster has a few hundred thousand entities (GPUs, NICs,
# optics, ports) and far fewer nodes and jobs; past this many the memory starts over (the
# grammar only runs again), so a sender inventing a new id every line cannot grow it for ever.
MAX_REMEMBERED_IDS = 1 << 20

Grammar = Callable[[str], Refusal | None]


def id_grammar(tag: str, spec: Measurement) -> Grammar | None:
    """The grammar a tag's values must follow, or None for a tag that is no id (a rail index,
    a switch role). The node a part belongs to is a host name, stricter than an entity id."""
    if tag == "node":
        return node_refusal
    if tag == "job":  # a Slurm or Kubernetes job id, or "idle" (which the grammar accepts)
        return job_refusal
    if tag == spec.id_tag:
        return entity_refusal
    return None


class Validator:
    """Stateful only in the event-time watermark of each stream; everything else is a pure
    function of the batch.

    A stream is what is read in order: the whole file offline, one Kafka partition in a daemon.
    Partitions are read unevenly (catching up a backlog, one can be hours ahead of another), so
    each is judged against its own event time: against one watermark for all, the rows of a
    partition read later would all fall behind the bound and be dead-lettered."""

    def __init__(self, lateness_bound_s: float = LATENESS_BOUND_S) -> None:
        self._bound_ns = int(lateness_bound_s * 1e9)
        self.clocks: dict[object, _StreamClock] = {}
        self._accepted: dict[Grammar, set[str]] = {}  # ids each grammar accepted (MAX_REMEMBERED_IDS)

    def clock_of(self, stream: object = None) -> _StreamClock:
        clock = self.clocks.get(stream)
        if clock is None:
            clock = self.clocks[stream] = _StreamClock(self._bound_ns)
        return clock

    @property
    def clock(self) -> _StreamClock:
        """The clock of the default stream (a file, or batches that name no stream)."""
        return self.clock_of(None)

    def forget(self, streams: Iterable[object]) -> None:
        """Streams this reader no longer reads (partitions a rebalance took away)."""
        for stream in streams:
            self.clocks.pop(stream, None)

    def __call__(self, decoded: Decoded, stream: object = None) -> Validated:
        """`stream`: which stream the batch was read from (its rows are judged against that
        stream's time)."""
        out = Validated()
        checked: list[tuple[str, Frame, NDArray[np.int64], NDArray[np.bool_], dict[int, str]]] = []
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
            for key, values in decoded_frame.tags.items():
                grammar = id_grammar(key, spec)
                if grammar is None:
                    continue
                for row, why in self._refused(key, values, grammar).items():
                    reasons.setdefault(row, why)
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
            checked.append((name, frame, rows, keep, reasons))
        self._check_times(checked, stream)
        for name, frame, rows, keep, reasons in checked:
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

    def _refused(self, tag: str, values: NDArray[np.object_], grammar: Grammar) -> dict[int, str]:
        """The rows whose `tag` the grammar refuses, with the reason naming the tag and the rule.
        Each distinct value is checked once (and remembered if good); an empty value is an
        absent tag, which only the entity id tag may not be (checked before)."""
        codes, distinct = pd.factorize(values)
        accepted = self._accepted.setdefault(grammar, set())
        bad: dict[int, str] = {}
        for code, value in enumerate(distinct.tolist()):
            if value in accepted or value == "":
                continue
            refusal = grammar(value)
            if refusal is not None:
                bad[code] = f"{tag}: {refusal}"
                continue
            if len(accepted) >= MAX_REMEMBERED_IDS:
                accepted.clear()
            accepted.add(value)
        if not bad:
            return {}
        rows = np.flatnonzero(np.isin(codes, np.fromiter(bad, dtype=np.int64)))
        return {int(r): bad[int(codes[r])] for r in rows}

    def _check_times(
        self,
        checked: list[tuple[str, Frame, NDArray[np.int64], NDArray[np.bool_], dict[int, str]]],
        stream: object,
    ) -> None:
        """The stream's clock sees the batch's rows in the order their lines came, across
        measurements (a backlog's batch can span hours of one partition: judged measurement by
        measurement, the first would move the clock to the batch's end and leave the others'
        early rows behind it)."""
        if not checked:
            return
        keeps = [keep for _, _, _, keep, _ in checked]
        times = np.concatenate([frame.time_ns[keep] for (_, frame, _, _, _), keep in zip(checked, keeps, strict=True)])
        if not len(times):
            return
        clock = self.clock_of(stream)
        if clock.all_inside(times):  # the common case (a live batch spans a tick or two): no order needed
            return
        lines = np.concatenate([rows[keep] for (_, _, rows, _, _), keep in zip(checked, keeps, strict=True)])
        which = np.concatenate([np.full(int(keep.sum()), i, dtype=np.int64) for i, keep in enumerate(keeps)])
        where = np.concatenate([np.flatnonzero(keep) for keep in keeps])
        order = np.argsort(lines, kind="stable")
        bad = clock.check_ordered(times[order])
        for position, reason in bad.items():
            k = int(order[position])
            _, _, _, keep, reasons = checked[int(which[k])]
            row = int(where[k])
            reasons.setdefault(row, reason)
            keep[row] = False


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
    """Turn DCGM blank sentinels into missing values, in place; returns how many. Catalogued
    fields by their width, uncatalogued `DCGM_*` fields by exact family member, strings by
    DCGM_STR_IS_BLANK (ingest/dcgm_blanks.py owns the rule for every door)."""
    masked = 0
    for key, col in frame.fields.items():
        metric = spec.metric(key)
        if metric is None and not key.startswith("DCGM_"):
            continue  # not DCGM's: no sentinel applies
        if col.type == FieldType.BOOL:
            continue
        if col.type == FieldType.STRING:
            blank = np.fromiter((isinstance(v, str) and is_string_blank(v) for v in col.values), bool, len(col.values))
        else:
            blank = blank_mask(np.asarray(col.values), width_of(metric) if metric is not None else None)
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

    def all_inside(self, t: NDArray[np.int64]) -> bool:
        """Whether every time of the batch is inside the bound whatever order they came in (it
        spans less than the bound, around the stream's time, none ahead of the wall clock); if
        so the watermark moves to its newest, exactly as `check_ordered` would have moved it."""
        oldest, newest = int(t.min()), int(t.max())
        if newest - oldest > self.bound_ns or newest > self._wall_ns() + self.bound_ns:
            return False
        reference = self.watermark_ns
        if reference is not None and (oldest < reference - self.bound_ns or newest > reference + self.bound_ns):
            return False  # behind, or jumped past the bound: judged block by block
        self.watermark_ns = newest if reference is None else max(reference, newest)
        return True

    def check_ordered(self, t: NDArray[np.int64]) -> dict[int, str]:
        """Timestamps in the order the stream delivered them; the positions outside the bound,
        with the reason. The stream's time advances through the batch a block of rows at a time
        (a batch replaying a backlog spans hours), each block judged against the newest time
        accepted before it or, if its bulk jumped past the bound, against its own median."""
        bad: dict[int, str] = {}
        now = self._wall_ns()
        future = t > now + self.bound_ns
        for r in np.flatnonzero(future).tolist():
            bad[r] = (
                f"outside the lateness bound: {(int(t[r]) - now) / 1e9:.0f} s ahead of the wall clock "
                f"(bound {self.bound_ns / 1e9:g} s)"
            )
        bound_s = self.bound_ns / 1e9
        for start in range(0, len(t), CLOCK_BLOCK_ROWS):
            block = np.arange(start, min(start + CLOCK_BLOCK_ROWS, len(t)))
            block = block[~future[block]]
            if not len(block):
                continue
            times = t[block]
            median = int(np.median(times))
            reference = self.watermark_ns
            if reference is None or median > reference + self.bound_ns:
                reference = median
            off = times - reference
            outside = (off < -self.bound_ns) | (off > self.bound_ns)
            for i in np.flatnonzero(outside).tolist():
                seconds = int(off[i]) / 1e9
                where = "behind" if seconds < 0 else "ahead of"
                bad[int(block[i])] = (
                    f"outside the lateness bound: {abs(seconds):.0f} s {where} the stream's event time "
                    f"(bound {bound_s:g} s)"
                )
            if not outside.all():
                newest = int(times[~outside].max())
                self.watermark_ns = newest if self.watermark_ns is None else max(self.watermark_ns, newest)
        return bad
