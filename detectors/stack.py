"""The detector stack the service runs on every tick: rules, peer groups and a drift detector,
configured per measurement, turning frames into anomalies.

What runs where, and why:
- **rules** on hard signals: XIDs, uncorrectable ECC and remap failures, NVLink/PCIe/link error
  counters, PFC pause storms, links going down, PSUs failing, hardware throttle reasons, and
  entities going silent while they should report (a GPU of a running job, a switch). These are
  unambiguous; they fire on the first tick.
- **peer groups** on what the workload moves: a GPU against the other GPUs of its job (clock,
  power, temperature), a switch against switches of its role, a node's inlet against all nodes,
  a cooling loop against the others. Jobs starting, checkpoints and the diurnal cycle move whole
  cohorts, so they cancel out; a persistence filter wants two ticks in a row.
- **drift** on slow physical signals (optic rx power, coolant temperatures) against each series'
  own history, for creeping degradation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from aiops.catalog import MEASUREMENTS, MetricKind
from aiops.entities import EntityIndex
from detectors.anomaly import Anomaly
from detectors.base import Block, Detector, FloatArray, IndexArray, State, grow
from detectors.peers import Persistence, robust_z
from detectors.rates import CounterRates
from detectors.xid import describe
from ingest.frames import Frame

HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, HW_POWER_BRAKE = 0x8, 0x20, 0x40, 0x80

# Error counters: any increase is an anomaly (threshold = increase per tick).
ERROR_COUNTERS: dict[str, dict[str, float]] = {
    "gpu": {
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 1,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1,
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 1,
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 1,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 1,
    },
    "nvswitch": {"nvlink_crc_errors": 1, "nvlink_replay_errors": 1},
    "nic": {"symbol_error": 1, "port_rcv_errors": 1, "link_downed": 1, "port_xmit_discards": 1},
    "switch_port": {"symbol_error": 1, "port_rcv_errors": 1, "link_downed": 1, "port_xmit_discards": 1},
}
# Rate counters with an alarm level per second (PFC pauses happen a little in healthy fabrics).
RATE_LIMITS: dict[str, dict[str, float]] = {
    "nic": {"tx_prio3_pause": 100.0, "rx_prio3_pause": 100.0},
    "switch_port": {"tx_prio3_pause": 100.0, "rx_prio3_pause": 100.0},
}
# Bad states: (metric, test on the value) -> fires on entering the state.
BAD_STATES: dict[str, dict[str, Callable[[FloatArray], NDArray[np.bool_]]]] = {
    "gpu": {
        "DCGM_FI_DEV_XID_ERRORS": lambda v: v > 0,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": lambda v: v > 0,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": lambda v: (
            (np.nan_to_num(v).astype(np.int64) & (HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE)) > 0
        ),
    },
    "nic": {"link_state": lambda v: v == 0},
    "switch_port": {"link_state": lambda v: v == 0},
    "psu": {"status": lambda v: v == 0},
}


@dataclass(frozen=True, slots=True)
class PeerRule:
    metric: str
    cohort: str  # "job" | "role" | "all"
    z: float  # alarm beyond this robust z (signed: negative = too low)
    abs_floor: float = 0.0
    rel_floor: float = 0.0
    log: bool = False  # compare log10 of the value (rates spanning decades)
    rate: bool = False  # a counter: compare its rate
    # off its peers by less than this (in the metric's unit): an early warning ("warn:<cohort>"),
    # not a failure; e.g. a GPU a few degrees warmer than its job's other GPUs is creeping
    warn_within: float = 0.0


PEERS: dict[str, list[PeerRule]] = {
    "gpu": [
        PeerRule("DCGM_FI_DEV_SM_CLOCK", "job", -6.0, abs_floor=15.0, rel_floor=0.01),
        PeerRule("DCGM_FI_DEV_POWER_USAGE", "job", -6.0, abs_floor=15.0, rel_floor=0.04),
        PeerRule("DCGM_FI_DEV_GPU_TEMP", "job", 6.0, abs_floor=1.5, warn_within=18.0),
    ],
    "switch": [PeerRule("port_xmit_wait", "role", 8.0, abs_floor=0.15, log=True, rate=True)],
    "node": [PeerRule("inlet_temp_c", "all", 8.0, abs_floor=0.5)],
    # (not the return temperature: it follows the rack's load, which jobs set)
    "cooling": [PeerRule("supply_temp_c", "all", 8.0, abs_floor=0.5)],
}
# Slow physical signals watched against their own history.
DRIFT: dict[str, list[str]] = {
    "optic": ["rx_power_dbm"],
    "cooling": ["supply_temp_c"],
}
# Sagging physical levels, against each series' own slow reference (dB below it): an optic's
# receive power falling is the classic sign of a dirty or failing transceiver. This is an early
# warning ("warn:sag"), not a failure: the RCA engine uses it to tell a bad optic from a bad NIC.
SAG: dict[str, dict[str, float]] = {"optic": {"rx_power_dbm": 1.5}}
SAG_TAU_S = 6 * 3600.0
SAG_REPEAT_S = 3600.0
DARK_DBM = -20.0  # no light at all: the link is down, which the link rules report
STATE_REPEAT_S = 300.0  # a bad state that lasts is reported again this often
SILENT_AFTER_TICKS = 2  # missing this many ticks in a row while it should report
MAX_GAP_TICKS = 5  # a counter unseen for longer starts a new baseline (see rates.py)
PERSIST_TICKS = 2


@dataclass
class _MeasurementState:
    entities: EntityIndex = field(default_factory=EntityIndex)
    rates: CounterRates | None = None
    bad_state: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.bool_))
    state_fired: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # when each state last fired
    persistence: Persistence | None = None
    last_seen: np.ndarray = field(default_factory=lambda: np.zeros(0))
    expected: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))  # should report
    silent_reported: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))
    drift: Detector | None = None
    sag_ref: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    sag_fired: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # when it last fired, nan: not sagging


DriftFactory = Callable[[int], Detector]
# A drift alarm needs a deviation far beyond anything in the series' recent record (the univariate
# score R/(1+R) at 0.9 is nine times the record): optics and coolant are steady, and their slow
# creeps are the failure predictor's job; this catches the sudden ones.
DRIFT_THRESHOLD = 0.9


def default_drift(width: int) -> Detector:
    from detectors.univariate import Univariate

    return Univariate(width)


class DetectorStack:
    """Frames of one tick in, anomalies out. Per-entity state lives in arrays per measurement."""

    def __init__(
        self,
        interval: float,
        drift_factory: DriftFactory | None = default_drift,
        drift_threshold: float = DRIFT_THRESHOLD,
    ) -> None:
        self.interval = interval
        self.drift_factory = drift_factory
        self.drift_threshold = drift_threshold
        self.state: dict[str, _MeasurementState] = {}
        self._counters = {m.name: [x.name for x in m.metrics if x.kind is MetricKind.COUNTER] for m in MEASUREMENTS}
        self._id_tag = {m.name: m.id_tag for m in MEASUREMENTS}
        self.last_tick: float | None = None
        # Announced maintenance: anomalies of a drained node's parts (and of the switch ports
        # facing them) are expected, so they are held back and counted, not emitted.
        self._maintenance: list[tuple[frozenset[str], float, float]] = []
        self._node_of: dict[str, str] = {}
        self.suppressed = 0

    def announce_maintenance(self, nodes: Iterable[str], start: float, end: float) -> None:
        self._maintenance.append((frozenset(nodes), start, end))

    def process(self, t: float, frames: dict[str, Frame]) -> list[Anomaly]:
        out: list[Anomaly] = []
        for name, frame in frames.items():
            if name in self._id_tag and len(frame):
                out += self._measurement(t, name, frame)
        out += self._silence(t, frames)
        self.last_tick = t
        active = [nodes for nodes, start, end in self._maintenance if start <= t < end]
        if active and out:
            drained = frozenset().union(*active)
            kept = [a for a in out if self._node_of.get(a.entity) not in drained]
            self.suppressed += len(out) - len(kept)
            out = kept
        return out

    # ------------------------------------------------------------------ per measurement

    def _measurement(self, t: float, name: str, frame: Frame) -> list[Anomaly]:
        st = self.state.setdefault(name, _MeasurementState())
        ids = frame.tag(self._id_tag[name])
        known = len(st.entities)
        series = st.entities.add(ids)
        n_entities = len(st.entities)
        if n_entities > known:
            self._learn_nodes(name, frame, ids, series >= known)
        st.last_seen = grow(st.last_seen, n_entities, np.nan)
        st.last_seen[series] = t
        st.expected = grow(st.expected, n_entities, False)
        st.silent_reported = grow(st.silent_reported, n_entities, False)
        st.silent_reported[series] = False
        if name == "gpu":
            st.expected[series] = frame.tag("job") != "idle"
        elif name == "switch":
            st.expected[series] = True
        out: list[Anomaly] = []
        counters = [c for c in self._counters.get(name, []) if c in frame.fields]
        rates: dict[str, FloatArray] = {}
        increments: dict[str, FloatArray] = {}
        if counters:
            if st.rates is None or st.rates.width != len(self._counters[name]):
                st.rates = CounterRates(len(self._counters[name]))
            values = np.full((len(frame), len(self._counters[name])), np.nan)
            for j, c in enumerate(self._counters[name]):
                if c in frame.fields:
                    values[:, j] = frame.fields[c].as_float()
            rate, inc = st.rates.update(t, series, values, max_gap_s=MAX_GAP_TICKS * self.interval)
            for j, c in enumerate(self._counters[name]):
                rates[c], increments[c] = rate[:, j], inc[:, j]

        def emit(
            rows: NDArray[np.intp],
            metric: str,
            detector: str,
            score: FloatArray,
            value: FloatArray,
            expected: FloatArray | float,
            detail: Callable[[int], dict[str, str]] | None = None,
        ) -> None:
            exp = np.broadcast_to(np.asarray(expected, dtype=np.float64), (len(frame),))
            for r in rows.tolist():
                out.append(
                    Anomaly(
                        t,
                        str(ids[r]),
                        metric,
                        detector,
                        float(score[r]),
                        _f(value[r]),
                        _f(exp[r]),
                        name,
                        detail(r) if detail else {},
                    )
                )

        for metric, limit in ERROR_COUNTERS.get(name, {}).items():
            if metric in increments:
                inc = increments[metric]
                rows = np.flatnonzero(inc >= limit)
                emit(rows, metric, "rule:error_counter", inc, inc, 0.0)
        for metric, limit in RATE_LIMITS.get(name, {}).items():
            if metric in rates:
                rate = rates[metric]
                rows = np.flatnonzero(rate >= limit)
                emit(rows, metric, "rule:rate", rate / limit, rate, 0.0)
        states = BAD_STATES.get(name, {})
        if states:
            st.bad_state = grow(st.bad_state, n_entities, False)
            if st.bad_state.shape[1] != len(states):
                st.bad_state = np.zeros((len(st.bad_state), len(states)), dtype=np.bool_)
            st.state_fired = grow(st.state_fired, n_entities, -np.inf)
            if st.state_fired.shape[1:] != (len(states),):
                st.state_fired = np.full((len(st.bad_state), len(states)), -np.inf)
            for j, (metric, test) in enumerate(states.items()):
                if metric not in frame.fields:
                    continue
                v = frame.fields[metric].as_float()
                bad = test(v) & ~np.isnan(v)
                entering = bad & ~st.bad_state[series, j]
                st.bad_state[series, j] = bad
                # a state that persists is said again now and then: whoever listens (the incident
                # engine, a fresh subscriber) learns it is still failed, not only that it failed once
                fired = st.state_fired[series, j]
                entering |= bad & (t - fired >= STATE_REPEAT_S)
                st.state_fired[series, j] = np.where(entering, t, fired)
                detector = "rule:xid" if metric == "DCGM_FI_DEV_XID_ERRORS" else "rule:state"
                detail = _xid_detail(v) if metric == "DCGM_FI_DEV_XID_ERRORS" else None
                emit(np.flatnonzero(entering), metric, detector, np.ones(len(frame)), v, np.nan, detail)
        out += self._peers(t, name, frame, ids, series, st, rates)
        if self.drift_factory is not None and name in DRIFT:
            out += self._drift(t, name, frame, ids, series, st)
        if name in SAG:
            out += self._sag(t, name, frame, ids, series, st)
        return out

    def _sag(
        self, t: float, name: str, frame: Frame, ids: NDArray[np.object_], series: IndexArray, st: _MeasurementState
    ) -> list[Anomaly]:
        limits = SAG[name]
        n = len(st.entities)
        if st.sag_ref.shape[1:] != (len(limits),):
            st.sag_ref = np.full((0, len(limits)), np.nan)
            st.sag_fired = np.full((0, len(limits)), np.nan)
        st.sag_ref, st.sag_fired = grow(st.sag_ref, n, np.nan), grow(st.sag_fired, n, np.nan)
        alpha = 1.0 - np.exp(-self.interval / SAG_TAU_S)
        out: list[Anomaly] = []
        for j, (metric, drop) in enumerate(limits.items()):
            if metric not in frame.fields:
                continue
            v = frame.fields[metric].as_float()
            ref = st.sag_ref[series, j]
            lit = ~np.isnan(v) & (v > DARK_DBM)
            ref = np.where(np.isnan(ref) & lit, v, ref)
            sagging = lit & (v < ref - drop)
            # the reference follows the level only while it is healthy, so a slow sag cannot
            # drag its own baseline down
            learn = lit & ~sagging
            ref = np.where(learn, ref + alpha * (np.nan_to_num(v) - ref), ref)
            st.sag_ref[series, j] = ref
            fired = st.sag_fired[series, j]
            due = sagging & (np.isnan(fired) | (t - fired >= SAG_REPEAT_S))
            st.sag_fired[series, j] = np.where(due, t, np.where(sagging, fired, np.nan))
            for r in np.flatnonzero(due).tolist():
                out.append(
                    Anomaly(t, str(ids[r]), metric, "warn:sag", float(ref[r] - v[r]), _f(v[r]), _f(ref[r]), name)
                )
        return out

    def _peers(
        self,
        t: float,
        name: str,
        frame: Frame,
        ids: NDArray[np.object_],
        series: IndexArray,
        st: _MeasurementState,
        rates: dict[str, FloatArray],
    ) -> list[Anomaly]:
        rules = [r for r in PEERS.get(name, []) if r.metric in frame.fields]
        if not rules:
            return []
        if st.persistence is None:
            st.persistence = Persistence(len(PEERS[name]), PERSIST_TICKS)
        values = np.full((len(frame), len(PEERS[name])), np.nan)
        for j, rule in enumerate(PEERS[name]):
            if rule.metric not in frame.fields:
                continue
            v = rates.get(rule.metric) if rule.rate else frame.fields[rule.metric].as_float()
            if v is None:
                continue
            values[:, j] = np.log10(np.maximum(v, 1.0)) if rule.log else v
        out: list[Anomaly] = []
        beyond = np.zeros(values.shape, dtype=np.bool_)
        zs = np.full(values.shape, np.nan)
        medians = np.full(values.shape, np.nan)
        for j, rule in enumerate(PEERS[name]):
            cohort = _cohort(frame, rule.cohort)
            z, med = robust_z(values[:, j : j + 1], cohort, abs_floor=rule.abs_floor, rel_floor=rule.rel_floor)
            zs[:, j], medians[:, j] = z[:, 0], med[:, 0]
            beyond[:, j] = (z[:, 0] <= rule.z) if rule.z < 0 else (z[:, 0] >= rule.z)
        fired = st.persistence.update(series, beyond, zs)
        for r, j in zip(*np.nonzero(fired), strict=True):
            rule = PEERS[name][j]
            value, expected = values[r, j], medians[r, j]
            if rule.log:
                value, expected = 10**value, 10**expected
            early = bool(abs(value - expected) < rule.warn_within)
            out.append(
                Anomaly(
                    t,
                    str(ids[r]),
                    rule.metric,
                    f"warn:{rule.cohort}" if early else f"peer:{rule.cohort}",
                    float(abs(zs[r, j])),
                    _f(value),
                    _f(expected),
                    name,
                )
            )
        return out

    def _drift(
        self, t: float, name: str, frame: Frame, ids: NDArray[np.object_], series: IndexArray, st: _MeasurementState
    ) -> list[Anomaly]:
        metrics = [m for m in DRIFT[name] if m in frame.fields]
        if not metrics or self.drift_factory is None:
            return []
        if st.drift is None:
            st.drift = self.drift_factory(len(DRIFT[name]))
        values = np.column_stack(
            [frame.fields[m].as_float() if m in frame.fields else np.full(len(frame), np.nan) for m in DRIFT[name]]
        )
        scores = st.drift.score_and_learn(Block(t, series, values), self.drift_threshold)
        out = []
        for r, j in zip(*np.nonzero(scores > self.drift_threshold), strict=True):
            out.append(
                Anomaly(t, str(ids[r]), DRIFT[name][j], "stat:drift", float(scores[r, j]), _f(values[r, j]), None, name)
            )
        return out

    def _learn_nodes(self, name: str, frame: Frame, ids: NDArray[np.object_], new: NDArray[np.bool_]) -> None:
        """Which node each new entity belongs to (switch ports: the node at the other end)."""
        if name == "node":
            nodes = ids
        elif name == "switch_port":
            nodes = np.array([self._node_of.get(str(p), "") for p in frame.tag("peer")], dtype=object)
        else:
            nodes = frame.tag("node")
        for entity, node in zip(ids[new].tolist(), nodes[new].tolist(), strict=True):
            if node:
                self._node_of[str(entity)] = str(node)

    def _silence(self, t: float, frames: dict[str, Frame]) -> list[Anomaly]:
        """A GPU of a running job, or a switch, that stopped reporting."""
        out: list[Anomaly] = []
        for name in ("gpu", "switch"):
            st = self.state.get(name)
            if st is None or not len(st.entities):
                continue
            gone = st.expected & (t - st.last_seen >= SILENT_AFTER_TICKS * self.interval - 1e-6) & ~st.silent_reported
            rows = np.flatnonzero(gone[: len(st.entities)])
            ids = st.entities.ids
            for r in rows.tolist():
                out.append(
                    Anomaly(
                        t,
                        str(ids[r]),
                        "silent",
                        "rule:silent",
                        float((t - st.last_seen[r]) / self.interval),
                        None,
                        None,
                        name,
                        {"last_seen": f"{st.last_seen[r]:.0f}"},
                    )
                )
            st.silent_reported[rows] = True
        return out

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, State]:
        out: dict[str, State] = {}
        for name, st in self.state.items():
            s: State = {
                "ids": np.asarray(st.entities.ids, dtype=object),
                "bad_state": st.bad_state.copy(),
                "last_seen": st.last_seen.copy(),
                "expected": st.expected.copy(),
                "silent_reported": st.silent_reported.copy(),
                "state_fired": st.state_fired.copy(),
                "sag_ref": st.sag_ref.copy(),
                "sag_fired": st.sag_fired.copy(),
            }
            if st.rates is not None:
                s.update({f"rates.{k}": v for k, v in st.rates.state_dict().items()})
            if st.persistence is not None:
                s.update({f"persistence.{k}": v for k, v in st.persistence.state_dict().items()})
            if st.drift is not None:
                s.update({f"drift.{k}": v for k, v in st.drift.state_dict().items()})
            out[name] = s
        return out

    def load_state(self, state: dict[str, State]) -> None:
        self.state = {}
        for name, s in state.items():
            st = _MeasurementState()
            st.entities.add(np.asarray(s["ids"], dtype=object))
            st.bad_state = np.asarray(s["bad_state"]).copy()
            st.last_seen = np.asarray(s["last_seen"], dtype=np.float64).copy()
            st.expected = np.asarray(s["expected"], dtype=np.bool_).copy()
            st.silent_reported = np.asarray(s["silent_reported"], dtype=np.bool_).copy()
            if "state_fired" in s:
                st.state_fired = np.asarray(s["state_fired"], dtype=np.float64).copy()
            if "sag_ref" in s:
                st.sag_ref = np.asarray(s["sag_ref"], dtype=np.float64).copy()
                st.sag_fired = np.asarray(s["sag_fired"], dtype=np.float64).copy()
            sub = {k.split(".", 1)[1]: v for k, v in s.items() if k.startswith("rates.")}
            if sub:
                st.rates = CounterRates(np.asarray(sub["last_value"]).shape[1])
                st.rates.load_state(sub)
            sub = {k.split(".", 1)[1]: v for k, v in s.items() if k.startswith("persistence.")}
            if sub:
                st.persistence = Persistence(np.asarray(sub["count"]).shape[1], PERSIST_TICKS)
                st.persistence.load_state(sub)
            sub = {k.split(".", 1)[1]: v for k, v in s.items() if k.startswith("drift.")}
            if sub and self.drift_factory is not None:
                st.drift = self.drift_factory(len(DRIFT[name]))
                st.drift.load_state(sub)
            self.state[name] = st


def _cohort(frame: Frame, kind: str) -> IndexArray:
    if kind == "all":
        return np.zeros(len(frame), dtype=np.int64)
    key = frame.tag({"job": "job", "role": "role"}[kind])
    codes = np.unique(key, return_inverse=True)[1].astype(np.int64)
    if kind == "job":
        codes[key == "idle"] = -1  # idle GPUs are not a cohort worth comparing
    return codes


def _xid_detail(v: FloatArray) -> Callable[[int], dict[str, str]]:
    def detail(r: int) -> dict[str, str]:
        x = describe(int(v[r]))
        return {
            "xid": str(x.code),
            "meaning": x.meaning,
            "severity": x.severity,
            "action": x.action,
            "suggests": x.suggests,
        }

    return detail


def _f(x: float | np.floating | None) -> float | None:
    if x is None:
        return None
    v = float(x)
    return v if np.isfinite(v) else None
