"""Slow physical signals against each series' own history: sudden drifts (optic rx power,
coolant temperature) and sags below a slow reference (an optic's receive power falling, the
classic sign of a dirty or failing transceiver: an early warning the root-cause engine uses to
tell a bad optic from a bad NIC)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from detectors.anomaly import Anomaly
from detectors.base import Block, Detector, Family, FloatArray, Mask, State, flatten, grow, per_measurement
from detectors.stack.summary import CohortSummary
from detectors.stack.view import MeasurementTick, finite
from vocab.thresholds import DriftThresholds, SagThresholds

DriftFactory = Callable[[int], Detector[Block]]


def default_drift(width: int) -> Detector[Block]:
    from detectors.univariate import Univariate

    return Univariate(width)


class DriftWatch(Family):
    """Each watched measurement's metrics (columns, in the order the thresholds list them) scored
    by a detector of plain series (`Univariate`) of their own; a score over `threshold` is said, and
    is kept out of the baseline it was scored against."""

    def __init__(self, limits: DriftThresholds, factory: DriftFactory) -> None:
        self.limits = limits
        self.factory = factory
        self.threshold = limits.threshold
        self._detectors: dict[str, Detector[Block]] = {}

    def watches(self, measurement: str) -> bool:
        return measurement in self.limits.metrics

    def _block(self, m: MeasurementTick) -> Block | None:
        """The watched metrics as a block (NaN where a row lacks one); None when the frame carries none."""
        watched = self.limits.metrics.get(m.name, ())
        if not any(x in m.frame.fields for x in watched):
            return None
        nan = np.full(len(m.frame), np.nan)
        values = np.column_stack([m.frame.fields[x].as_float() if x in m.frame.fields else nan for x in watched])
        return Block(m.t, m.series, values)

    def _detector(self, name: str) -> Detector[Block]:
        detector = self._detectors.get(name)
        if detector is None:
            detector = self._detectors[name] = self.factory(len(self.limits.metrics[name]))
        return detector

    def score(self, m: MeasurementTick, cohorts: CohortSummary | None = None) -> FloatArray:
        block = self._block(m)
        if block is None:
            return np.full((len(m.frame), len(self.limits.metrics.get(m.name, ()))), np.nan)
        held = self._detectors.get(m.name)  # none yet: a fresh one (not kept) has judged nothing
        return (held if held is not None else self.factory(block.values.shape[1])).score(block)

    def learn(self, m: MeasurementTick, mask: Mask | None = None) -> None:
        block = self._block(m)
        if block is not None:
            self._detector(m.name).learn(block, mask)

    def score_and_learn(self, m: MeasurementTick, threshold: float | None = None) -> FloatArray:
        block = self._block(m)
        if block is None:
            return self.score(m)
        return self._detector(m.name).score_and_learn(block, threshold)

    def judge(self, m: MeasurementTick, cohorts: CohortSummary | None = None) -> list[Anomaly]:
        block = self._block(m)
        if block is None:
            return []
        scores = self._detector(m.name).score_and_learn(block, self.threshold)
        watched = self.limits.metrics[m.name]
        out = []
        for r, j in zip(*np.nonzero(scores > self.threshold), strict=True):
            out.append(
                Anomaly(
                    m.t,
                    str(m.ids[r]),
                    watched[j],
                    "stat:drift",
                    float(scores[r, j]),
                    finite(block.values[r, j]),
                    None,
                    m.name,
                )
            )
        return out

    def state_dict(self) -> State:
        return flatten(
            {name: {f"drift.{k}": v for k, v in d.state_dict().items()} for name, d in self._detectors.items()}
        )

    def load_state(self, state: State) -> None:
        for name, s in per_measurement(state).items():
            sub = {k.split(".", 1)[1]: v for k, v in s.items() if k.startswith("drift.")}
            if sub and name in self.limits.metrics:
                d = self.factory(len(self.limits.metrics[name]))
                d.load_state(sub)
                self._detectors[name] = d


@dataclass
class _SagState:
    ref: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    fired: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # when it last fired, nan: not sagging


class SagWatch(Family):
    """An optic's receive power against a slow reference of its own (columns: the measurement's
    metrics in `drop_db`). The score is the sag below the reference, in dB; a sag deeper than the
    metric's drop is said (again every `repeat_s` while it lasts), and the reference learns only
    while the level is healthy, so a slow sag cannot drag its own baseline down."""

    def __init__(self, limits: SagThresholds, interval: float) -> None:
        self.limits = limits
        self.interval = interval
        self._state: dict[str, _SagState] = {}

    def watches(self, measurement: str) -> bool:
        return measurement in self.limits.drop_db

    def _readings(self, m: MeasurementTick, j: int, metric: str) -> tuple[FloatArray, Mask, FloatArray]:
        """Column j's values, which of them are lit (a dark port says nothing of its optic), and
        the reference each is judged against (a lit value with none yet starts its own)."""
        v = m.frame.fields[metric].as_float()
        st = self._state.get(m.name)
        ref = np.full(len(v), np.nan)
        if st is not None and st.ref.shape[1:] == (len(self.limits.drop_db[m.name]),):
            known = m.series < len(st.ref)
            ref[known] = st.ref[m.series[known], j]
        lit = ~np.isnan(v) & (v > self.limits.dark_dbm)
        return v, lit, np.where(np.isnan(ref) & lit, v, ref)

    def _grown(self, m: MeasurementTick) -> _SagState:
        width = len(self.limits.drop_db[m.name])
        st = self._state.setdefault(m.name, _SagState())
        if st.ref.shape[1:] != (width,):
            st.ref = np.full((0, width), np.nan)
            st.fired = np.full((0, width), np.nan)
        st.ref, st.fired = grow(st.ref, m.n_entities, np.nan), grow(st.fired, m.n_entities, np.nan)
        return st

    def score(self, m: MeasurementTick, cohorts: CohortSummary | None = None) -> FloatArray:
        drops = self.limits.drop_db.get(m.name, {})
        out = np.full((len(m.frame), len(drops)), np.nan)
        for j, metric in enumerate(drops):
            if metric in m.frame.fields:
                v, lit, ref = self._readings(m, j, metric)
                out[:, j] = np.where(lit, ref - v, np.nan)
        return out

    def learn(self, m: MeasurementTick, mask: Mask | None = None) -> None:
        st = self._grown(m)
        alpha = 1.0 - np.exp(-self.interval / self.limits.tau_s)
        for j, metric in enumerate(self.limits.drop_db[m.name]):
            if metric not in m.frame.fields:
                continue
            v, lit, ref = self._readings(m, j, metric)
            learn = lit if mask is None else lit & mask[:, j]
            st.ref[m.series, j] = np.where(learn, ref + alpha * (np.nan_to_num(v) - ref), ref)

    def judge(self, m: MeasurementTick, cohorts: CohortSummary | None = None) -> list[Anomaly]:
        drops = self.limits.drop_db[m.name]
        st = self._grown(m)
        sagging = np.zeros((len(m.frame), len(drops)), dtype=np.bool_)
        columns = []
        for j, (metric, drop) in enumerate(drops.items()):
            if metric in m.frame.fields:
                v, lit, ref = self._readings(m, j, metric)
                sagging[:, j] = lit & (v < ref - drop)
                columns.append((j, metric, v, ref))
        self.learn(m, ~sagging)
        out: list[Anomaly] = []
        for j, metric, v, ref in columns:
            fired = st.fired[m.series, j]
            due = sagging[:, j] & (np.isnan(fired) | (m.t - fired >= self.limits.repeat_s))
            st.fired[m.series, j] = np.where(due, m.t, np.where(sagging[:, j], fired, np.nan))
            for r in np.flatnonzero(due).tolist():
                out.append(
                    Anomaly(
                        m.t,
                        str(m.ids[r]),
                        metric,
                        "warn:sag",
                        float(ref[r] - v[r]),
                        finite(v[r]),
                        finite(ref[r]),
                        m.name,
                    )
                )
        return out

    def state_dict(self) -> State:
        states = {name: {"sag_ref": st.ref.copy(), "sag_fired": st.fired.copy()} for name, st in self._state.items()}
        return flatten(states)

    def load_state(self, state: State) -> None:
        for name, s in per_measurement(state).items():
            if "sag_ref" in s:
                self._state[name] = _SagState(
                    np.asarray(s["sag_ref"], dtype=np.float64).copy(),
                    np.asarray(s["sag_fired"], dtype=np.float64).copy(),
                )
