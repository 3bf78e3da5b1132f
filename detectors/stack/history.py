"""Slow physical signals against each series' own history: sudden drifts (optic rx power,
coolant temperature) and sags below a slow reference (an optic's receive power falling, the
classic sign of a dirty or failing transceiver: an early warning the root-cause engine uses to
tell a bad optic from a bad NIC)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from detectors.anomaly import Anomaly
from detectors.base import Block, Detector, State, grow
from detectors.stack.view import MeasurementTick, finite
from vocab.thresholds import DriftThresholds, SagThresholds

DriftFactory = Callable[[int], Detector]


def default_drift(width: int) -> Detector:
    from detectors.univariate import Univariate

    return Univariate(width)


class DriftWatch:
    def __init__(self, limits: DriftThresholds, factory: DriftFactory) -> None:
        self.limits = limits
        self.factory = factory
        self.threshold = limits.threshold
        self._detectors: dict[str, Detector] = {}

    def watches(self, name: str) -> bool:
        return name in self.limits.metrics

    def process(self, m: MeasurementTick) -> list[Anomaly]:
        watched = self.limits.metrics[m.name]
        if not any(x in m.frame.fields for x in watched):
            return []
        detector = self._detectors.get(m.name)
        if detector is None:
            detector = self._detectors[m.name] = self.factory(len(watched))
        nan = np.full(len(m.frame), np.nan)
        values = np.column_stack([m.frame.fields[x].as_float() if x in m.frame.fields else nan for x in watched])
        scores = detector.score_and_learn(Block(m.t, m.series, values), self.threshold)
        out = []
        for r, j in zip(*np.nonzero(scores > self.threshold), strict=True):
            out.append(
                Anomaly(
                    m.t,
                    str(m.ids[r]),
                    watched[j],
                    "stat:drift",
                    float(scores[r, j]),
                    finite(values[r, j]),
                    None,
                    m.name,
                )
            )
        return out

    def state_dict(self, name: str) -> State:
        d = self._detectors.get(name)
        return {f"drift.{k}": v for k, v in d.state_dict().items()} if d is not None else {}

    def load_state(self, name: str, s: State) -> None:
        sub = {k.split(".", 1)[1]: v for k, v in s.items() if k.startswith("drift.")}
        if sub and name in self.limits.metrics:
            d = self.factory(len(self.limits.metrics[name]))
            d.load_state(sub)
            self._detectors[name] = d


@dataclass
class _SagState:
    ref: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    fired: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # when it last fired, nan: not sagging


class SagWatch:
    def __init__(self, limits: SagThresholds, interval: float) -> None:
        self.limits = limits
        self.interval = interval
        self._state: dict[str, _SagState] = {}

    def watches(self, name: str) -> bool:
        return name in self.limits.drop_db

    def process(self, m: MeasurementTick) -> list[Anomaly]:
        drops = self.limits.drop_db[m.name]
        st = self._state.setdefault(m.name, _SagState())
        if st.ref.shape[1:] != (len(drops),):
            st.ref = np.full((0, len(drops)), np.nan)
            st.fired = np.full((0, len(drops)), np.nan)
        st.ref, st.fired = grow(st.ref, m.n_entities, np.nan), grow(st.fired, m.n_entities, np.nan)
        alpha = 1.0 - np.exp(-self.interval / self.limits.tau_s)
        out: list[Anomaly] = []
        for j, (metric, drop) in enumerate(drops.items()):
            if metric not in m.frame.fields:
                continue
            v = m.frame.fields[metric].as_float()
            ref = st.ref[m.series, j]
            lit = ~np.isnan(v) & (v > self.limits.dark_dbm)
            ref = np.where(np.isnan(ref) & lit, v, ref)
            sagging = lit & (v < ref - drop)
            # the reference follows the level only while it is healthy, so a slow sag cannot
            # drag its own baseline down
            learn = lit & ~sagging
            ref = np.where(learn, ref + alpha * (np.nan_to_num(v) - ref), ref)
            st.ref[m.series, j] = ref
            fired = st.fired[m.series, j]
            due = sagging & (np.isnan(fired) | (m.t - fired >= self.limits.repeat_s))
            st.fired[m.series, j] = np.where(due, m.t, np.where(sagging, fired, np.nan))
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

    def state_dict(self, name: str) -> State:
        st = self._state.get(name, _SagState())
        return {"sag_ref": st.ref.copy(), "sag_fired": st.fired.copy()}

    def load_state(self, name: str, s: State) -> None:
        if "sag_ref" in s:
            self._state[name] = _SagState(
                np.asarray(s["sag_ref"], dtype=np.float64).copy(), np.asarray(s["sag_fired"], dtype=np.float64).copy()
            )
