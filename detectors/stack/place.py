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
entity looks slower at that moment: a lasting straggler keeps the place it fell from as its
baseline, so it is still a straggler an hour later. A GPU moving to another job starts again.

Two things keep the test honest on real jobs:
- the onset is unknown, so the recent place is tested over its last third, two thirds and all of
  the recent samples (a large fall is seen in few samples, a small one needs them all), each at
  the same bar;
- when a job's pace changes (a slow member makes the others wait: their demand falls) the chips
  with the least dynamic power can leave the cap, which changes whose median the places are taken
  against, so the recent place is compared only with earlier samples taken while about the same
  share of the job's working GPUs held the cap and its median clock was about where it is: the
  same regime. (A pace that changes with all of them still at the cap moves every clock by the same
  factor and no place, but a chip whose place would take it past the top clock is held there, so
  a large move of the median is a new regime too.)
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
# a GPU's wander is known from the differences of its successive places (E|x1 - x2| = 2 sigma /
# sqrt(pi) for independent normal samples: blind to a step in the level, which moves one
# difference), averaged over about this many: a sigma from a few dozen samples' MAD would make
# a z of -5 a t of few degrees of freedom (one in several thousand, not one in millions)
SPREAD_SAMPLES = 200.0
DIFF_TO_SIGMA = float(np.sqrt(np.pi) / 2)


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
    # the regime each sample was taken in: the caller's measures, each scaled by its tolerance (an
    # earlier sample counts where every one is within 1 of the recent samples' mean)
    recent_regime: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    baseline_regime: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    recent_at: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    baseline_at: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    cohort: NDArray[np.object_] = field(default_factory=lambda: np.zeros(0, dtype=object))
    slower: NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))
    # the last place, and the (exponentially weighted) sum and count of successive differences
    last: FloatArray = field(default_factory=lambda: np.zeros(0))
    diff_sum: FloatArray = field(default_factory=lambda: np.zeros(0))
    diff_n: FloatArray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        if self.recent.shape[1:] != (self.recent_size,):
            self.recent, self.recent_regime = np.zeros((0, self.recent_size)), np.zeros((0, self.recent_size, 0))
            self.baseline = np.zeros((0, self.baseline_size))
            self.baseline_regime = np.zeros((0, self.baseline_size, 0))

    def _grow(self, rows: int) -> None:
        self.recent = grow(self.recent, rows, np.nan)
        self.baseline = grow(self.baseline, rows, np.nan)
        self.recent_regime = grow(self.recent_regime, rows, np.nan)
        self.baseline_regime = grow(self.baseline_regime, rows, np.nan)
        self.recent_at = grow(self.recent_at, rows, 0)
        self.baseline_at = grow(self.baseline_at, rows, 0)
        self.cohort = grow(self.cohort, rows, UNSEEN)
        self.slower = grow(self.slower, rows, False)
        self.last = grow(self.last, rows, np.nan)
        self.diff_sum, self.diff_n = grow(self.diff_sum, rows, 0.0), grow(self.diff_n, rows, 0.0)

    def add(self, series: NDArray[np.intp], place: FloatArray, regime: FloatArray, cohort: NDArray[np.object_]) -> None:
        if regime.shape[1:] != self.recent_regime.shape[2:]:  # the first scrape sets the measures
            self.recent_regime = np.full((len(self.recent_regime), self.recent_size, regime.shape[1]), np.nan)
            self.baseline_regime = np.full((len(self.baseline_regime), self.baseline_size, regime.shape[1]), np.nan)
        """This scrape's place of each row's entity (NaN: no sample that counts this scrape, or
        in no cohort) and the regime it was taken in (rows x measures, each scaled by its tolerance)."""
        if not len(series):
            return
        self._grow(int(series.max()) + 1)
        moved = series[self.cohort[series] != cohort]
        for ring in (self.recent, self.baseline, self.recent_regime, self.baseline_regime):
            ring[moved] = np.nan
        self.recent_at[moved], self.baseline_at[moved] = 0, 0
        self.slower[moved], self.last[moved], self.diff_sum[moved], self.diff_n[moved] = False, np.nan, 0.0, 0.0
        self.cohort[series] = cohort
        seen = ~np.isnan(place) & ~np.isnan(regime).any(axis=1)
        rows = series[seen]
        follows = rows[~np.isnan(self.last[rows])]
        decay = 1.0 - 1.0 / SPREAD_SAMPLES
        step = np.abs(place[seen][~np.isnan(self.last[rows])] - self.last[follows])
        self.diff_sum[follows] = self.diff_sum[follows] * decay + step
        self.diff_n[follows] = self.diff_n[follows] * decay + 1.0
        self.last[rows] = place[seen]
        slot = self.recent_at[rows] % self.recent_size
        keep = (self.recent_at[rows] >= self.recent_size) & ~self.slower[rows]
        kept, at = rows[keep], self.baseline_at[rows[keep]] % self.baseline_size
        self.baseline[kept, at] = self.recent[kept, slot[keep]]
        self.baseline_regime[kept, at] = self.recent_regime[kept, slot[keep]]
        self.baseline_at[kept] += 1
        self.recent[rows, slot] = place[seen]
        self.recent_regime[rows, slot] = regime[seen]
        self.recent_at[rows] += 1

    def test(self, series: NDArray[np.intp]) -> PlaceTest:
        """Each row's entity: its recent place (the 10 %-trimmed mean of its last third, two
        thirds or all of its recent samples: the strongest fall of the three) against the median
        of the samples before those in the same regime, in standard errors of its own wander
        (from its successive differences). A window is judged once at least `baseline_min` earlier
        samples are there: the last third soon after a GPU joins its job, all of it later."""
        n = len(series)
        out = PlaceTest(*(np.full(n, np.nan) for _ in range(4)))
        if not n or not len(self.recent):
            return out
        size = self.recent_size
        lengths = sorted({max(size // 3, 3), max(2 * size // 3, 3), size})
        seen = self.recent_at[series] + self.baseline_at[series]
        rows = np.flatnonzero(seen >= lengths[0] + self.baseline_min)
        if not len(rows):
            return out
        ents = series[rows]
        newest = (self.recent_at[ents][:, None] - 1 - np.arange(size)[None, :]) % size
        filled = np.arange(size)[None, :] < self.recent_at[ents][:, None]  # a ring not yet full
        recent = np.where(filled, np.take_along_axis(self.recent[ents], newest, axis=1), np.nan)
        regimes = np.where(
            filled[:, :, None], np.take_along_axis(self.recent_regime[ents], newest[:, :, None], axis=1), np.nan
        )
        # everything before the window, newest first: the rest of the recent ring, then the baseline
        older = np.concatenate([recent, self.baseline[ents]], axis=1)
        older_regime = np.concatenate([regimes, self.baseline_regime[ents]], axis=1)
        sigma = DIFF_TO_SIGMA * self.diff_sum[ents] / np.maximum(self.diff_n[ents], 1.0)
        best = PlaceTest(*(np.full(len(rows), np.nan) for _ in range(4)))
        best.z[:] = np.inf
        for length in lengths:
            window = recent[:, :length]
            full = np.asarray(~np.isnan(window).any(axis=1), dtype=np.bool_)
            now = np.where(full[:, None], np.nan_to_num(regimes[:, :length]).sum(axis=1) / length, np.nan)
            before, before_regime = older[:, length:], older_regime[:, length:]
            same = (np.abs(before_regime - now[:, None, :]) <= 1.0).all(axis=2)
            base = np.where(same, before, np.nan)
            held = same.sum(axis=1)
            judged = full & (held >= self.baseline_min)
            if not judged.any():
                continue
            centre = np.full(len(base), np.nan)
            centre[judged] = np.nanmedian(base[judged], axis=1)
            part = np.sort(window, axis=1)
            cut = length // 10
            level = part[:, cut : length - cut].mean(axis=1)
            error = sigma * np.sqrt(TRIMMED_VARIANCE / length + MEDIAN_VARIANCE / np.maximum(held, 1))
            with np.errstate(divide="ignore", invalid="ignore"):
                z = np.where(judged & (error > 0), (level - centre) / error, np.nan)
            better = z < best.z
            best.z = np.where(better, z, best.z)
            best.recent = np.where(better, level, best.recent)
            best.baseline = np.where(better, centre, best.baseline)
        out.z[rows] = np.where(np.isinf(best.z), np.nan, best.z)
        out.recent[rows], out.baseline[rows] = best.recent, best.baseline
        out.drop[rows] = best.recent - best.baseline
        return out

    def judged(self, series: NDArray[np.intp], slower: NDArray[np.bool_]) -> None:
        """Which entities look slower this scrape: their leaving samples keep out of the baseline
        until they do not."""
        self._grow(int(series.max()) + 1 if len(series) else 0)
        self.slower[series] = slower

    def state_dict(self) -> State:
        return {
            "recent": self.recent.copy(),
            "baseline": self.baseline.copy(),
            "recent_regime": self.recent_regime.copy(),
            "baseline_regime": self.baseline_regime.copy(),
            "recent_at": self.recent_at.copy(),
            "baseline_at": self.baseline_at.copy(),
            "cohort": self.cohort.copy(),
            "slower": self.slower.copy(),
            "last": self.last.copy(),
            "diff_sum": self.diff_sum.copy(),
            "diff_n": self.diff_n.copy(),
        }

    @classmethod
    def from_state(cls, s: State, recent_size: int, baseline_size: int, baseline_min: int) -> PlaceHistory:
        h = cls(recent_size, baseline_size, baseline_min)
        recent = np.asarray(s["recent"], dtype=np.float64)
        if recent.shape[1:] != (recent_size,) or np.asarray(s["baseline"]).shape[1:] != (baseline_size,):
            return h  # saved with other window sizes: start again
        h.recent, h.baseline = recent.copy(), np.asarray(s["baseline"], dtype=np.float64).copy()
        h.recent_regime = np.asarray(s["recent_regime"], dtype=np.float64).copy()
        h.baseline_regime = np.asarray(s["baseline_regime"], dtype=np.float64).copy()
        h.recent_at = np.asarray(s["recent_at"], dtype=np.int64).copy()
        h.baseline_at = np.asarray(s["baseline_at"], dtype=np.int64).copy()
        h.cohort = np.asarray(s["cohort"], dtype=object).copy()
        h.slower = np.asarray(s["slower"], dtype=np.bool_).copy()
        h.last = np.asarray(s["last"], dtype=np.float64).copy()
        h.diff_sum = np.asarray(s["diff_sum"], dtype=np.float64).copy()
        h.diff_n = np.asarray(s["diff_n"], dtype=np.float64).copy()
        return h
