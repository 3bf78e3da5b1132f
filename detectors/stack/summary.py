"""What one tick's comparisons across entities need from the entities a detector holds: the
cohort summary. Split detection (several members, each owning some telemetry partitions) needs
it because a job's GPUs, a switch role or a hall's inlets span partitions; one process uses the
same path, summarising its one share, so the two give the same anomalies by construction.

A summary is exact and merges by union: per cohort key the values its members showed (a robust
z-score needs the cohort's median and MAD; sketches would only approximate them, and the values
of one tick are small beside the telemetry: one float per entity per peer rule, against ~70 values
per GPU scraped), and per fabric-wide setting the count of each value seen (a link's width against
what most ports run). Merging concatenates and adds; the statistics are taken from the merged
summary only, so the order in which members' shares arrive changes nothing.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from detectors.base import FloatArray
from detectors.peers import MAD_TO_SIGMA, _group_median

_HEADER = struct.Struct(">I")  # length of the JSON header that precedes the raw float64 values


@dataclass(slots=True)
class CohortStats:
    """Per cohort key: the median, the MAD and how many values were there."""

    median: FloatArray
    mad: FloatArray
    count: NDArray[np.int64]


@dataclass
class CohortSummary:
    """values: key -> the values (float64, finite) its members showed this tick;
    counts: key -> value -> how many showed it."""

    values: dict[str, FloatArray] = field(default_factory=dict)
    counts: dict[str, dict[float, int]] = field(default_factory=dict)

    def add_values(self, key: str, values: FloatArray) -> None:
        v = np.asarray(values, dtype=np.float64)
        v = v[~np.isnan(v)]  # as robust_z: missing values are no members; an infinite one is
        if not len(v):
            return
        held = self.values.get(key)
        self.values[key] = v if held is None else np.concatenate([held, v])

    def add_counts(self, key: str, values: FloatArray) -> None:
        seen = values[np.isfinite(values)]
        if not len(seen):
            return
        uniques, counts = np.unique(seen, return_counts=True)
        held = self.counts.setdefault(key, {})
        for value, n in zip(uniques.tolist(), counts.tolist(), strict=True):
            held[value] = held.get(value, 0) + n

    @classmethod
    def merge(cls, parts: Iterable[CohortSummary]) -> CohortSummary:
        out = cls()
        arrays: dict[str, list[FloatArray]] = {}
        for part in parts:
            for key, v in part.values.items():
                arrays.setdefault(key, []).append(v)
            for key, counts in part.counts.items():
                held = out.counts.setdefault(key, {})
                for value, n in counts.items():
                    held[value] = held.get(value, 0) + n
        out.values = {k: (v[0] if len(v) == 1 else np.concatenate(v)) for k, v in arrays.items()}
        return out

    def stats(self, keys: list[str]) -> CohortStats:
        """Median and MAD of each key's values (NaN, count 0, for a key nobody showed), computed
        as detectors.peers.robust_z computes them: the same numbers, bit for bit."""
        present = [self.values.get(k) for k in keys]
        counts = np.array([0 if v is None else len(v) for v in present], dtype=np.int64)
        median = np.full(len(keys), np.nan)
        mad = np.full(len(keys), np.nan)
        have = np.flatnonzero(counts > 0)
        if len(have):
            values = np.concatenate([present[i] for i in have.tolist()])
            group = np.repeat(np.arange(len(have)), counts[have])
            med = _group_median(values, group, counts[have])
            dev = np.abs(values - med[group])
            median[have], mad[have] = med, _group_median(dev, group, counts[have])
        return CohortStats(median, mad, counts)

    def most_common(self, key: str) -> tuple[float, int] | None:
        """(the most common value, how many values in all); ties go to the lowest value."""
        counts = self.counts.get(key)
        if not counts:
            return None
        values = sorted(counts)
        best = max(values, key=lambda v: (counts[v], -v))
        return best, sum(counts.values())

    # ------------------------------------------------------------------ on the wire

    def to_bytes(self) -> bytes:
        keys = sorted(self.values)
        header = {
            "values": [[k, len(self.values[k])] for k in keys],
            "counts": {k: [[v, n] for v, n in sorted(c.items())] for k, c in sorted(self.counts.items())},
        }
        head = json.dumps(header, separators=(",", ":")).encode()
        body = b"".join(np.ascontiguousarray(self.values[k], dtype=">f8").tobytes() for k in keys)
        return _HEADER.pack(len(head)) + head + body

    @classmethod
    def from_bytes(cls, data: bytes) -> CohortSummary:
        """A summary as to_bytes wrote it; ValueError for anything else."""
        try:
            (size,) = _HEADER.unpack_from(data)
            header = json.loads(data[_HEADER.size : _HEADER.size + size])
            at = _HEADER.size + size
            out = cls()
            for key, n in header["values"]:
                end = at + 8 * int(n)
                if end > len(data):
                    raise ValueError("not a cohort summary: its values are cut short")
                out.values[str(key)] = np.frombuffer(data[at:end], dtype=">f8").astype(np.float64)
                at = end
            out.counts = {str(k): {float(v): int(n) for v, n in c} for k, c in header["counts"].items()}
        except (struct.error, KeyError, TypeError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a cohort summary: {exc}") from exc
        if at != len(data):
            raise ValueError("not a cohort summary: trailing bytes")
        return out


def robust_scale(stats: CohortStats, abs_floor: float, rel_floor: float) -> FloatArray:
    """The cohort's spread as robust_z floors it."""
    floor = np.maximum(np.float64(abs_floor), np.float64(rel_floor) * np.abs(stats.median))
    scale: FloatArray = np.maximum(MAD_TO_SIGMA * stats.mad, floor)
    return scale


__all__ = ["CohortStats", "CohortSummary", "robust_scale"]


class ShareBoard:
    """Every telemetry partition's share of each tick, as split detection's members exchange
    them (aiops.detect_daemon): says when a tick's merged summary is complete.

    A partition is accounted for at tick t when its share of t is here, when it sent a share of a
    later tick (its loop judges ticks in order, so it had nothing at t), or when its last word was
    that it is idle (nothing waiting, its input quiet) and t is past its last share: a partition
    whose hosts stopped must not stop everyone else. The first share of a (tick, partition) wins:
    a partition taken over and read again sends the same share again."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.shares: dict[int, dict[int, CohortSummary]] = {}
        self.newest: dict[int, int] = {}  # partition -> its newest share's tick (ns)
        self.idle: dict[int, bool] = {}  # partition -> its last word was "idle"
        # partition -> the offset of the last of its records that set `newest` and `idle`: a record
        # read again (a member rewinds the exchange for a restored partition) brings its share
        # back but must not undo what later records said (an old "idle" would stand for now)
        self.read_through: dict[int, int] = {}

    def _later(self, partition: int, offset: int | None) -> bool:
        """Whether this record says something new about the partition (None: this member's own
        loop, now)."""
        if offset is None:
            return True
        if offset <= self.read_through.get(partition, -1):
            return False
        self.read_through[partition] = offset
        return True

    def add(self, partition: int, tick_ns: int, share: CohortSummary, offset: int | None = None) -> None:
        """A partition's share of a tick; `offset`: where it was read (None: sent by a loop here)."""
        self.shares.setdefault(tick_ns, {}).setdefault(partition, share)
        if self._later(partition, offset):
            # a share after "idle" says the partition is at work again, even of an older tick (it
            # is read again from a checkpoint): its next ticks are waited for
            self.newest[partition] = max(tick_ns, self.newest.get(partition, tick_ns))
            self.idle[partition] = False

    def say_idle(self, partition: int, offset: int | None = None) -> None:
        if self._later(partition, offset):
            self.idle[partition] = True

    def accounted(self, partition: int, tick_ns: int) -> bool:
        if partition in self.shares.get(tick_ns, {}):
            return True
        newest = self.newest.get(partition)
        if newest is not None and newest > tick_ns:
            return True
        return self.idle.get(partition, False) and (newest is None or tick_ns > newest)

    def merged(self, tick_ns: int) -> CohortSummary | None:
        """The tick's merged summary once every partition is accounted for; None until then."""
        if not all(self.accounted(p, tick_ns) for p in range(self.partitions)):
            return None
        shares = self.shares.get(tick_ns, {})
        return CohortSummary.merge(shares[p] for p in sorted(shares))

    def forget_before(self, tick_ns: int) -> None:
        """Shares of ticks before `tick_ns`: no loop here will ask for them again."""
        for t in [t for t in self.shares if t < tick_ns]:
            del self.shares[t]
