"""Columnar frames: the unit every stage after decoding works on.

A frame holds the rows of one measurement (one row per entity and timestamp), column by column:
an int64 nanosecond time array, one string array per tag key, and one typed column per field.
Missing values are explicit: a tag a row lacks is the empty string (line protocol forbids empty
tag values, so nothing real is lost), a field a row lacks has present=False.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from vocab.catalog import FieldType

_NUMPY_DTYPE: dict[FieldType, np.dtype] = {
    FieldType.FLOAT: np.dtype(np.float64),
    FieldType.INT: np.dtype(np.int64),
    FieldType.UINT: np.dtype(np.uint64),
    FieldType.BOOL: np.dtype(np.bool_),
    FieldType.STRING: np.dtype(object),
}
_FILL: dict[FieldType, object] = {
    FieldType.FLOAT: np.nan,
    FieldType.INT: 0,
    FieldType.UINT: 0,
    FieldType.BOOL: False,
    FieldType.STRING: "",
}


@dataclass(eq=False, slots=True)
class Column:
    """One field: values of a single line-protocol type and a mask of the rows that have it."""

    type: FieldType
    values: NDArray[np.generic]
    present: NDArray[np.bool_]

    @staticmethod
    def empty(ftype: FieldType, n: int) -> Column:
        values = np.full(n, _FILL[ftype], dtype=_NUMPY_DTYPE[ftype])
        return Column(ftype, values, np.zeros(n, dtype=np.bool_))

    @staticmethod
    def of(ftype: FieldType, values: Iterable[object] | NDArray[np.generic]) -> Column:
        array = np.asarray(values, dtype=_NUMPY_DTYPE[ftype])
        return Column(ftype, array, np.ones(len(array), dtype=np.bool_))

    def take(self, index: NDArray[np.intp]) -> Column:
        return Column(self.type, self.values[index], self.present[index])

    def as_float(self) -> NDArray[np.float64]:
        """Values as float64 with NaN where absent: what numeric detectors consume."""
        out = self.values.astype(np.float64) if self.type != FieldType.STRING else np.full(len(self.values), np.nan)
        return np.where(self.present, out, np.nan)


@dataclass(eq=False, slots=True)
class Frame:
    measurement: str
    time_ns: NDArray[np.int64]
    tags: dict[str, NDArray[np.object_]] = field(default_factory=dict)
    fields: dict[str, Column] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.time_ns)

    def __post_init__(self) -> None:
        n = len(self.time_ns)
        for key, tag_values in self.tags.items():
            if len(tag_values) != n:
                raise ValueError(f"tag {key!r} has {len(tag_values)} rows, frame has {n}")
        for key, col in self.fields.items():
            if len(col.values) != n or len(col.present) != n:
                raise ValueError(f"field {key!r} has {len(col.values)} rows, frame has {n}")

    @property
    def value_count(self) -> int:
        """Field values present: the unit throughput is measured in."""
        return int(sum(int(col.present.sum()) for col in self.fields.values()))

    def take(self, index: NDArray[np.intp]) -> Frame:
        return Frame(
            self.measurement,
            self.time_ns[index],
            {k: v[index] for k, v in self.tags.items()},
            {k: c.take(index) for k, c in self.fields.items()},
        )

    def with_values_only(self) -> Frame:
        """The rows that carry at least one field value (all-blank readings have nothing to store)."""
        has_value = np.zeros(len(self), dtype=np.bool_)
        for col in self.fields.values():
            has_value |= col.present
        return self if has_value.all() else self.take(np.flatnonzero(has_value))

    def tag(self, key: str) -> NDArray[np.object_]:
        values = self.tags.get(key)
        return values if values is not None else np.full(len(self), "", dtype=object)

    def sort_key(self) -> NDArray[np.intp]:
        """A deterministic row order: by time, then by every tag (for comparing frames)."""
        keys: list[NDArray[np.generic]] = [self.tags[k].astype(str) for k in sorted(self.tags, reverse=True)]
        keys.append(self.time_ns)
        return np.lexsort(keys) if keys else np.arange(len(self))


def concat(frames: Iterable[Frame]) -> Frame:
    """Stack frames of one measurement; a tag or field missing from some becomes absent there."""
    parts = list(frames)
    if not parts:
        raise ValueError("nothing to concatenate")
    name = parts[0].measurement
    if any(f.measurement != name for f in parts):
        raise ValueError("frames of different measurements cannot be concatenated")
    if len(parts) == 1:
        return parts[0]
    time_ns = np.concatenate([f.time_ns for f in parts])
    tag_keys = list(dict.fromkeys(k for f in parts for k in f.tags))
    tags = {k: np.concatenate([f.tag(k) for f in parts]) for k in tag_keys}
    field_types: dict[str, FieldType] = {}
    for f in parts:
        for key, col in f.fields.items():
            if field_types.setdefault(key, col.type) != col.type:
                raise ValueError(f"field {key!r} is {field_types[key]} and {col.type}")
    fields = {
        key: Column(
            ftype,
            np.concatenate([_column_or_empty(f, key, ftype).values for f in parts]),
            np.concatenate([_column_or_empty(f, key, ftype).present for f in parts]),
        )
        for key, ftype in field_types.items()
    }
    return Frame(name, time_ns, tags, fields)


def merge_rows(frame: Frame, key_tag: str, order: NDArray[np.int64] | None = None) -> Frame:
    """One row per value of `key_tag` (an entity), fields merged as a time-series database merges
    points of one series: per field and per tag, the value of the newest row that has it wins
    (ties: the row that came last); the time is the newest row's. Telegraf's single-field lines (one
    line per sample) and a sample split across messages become one row again.

    `order`: the arrival order of the rows (default: their position). Rows of entities seen once
    are returned as they are, and a frame without repeats is returned unchanged."""
    n = len(frame)
    keys = frame.tag(key_tag)
    codes, uniques = pd.factorize(keys)
    if len(uniques) == n:
        return frame
    arrival = np.arange(n) if order is None else order
    sort = np.lexsort((arrival, frame.time_ns, codes))  # by entity, then time, then arrival
    sorted_codes = codes[sort]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    ends = np.r_[starts[1:], n] - 1
    newest = sort[ends]  # the newest row of each entity: its tags and time
    fields: dict[str, Column] = {}
    positions = np.arange(n)
    for name, col in frame.fields.items():
        present = col.present[sort]
        last = np.maximum.reduceat(np.where(present, positions, -1), starts)
        has = last >= 0
        rows = sort[np.where(has, last, ends)]
        fields[name] = Column(col.type, col.values[rows], has)
    tags: dict[str, NDArray[np.object_]] = {}
    for name, values in frame.tags.items():
        last = np.maximum.reduceat(np.where(values[sort] != "", positions, -1), starts)
        tags[name] = np.where(last >= 0, values[sort[np.maximum(last, 0)]], "")
    return Frame(frame.measurement, frame.time_ns[newest], tags, fields)


def _column_or_empty(frame: Frame, key: str, ftype: FieldType) -> Column:
    col = frame.fields.get(key)
    return col if col is not None else Column.empty(ftype, len(frame))


def frames_equal(a: Mapping[str, Frame], b: Mapping[str, Frame]) -> bool:
    """Same measurements with the same rows (in any order), tags and present values."""
    return not frame_differences(a, b)


def frame_differences(a: Mapping[str, Frame], b: Mapping[str, Frame]) -> list[str]:
    if set(a) != set(b):
        return [f"measurements differ: {sorted(a)} vs {sorted(b)}"]
    diffs: list[str] = []
    for name in a:
        fa, fb = a[name], b[name]
        if len(fa) != len(fb):
            diffs.append(f"{name}: {len(fa)} rows vs {len(fb)}")
            continue
        fa, fb = fa.take(fa.sort_key()), fb.take(fb.sort_key())
        if not np.array_equal(fa.time_ns, fb.time_ns):
            diffs.append(f"{name}: timestamps differ")
        for key in set(fa.tags) | set(fb.tags):
            if not np.array_equal(fa.tag(key), fb.tag(key)):
                diffs.append(f"{name}: tag {key!r} differs")
        for key in set(fa.fields) | set(fb.fields):
            ca, cb = fa.fields.get(key), fb.fields.get(key)
            if ca is None or cb is None:
                present = ca.present if ca is not None else cb.present  # type: ignore[union-attr]
                if present.any():
                    diffs.append(f"{name}: field {key!r} only on one side")
                continue
            if ca.type != cb.type or not np.array_equal(ca.present, cb.present):
                diffs.append(f"{name}: field {key!r} type or presence differs")
                continue
            va, vb = ca.values[ca.present], cb.values[cb.present]
            if not np.array_equal(va, vb):
                diffs.append(f"{name}: field {key!r} values differ")
    return diffs


def to_pandas(frame: Frame) -> pd.DataFrame:
    """A frame as a DataFrame: `time` (ns), one column per tag, one per field (NaN where absent).
    For analysis and tests, not for hot paths."""
    columns: dict[str, object] = {"time": frame.time_ns}
    columns.update(frame.tags)
    for key, col in frame.fields.items():
        if col.type is FieldType.STRING:
            text = np.asarray(col.values, dtype=object).copy()
            text[~col.present] = None
            columns[key] = text
        else:
            columns[key] = col.as_float()
    return pd.DataFrame(columns)
