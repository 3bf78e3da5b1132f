"""Peer groups: each entity against its cohort at the same tick.

A fail-slow GPU shows no error counter; it only looks different from the other GPUs of its job.
Comparing within the cohort also cancels everything the cohort does together (a job starting,
a checkpoint pause, the afternoon getting warmer), which is why these detectors stay quiet
through workload churn. The statistic is a robust z-score: distance from the cohort median in
units of the cohort's MAD, with a floor on the scale so a cohort of identical readings does not
turn a rounding difference into an alarm. The stack's peer family (detectors/stack/cohorts.py)
and the failure predictor's features use these.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from detectors.base import FloatArray, IndexArray, State, grow

MAD_TO_SIGMA = 1.4826


def robust_z(
    values: FloatArray,
    cohort: IndexArray,
    min_size: int = 4,
    abs_floor: float | FloatArray = 0.0,
    rel_floor: float | FloatArray = 0.0,
) -> tuple[FloatArray, FloatArray]:
    """Per value, (z, cohort median) for an (n, m) array and an (n,) cohort id (-1 = none).

    Vectorised: one lexsort by (cohort, value) per column, medians and MADs read off the sorted
    order. Cohorts with fewer than `min_size` present values give NaN."""
    n, m = values.shape
    z = np.full((n, m), np.nan)
    med_out = np.full((n, m), np.nan)
    valid_rows = cohort >= 0
    for j in range(m):
        col = values[:, j]
        ok = valid_rows & ~np.isnan(col)
        rows = np.flatnonzero(ok)
        if not len(rows):
            continue
        _, inverse, counts = np.unique(cohort[rows], return_inverse=True, return_counts=True)
        median = _group_median(col[rows], inverse, counts)
        dev = np.abs(col[rows] - median[inverse])
        mad = _group_median(dev, inverse, counts)
        floor = np.maximum(np.asarray(abs_floor, dtype=np.float64), np.asarray(rel_floor) * np.abs(median))
        scale = np.maximum(MAD_TO_SIGMA * mad, floor)
        big = counts >= min_size
        with np.errstate(divide="ignore", invalid="ignore"):
            zj = (col[rows] - median[inverse]) / scale[inverse]
        zj[~big[inverse]] = np.nan
        z[rows, j] = zj
        med_out[rows, j] = median[inverse]
    return z, med_out


def _group_median(values: FloatArray, group: IndexArray, counts: NDArray[np.int64]) -> FloatArray:
    order = np.lexsort((values, group))
    sorted_values = values[order]
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    lo = starts + (counts - 1) // 2
    hi = starts + counts // 2
    out: FloatArray = 0.5 * (sorted_values[lo] + sorted_values[hi])
    return out


class Persistence:
    """Counts consecutive ticks each (entity, metric) has been beyond its threshold, so one
    noisy tick does not alarm: fires when the count reaches `ticks`."""

    def __init__(self, width: int, ticks: int, repeat: int = 10, escalation: float = 2.0) -> None:
        self.ticks = ticks
        self.repeat = repeat  # while an episode lasts, fire again every `repeat` ticks (still there)
        self.escalation = escalation  # ... and whenever the score has grown this much since the last
        self.count = np.zeros((0, width), dtype=np.int32)
        self.last_fired = np.zeros((0, width), dtype=np.float64)

    def update(
        self, series: IndexArray, beyond: NDArray[np.bool_], score: FloatArray | None = None
    ) -> NDArray[np.bool_]:
        rows = int(series.max()) + 1 if len(series) else 0
        self.count = grow(self.count, rows, 0)
        self.last_fired = grow(self.last_fired, rows, 0.0)
        current = np.where(beyond, self.count[series] + 1, 0)
        self.count[series] = current
        over = current - self.ticks
        fired: NDArray[np.bool_] = (over >= 0) & (over % self.repeat == 0)
        if score is not None:
            magnitude = np.nan_to_num(np.abs(score))
            last = self.last_fired[series]
            fired |= (over > 0) & (magnitude >= self.escalation * last)
            self.last_fired[series] = np.where(fired, magnitude, np.where(beyond, last, 0.0))
        return fired

    def state_dict(self) -> State:
        return {"count": self.count.copy(), "last_fired": self.last_fired.copy()}

    def load_state(self, state: State) -> None:
        self.count = np.asarray(state["count"], dtype=np.int32).copy()
        self.last_fired = np.asarray(state["last_fired"], dtype=np.float64).copy()
