"""Hard signals, fired on the first tick: error counters increasing, pause-frame rates, and bad
states (an XID, a failed row remap, a hardware/thermal/power throttle, a link or PSU down), said
again now and then while they last."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from detectors.anomaly import Anomaly
from detectors.base import FloatArray, State, grow
from detectors.stack.view import MeasurementTick
from vocab import registry
from vocab.thresholds import RuleThresholds

StateTest = Callable[[FloatArray], NDArray[np.bool_]]
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"


def bad_states(limits: RuleThresholds) -> dict[str, dict[str, StateTest]]:
    """Per measurement, the states that are faults: (metric, test on the value)."""
    throttled = 0
    for reason in limits.throttle_reasons:
        throttled |= registry.clock_reason(reason)
    return {
        "gpu": {
            XID_FIELD: lambda v: v > 0,
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": lambda v: v > 0,
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": lambda v: (np.nan_to_num(v).astype(np.int64) & throttled) > 0,
        },
        "nic": {"link_state": lambda v: v == 0},
        "switch_port": {"link_state": lambda v: v == 0},
        "psu": {"status": lambda v: v == 0},
    }


@dataclass
class _RuleState:
    bad: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.bool_))  # in the state now
    fired: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # when each state last fired


class HardRules:
    def __init__(self, limits: RuleThresholds) -> None:
        self.limits = limits
        self.states = bad_states(limits)
        self._state: dict[str, _RuleState] = {}

    def process(self, m: MeasurementTick) -> list[Anomaly]:
        out: list[Anomaly] = []
        for metric, limit in self.limits.error_counters.get(m.name, {}).items():
            if metric in m.increments:
                inc = m.increments[metric]
                m.emit(out, np.flatnonzero(inc >= limit), metric, "rule:error_counter", inc, inc, 0.0)
        for metric, limit in self.limits.pause_rate_per_s.get(m.name, {}).items():
            if metric in m.rates:
                rate = m.rates[metric]
                m.emit(out, np.flatnonzero(rate >= limit), metric, "rule:rate", rate / limit, rate, 0.0)
        states = self.states.get(m.name, {})
        if states:
            out += self._states(m, states)
        return out

    def _states(self, m: MeasurementTick, states: dict[str, StateTest]) -> list[Anomaly]:
        st = self._state.setdefault(m.name, _RuleState())
        st.bad = grow(st.bad, m.n_entities, False)
        if st.bad.shape[1] != len(states):
            st.bad = np.zeros((len(st.bad), len(states)), dtype=np.bool_)
        st.fired = grow(st.fired, m.n_entities, -np.inf)
        if st.fired.shape[1:] != (len(states),):
            st.fired = np.full((len(st.bad), len(states)), -np.inf)
        out: list[Anomaly] = []
        for j, (metric, test) in enumerate(states.items()):
            if metric not in m.frame.fields:
                continue
            v = m.frame.fields[metric].as_float()
            bad = test(v) & ~np.isnan(v)
            entering = bad & ~st.bad[m.series, j]
            st.bad[m.series, j] = bad
            # a state that persists is said again now and then: whoever listens (the incident
            # engine, a fresh subscriber) learns it is still failed, not only that it failed once
            fired = st.fired[m.series, j]
            entering |= bad & (m.t - fired >= self.limits.state_repeat_s)
            st.fired[m.series, j] = np.where(entering, m.t, fired)
            is_xid = metric == XID_FIELD
            detail = _xid_detail(v) if is_xid else None
            detector = "rule:xid" if is_xid else "rule:state"
            m.emit(out, np.flatnonzero(entering), metric, detector, np.ones(len(m.frame)), v, np.nan, detail)
        return out

    def state_dict(self, name: str) -> State:
        st = self._state.get(name, _RuleState())
        return {"bad_state": st.bad.copy(), "state_fired": st.fired.copy()}

    def load_state(self, name: str, s: State) -> None:
        st = _RuleState(bad=np.asarray(s["bad_state"]).copy())
        if "state_fired" in s:
            st.fired = np.asarray(s["state_fired"], dtype=np.float64).copy()
        self._state[name] = st


def _xid_detail(v: FloatArray) -> Callable[[int], dict[str, str]]:
    def detail(r: int) -> dict[str, str]:
        x = registry.describe_xid(int(v[r]))
        return {
            "xid": str(x.code),
            "meaning": x.meaning,
            "severity": x.severity,
            "action": x.action,
            "suggests": x.suggests,
        }

    return detail
