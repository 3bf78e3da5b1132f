"""The detector protocol: every detector scores frames and learns from them, state in arrays
indexed by series.

A frame is every series of one measurement at one tick: a `Block` (rows of the detector's state
and their values) for a detector of plain series (`Univariate`), a `MeasurementTick` (the
measurement's entities, fields and counter rates, detectors/stack/view.py) for a family of the
detector stack. Every detector, whatever its frame:

- `score(frame)`: a (rows, columns) float array, higher = more anomalous, NaN where nothing is
  judged (a missing value, too little history). It changes nothing a later score depends on.
- `learn(frame, mask=None)`: takes the frame in; `mask` (rows, columns) False keeps a value out, so
  that a filter between the two can keep a baseline from learning what it flagged (`learn_mask`).
- `score_and_learn(frame, threshold=None)`: both, learning only what scored at or below the
  threshold (a detector may do it in one pass).
- `state_dict()` / `load_state(state)`: plain arrays and numbers, what a checkpoint holds; loaded
  into a fresh detector, it scores what the saved one would have scored.

Series appear and vanish from one frame to the next (state grows, rows never move); NaN is a
missing value and poisons no state; the same frames give the same scores. One conformance suite
(tests/unit/test_detector_conformance.py) runs every detector used in production through these.

A `Family` is what the stack runs (detectors/stack/): a detector with its decision on top, as
river's filters sit on its detectors. Scores are not decisions: `judge` turns a frame's scores into
the anomalies it says (persistence, a state said once and again now and then), remembering what it
said, and learns what judging the frame teaches; `close` ends the tick. The six families, and where
one differs (each says why in its own docstring):

- rules (stack/rules.py): a rule only scores (its reading of the frame), so `learn` is a no-op;
- peers (stack/cohorts.py): scoring a frame takes it in (a window, a place that holds the scrape),
  so it scores and learns in one pass, and `score` is that pass on a copy;
- drift (stack/history.py): a `Univariate` per measurement, a score over the threshold said and
  kept out of the baseline;
- sag (stack/history.py): the reference learns only while the level is healthy;
- presence (stack/presence.py): scores who is absent, so its rows are every entity it knows of the
  measurement; silence is decided at the tick's end;
- maintenance (stack/maintenance.py): a filter on the others' findings, its score what it holds
  back; it learns where each entity sits as the stack indexes the frame it first appears in.

The failure predictor (detectors/predict/) is not a detector of this protocol: it forecasts a
failure kind within a horizon from features of the whole tick across measurements, and its
`score` is the decision over a round of the model's answers (what scripts/predictor-validation
replays).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

from detectors.anomaly import Anomaly

if TYPE_CHECKING:
    from detectors.stack.summary import CohortSummary
    from detectors.stack.view import MeasurementTick

FloatArray = NDArray[np.float64]
IndexArray = NDArray[np.int64]
Mask = NDArray[np.bool_]
State = dict[str, np.ndarray | float | int]
FrameT = TypeVar("FrameT")


@dataclass(frozen=True, slots=True)
class Block:
    """Values of some series at one tick. `series` indexes the detector's state; `values` has
    one row per series and one column per metric (a univariate stream has one column)."""

    t: float  # event time, seconds
    series: IndexArray  # (n,)
    values: FloatArray  # (n, m), NaN = missing

    @staticmethod
    def of(t: float, series: IndexArray | list[int], values: FloatArray | list[list[float]] | list[float]) -> Block:
        v = np.asarray(values, dtype=np.float64)
        return Block(float(t), np.asarray(series, dtype=np.int64), v.reshape(len(v), -1))


class Detector(ABC, Generic[FrameT]):
    """Higher score = more anomalous. Scores are not decisions: thresholds decide elsewhere."""

    @abstractmethod
    def score(self, frame: FrameT) -> FloatArray:
        """(rows, columns) scores of the frame, NaN where not judged. Changes nothing a later score
        depends on."""

    @abstractmethod
    def learn(self, frame: FrameT, mask: Mask | None = None) -> None:
        """Take the frame in; `mask` (rows, columns) False keeps a value out."""

    def score_and_learn(self, frame: FrameT, threshold: float | None = None) -> FloatArray:
        """Score, then learn from every value that scored at or below `threshold` (all if None)."""
        scores = self.score(frame)
        self.learn(frame, learn_mask(scores, threshold))
        return scores

    @abstractmethod
    def state_dict(self) -> State: ...

    @abstractmethod
    def load_state(self, state: State) -> None:
        """Into a fresh detector (as a restart does): it then scores as the saved one would."""


class Family(Detector["MeasurementTick"]):
    """A detector family of the stack: frames are one measurement's entities at a tick (rows: the
    frame's rows unless the family says otherwise), state kept per measurement is keyed
    `<measurement>/<key>` (`per_measurement`), and `cohorts` is the tick's merged cohort summary
    (split detection: every member's share; None: this frame is all there is)."""

    def watches(self, measurement: str) -> bool:
        """Whether frames of this measurement are the family's to judge."""
        return True

    def summarise(self, frame: MeasurementTick, share: CohortSummary) -> None:
        """Add what comparisons across entities need of this frame to the tick's share (split
        detection merges every member's share before anything is judged)."""

    @abstractmethod
    def score(self, frame: MeasurementTick, cohorts: CohortSummary | None = None) -> FloatArray:
        """As Detector.score; a family comparing entities compares them with `cohorts`."""

    def judge(self, frame: MeasurementTick, cohorts: CohortSummary | None = None) -> list[Anomaly]:
        """Score, decide and learn in one pass: the anomalies this frame shows. A family that
        decides only at the tick's end (`close`) says nothing here."""
        return []

    def close(self, t: float, found: list[Anomaly]) -> list[Anomaly]:
        """The tick's end, every frame judged: `found`, with what only the whole tick shows added
        (who went silent) or taken out (what maintenance holds back)."""
        return found


def learn_mask(scores: FloatArray, threshold: float | None) -> Mask | None:
    """Values a baseline may learn from: those not flagged (NaN scores are not flags)."""
    if threshold is None:
        return None
    return ~(scores > threshold)


def per_measurement(state: State) -> dict[str, State]:
    """A family's state (keys `<measurement>/<key>`) split by measurement."""
    out: dict[str, State] = {}
    for key, value in state.items():
        name, _, rest = key.partition("/")
        out.setdefault(name, {})[rest] = value
    return out


def flatten(states: Mapping[str, Mapping[str, np.ndarray | float | int]]) -> State:
    """Per-measurement states as one family state: keys `<measurement>/<key>`."""
    return {f"{name}/{key}": value for name, state in states.items() for key, value in state.items()}


def grow(array: np.ndarray, rows: int, fill: float | str) -> np.ndarray:
    """`array` with at least `rows` rows, new rows set to `fill` (amortised doubling)."""
    if len(array) >= rows:
        return array
    size = max(rows, 2 * len(array), 64)
    out = np.full((size, *array.shape[1:]), fill, dtype=array.dtype)
    out[: len(array)] = array
    return out
