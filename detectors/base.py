"""The detector protocol: scores over many series at once, state in arrays indexed by series.

A tick of a measurement arrives as a `Block`: which series (rows of the detector's state arrays)
have a value at time `t`, and the values, NaN where missing. A detector `score`s a block (higher
is more anomalous, one score per value) and `learn`s from it; the two are separate so that a
filter between them can keep a baseline from learning what it flagged (see `learn_mask`).

State lives in numpy arrays that grow when new series appear (`ensure`) and survive restarts
through `state_dict` / `load_state` (plain arrays and numbers: what the daemon checkpoints).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IndexArray = NDArray[np.int64]
State = dict[str, np.ndarray | float | int]


@dataclass(frozen=True, slots=True)
class Block:
    """Values of some series at one tick. `series` indexes the detector's state; `values` has
    one row per series and one column per metric (a univariate stream has one column)."""

    t: float  # event time, seconds
    series: IndexArray  # (n,)
    values: FloatArray  # (n, m), NaN = missing
    groups: IndexArray | None = None  # (n,) cohort of each series at this tick, -1 = none (peer detectors)

    @staticmethod
    def of(
        t: float,
        series: IndexArray | list[int],
        values: FloatArray | list[list[float]] | list[float],
        groups: IndexArray | list[int] | None = None,
    ) -> Block:
        v = np.asarray(values, dtype=np.float64)
        g = None if groups is None else np.asarray(groups, dtype=np.int64)
        return Block(float(t), np.asarray(series, dtype=np.int64), v.reshape(len(v), -1), g)


class Detector(ABC):
    """Higher score = more anomalous. Scores are not decisions: thresholds decide elsewhere."""

    #: columns (metrics) per series; fixed at construction
    width: int

    @abstractmethod
    def score(self, block: Block) -> FloatArray:
        """(n, m) scores for the block's values, NaN where the value is missing or the series
        has not seen enough history to judge. Does not change state."""

    @abstractmethod
    def learn(self, block: Block, mask: NDArray[np.bool_] | None = None) -> None:
        """Update state with the block's values; `mask` (n, m) False keeps a value out."""

    @abstractmethod
    def state_dict(self) -> State: ...

    @abstractmethod
    def load_state(self, state: State) -> None: ...

    def score_and_learn(self, block: Block, threshold: float | None = None) -> FloatArray:
        """Score, then learn from every value that scored below `threshold` (all if None)."""
        scores = self.score(block)
        self.learn(block, learn_mask(scores, threshold))
        return scores


def learn_mask(scores: FloatArray, threshold: float | None) -> NDArray[np.bool_] | None:
    """Values a baseline may learn from: those not flagged (NaN scores are not flags)."""
    if threshold is None:
        return None
    return ~(scores > threshold)


def grow(array: np.ndarray, rows: int, fill: float | str) -> np.ndarray:
    """`array` with at least `rows` rows, new rows set to `fill` (amortised doubling)."""
    if len(array) >= rows:
        return array
    size = max(rows, 2 * len(array), 64)
    out = np.full((size, *array.shape[1:]), fill, dtype=array.dtype)
    out[: len(array)] = array
    return out
