"""A GPU against its own place in its job: fail-slow as a change, not as a rank.

Under a power cap identical GPUs differ by a few percent for the same work (Sinha et al., SC'22:
8 % between the GPUs of one model), so a GPU that turns 5 % slower is still inside its job's
spread: no cross-sectional threshold finds it without paging about the slowest healthy chips.
But a chip's place in that spread is its own and it keeps it (it is the chip's efficiency), while
the scrape-to-scrape wander under the cap has no memory (real-gpu/h200/nvml-1s.csv, phase train:
no autocorrelation at lags of 10 s or more). So each GPU's value relative to its job's median at
the same scrape is followed over time, and a GPU whose recent place is below its earlier place by
more than its own wander allows is slower than it was: a change point, as FALCON (Wu et al.,
USENIX ATC'24) finds fail-slow GPUs from a worker's step time.

Per entity two rings of samples of its place (value / cohort median - 1): the recent ones and the
ones before them (the baseline). A sample leaving the recent ring joins the baseline unless the
entity is judged slower at that moment: a lasting straggler keeps the place it fell from as its
baseline, so it is still a straggler an hour later. A GPU moving to another job starts again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from detectors.base import FloatArray, State, grow

UNSEEN = "\x00"  # the cohort of an entity not seen yet (as cohorts.NO_COHORT: no tag value is it)
# a 10 %-trimmed mean's variance against the mean's, for normal samples (its efficiency is 0.94;
# rounded up): the recent level is a trimmed mean so one odd scrape does not move it
TRIMMED_VARIANCE = 1.1
# a median's variance against the mean's, for normal samples (pi / 2)
MEDIAN_VARIANCE = float(np.pi / 2)
MAD_TO_SIGMA = 1.4826


@dataclass
class PlaceTest:
    """Per entity the drop of its recent place below its baseline (relative), that drop in its
    standard errors, and the recent and baseline places (NaN where too few samples)."""

    drop: FloatArray
    z: FloatArray
    recent: FloatArray
    baseline: FloatArray


@dataclass
class PlaceHistory:
    recent_size: int
    baseline_size: int
    baseline_min: int
    recent: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    baseline: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    recent_at: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    baseline_at: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    cohort: NDArray[np.object_] = field(default_factory=lambda: np.zeros(0, dtype=object))
    slower: NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))

    def __post_init__(self) -> None:
        if self.recent.shape[1:] != (self.recent_size,):
            self.recent = np.zeros((0, self.recent_size))
            self.baseline = np.zeros((0, self.baseline_size))

    def _grow(self, rows: int) -> None:
        self.recent = grow(self.recent, rows, np.nan)
        self.baseline = grow(self.baseline, rows, np.nan)
        self.recent_at = grow(self.recent_at, rows, 0)
        self.baseline_at = grow(self.baseline_at, rows, 0)
        self.cohort = grow(self.cohort, rows, UNSEEN)
        self.slower = grow(self.slower, rows, False)

    def add(self, series: NDArray[np.intp], place: FloatArray, cohort: NDArray[np.object_]) -> None:
        """This scrape's place of each row's entity (NaN: no sample that counts this scrape, or
        in no cohort)."""
        if not len(series):
            return
        self._grow(int(series.max()) + 1)
        moved = series[self.cohort[series] != cohort]
        self.recent[moved], self.baseline[moved] = np.nan, np.nan
        self.recent_at[moved], self.baseline_at[moved] = 0, 0
        self.slower[moved] = False
        self.cohort[series] = cohort
        seen = ~np.isnan(place)
        rows = series[seen]
        slot = self.recent_at[rows] % self.recent_size
        leaving = self.recent[rows, slot]
        keep = (self.recent_at[rows] >= self.recent_size) & ~self.slower[rows]
        kept = rows[keep]
        self.baseline[kept, self.baseline_at[kept] % self.baseline_size] = leaving[keep]
        self.baseline_at[kept] += 1
        self.recent[rows, slot] = place[seen]
        self.recent_at[rows] += 1

    def test(self, series: NDArray[np.intp]) -> PlaceTest:
        """Each row's entity: its recent place (10 %-trimmed mean) against its baseline (median),
        in standard errors of its own wander (the baseline's MAD)."""
        n = len(series)
        out = PlaceTest(*(np.full(n, np.nan) for _ in range(4)))
        if not n or not len(self.recent):
            return out
        ready = (self.recent_at[series] >= self.recent_size) & (self.baseline_at[series] >= self.baseline_min)
        rows = np.flatnonzero(ready)
        if not len(rows):
            return out
        ents = series[rows]
        recent = np.sort(self.recent[ents], axis=1)
        cut = self.recent_size // 10
        level = recent[:, cut : self.recent_size - cut].mean(axis=1)
        base = self.baseline[ents]
        held = np.minimum(self.baseline_at[ents], self.baseline_size)
        centre = np.nanmedian(base, axis=1)
        sigma = MAD_TO_SIGMA * np.nanmedian(np.abs(base - centre[:, None]), axis=1)
        error = sigma * np.sqrt(TRIMMED_VARIANCE / self.recent_size + MEDIAN_VARIANCE / held)
        drop = level - centre
        with np.errstate(divide="ignore", invalid="ignore"):
            out.z[rows] = np.where(error > 0, drop / error, np.nan)
        out.drop[rows], out.recent[rows], out.baseline[rows] = drop, level, centre
        return out

    def judged(self, series: NDArray[np.intp], slower: NDArray[np.bool_]) -> None:
        """Which entities were found slower this scrape: their leaving samples keep out of the
        baseline until they are not."""
        self._grow(int(series.max()) + 1 if len(series) else 0)
        self.slower[series] = slower

    def state_dict(self) -> State:
        return {
            "recent": self.recent.copy(),
            "baseline": self.baseline.copy(),
            "recent_at": self.recent_at.copy(),
            "baseline_at": self.baseline_at.copy(),
            "cohort": self.cohort.copy(),
            "slower": self.slower.copy(),
        }

    @classmethod
    def from_state(cls, s: State, recent_size: int, baseline_size: int, baseline_min: int) -> PlaceHistory:
        h = cls(recent_size, baseline_size, baseline_min)
        recent = np.asarray(s["recent"], dtype=np.float64)
        if recent.shape[1:] != (recent_size,) or np.asarray(s["baseline"]).shape[1:] != (baseline_size,):
            return h  # saved with other window sizes: start again
        h.recent, h.baseline = recent.copy(), np.asarray(s["baseline"], dtype=np.float64).copy()
        h.recent_at = np.asarray(s["recent_at"], dtype=np.int64).copy()
        h.baseline_at = np.asarray(s["baseline_at"], dtype=np.int64).copy()
        h.cohort = np.asarray(s["cohort"], dtype=object).copy()
        h.slower = np.asarray(s["slower"], dtype=np.bool_).copy()
        return h
