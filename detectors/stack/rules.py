"""Hard signals, fired on the first tick: error counters increasing, pause-frame rates, and bad
states (an XID, a failed row remap, a hardware/thermal/power throttle, a link or PSU down), said
again now and then while they last.

A rule only scores: its reading of a frame (an increase or a rate over its limit, a bad state) is
the frame's alone, so `learn` is a no-op (there is no baseline). What the rules remember (a state
already said, runs of bad scrapes, the jobs a GPU failed, recent link recoveries) is their
decision's memory: `judge` keeps it and `state_dict` checkpoints it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from detectors.anomaly import Anomaly
from detectors.base import Family, FloatArray, Mask, State, flatten, grow, per_measurement
from detectors.stack.summary import CohortSummary
from detectors.stack.view import MeasurementTick
from vocab import registry
from vocab.thresholds import RuleThresholds

StateTest = Callable[[FloatArray], NDArray[np.bool_]]
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
REASONS_FIELD = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
PCIE_FIELDS = ("DCGM_FI_DEV_PCIE_LINK_GEN", "DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "DCGM_FI_DEV_GPU_UTIL")
PCIE_WIDTH_FIELDS = ("DCGM_FI_DEV_PCIE_LINK_WIDTH", "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH")


APPLICATION_XIDS = np.array(sorted(c for c, x in registry.XIDS.items() if x.xid_class == "application"), dtype=float)
# application Xids on this many GPUs of one job in one scrape are the job crashing (every rank
# tears down together, Xid 45 on each): one notice for the job, not a suspect per GPU
STORM_GPUS = 8
# informational Xids (the catalog: nothing to do when seen once): an alarm only when one repeats
REPEATING_XIDS = {c: x.repeat for c, x in registry.XIDS.items() if x.repeat is not None}
REPEAT_CODES = np.array(sorted(REPEATING_XIDS), dtype=float)


def _reasons(names: tuple[str, ...]) -> int:
    bits = 0
    for reason in names:
        bits |= registry.clock_reason(reason)
    return bits


def bad_states(limits: RuleThresholds) -> dict[str, dict[str, StateTest]]:
    """Per measurement, the states that are faults on the first scrape: (metric, test on the
    value). An application XID is the job's, not the GPU's (HardRules follows those apart)."""
    throttled = _reasons(limits.throttle_reasons)
    links = limits.nvlink_links_by_model.get(limits.gpu_model)
    fabric_bad = np.asarray(limits.fabric_manager_bad, dtype=float)
    gpu: dict[str, StateTest] = {
        XID_FIELD: lambda v: (v > 0) & ~np.isin(v, APPLICATION_XIDS) & ~np.isin(v, REPEAT_CODES),
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": lambda v: v > 0,
        "DCGM_FI_DEV_ROW_REMAP_PENDING": lambda v: v > 0,
        "DCGM_FI_DEV_FABRIC_MANAGER_STATUS": lambda v: np.isin(v, fabric_bad),
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": lambda v: (np.nan_to_num(v).astype(np.int64) & throttled) > 0,
    }
    if links is not None:  # a model the table does not know: no count to hold the links to
        gpu["nvlink_links_up"] = lambda v: v < links
    return {
        "gpu": gpu,
        # a port that trained below the fabric's common width or speed (the fabric's own value:
        # a site may run HDR and NDR side by side, each judged against what most ports run)
        "nic": {"link_state": lambda v: v == 0, "link_width": below_common, "link_rate_gbps": below_common},
        "switch_port": {"link_state": lambda v: v == 0},
        "psu": {"status": lambda v: v == 0},
    }


COMMON_MIN_PORTS = 8  # fewer ports in a scrape than this say nothing about the fabric's common value


def below_common(v: FloatArray, common: tuple[float, int] | None = None) -> NDArray[np.bool_]:
    """Below the most common value across the fabric's ports this scrape (its mode, from the
    merged cohort summary: the ports span partitions), when enough ports report. Without
    `common`, the mode of `v` alone."""
    if common is None:
        seen = CohortSummary()
        seen.add_counts("v", v)
        common = seen.most_common("v")
    if common is None or common[1] < COMMON_MIN_PORTS:
        return np.zeros(len(v), dtype=np.bool_)
    below: NDArray[np.bool_] = v < common[0]
    return below


def _common_key(measurement: str, metric: str) -> str:
    return f"common/{measurement}/{metric}"


@dataclass
class _RuleState:
    bad: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.bool_))  # in the state now
    fired: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # when each state last fired


class HardRules(Family):
    """Every rule on every frame (scores: one column per rule, `columns`)."""

    def __init__(self, limits: RuleThresholds) -> None:
        self.limits = limits
        self.states = bad_states(limits)
        self._state: dict[str, _RuleState] = {}
        self._sustained_bits = _reasons(limits.sustained_throttle_reasons)
        self._sustained: np.ndarray = np.zeros(0, dtype=np.int64)  # scrapes in a row, per GPU
        self._sustained_fired: np.ndarray = np.zeros(0)  # when each GPU's sustained state last fired
        # application XIDs: per GPU, (job, time) of each one raised within the window, and the
        # last value seen
        self._app_jobs: dict[str, list[tuple[str, float]]] = {}
        self._app_last: np.ndarray = np.zeros(0)  # per GPU row: the application XID still set (NaN: none)
        self.application_xids = 0  # raised under a job, left to the job (counted, not alarmed)
        # (t, job, codes, GPUs): application Xids on many GPUs of one job in one tick, for a notice
        self.storms: list[tuple[float, str, list[int], int]] = []
        # informational Xids: per GPU row the last one still set, per GPU the (code, time) seen
        self._info_last: np.ndarray = np.zeros(0)
        self._info_seen: dict[str, list[tuple[int, float]]] = {}
        self._pcie_run: np.ndarray = np.zeros(0, dtype=np.int64)  # busy scrapes in a row below the link's best
        self._pcie_fired: np.ndarray = np.zeros(0)
        # per measurement, per port: when its last link recoveries were (for link_recovery_repeat)
        self._recoveries: dict[str, np.ndarray] = {}

    def __getstate__(self) -> dict[str, object]:
        """A checkpoint keeps what the rules saw; the tests on values come from the limits."""
        state = self.__dict__.copy()
        del state["states"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self.states = bad_states(self.limits)

    def summarise(self, m: MeasurementTick, summary: CohortSummary) -> None:
        """The values of the states judged against the whole fabric's (see below_common)."""
        for metric, test in self.states.get(m.name, {}).items():
            if test is below_common and metric in m.frame.fields:
                summary.add_counts(_common_key(m.name, metric), m.frame.fields[metric].as_float())

    def score(self, m: MeasurementTick, cohorts: CohortSummary | None = None) -> FloatArray:
        """Each rule's reading of the frame (`readings`); whether it is said is `judge`'s."""
        return readings(self.limits, self.states, m, cohorts)

    def learn(self, m: MeasurementTick, mask: Mask | None = None) -> None:
        """Nothing: a rule has no baseline (see the module's docstring)."""

    def judge(self, m: MeasurementTick, cohorts: CohortSummary | None = None) -> list[Anomaly]:
        """`cohorts`: the tick's merged summary (None: this frame is the whole fabric)."""
        out: list[Anomaly] = []
        for metric, limit in self.limits.error_counters.get(m.name, {}).items():
            if metric in m.increments:
                inc = m.increments[metric]
                m.emit(out, np.flatnonzero(inc >= limit), metric, "rule:error_counter", inc, inc, 0.0)
        gbps = self.limits.link_rate_gbps.get(m.name)
        if gbps and "symbol_error" in m.rates:
            # symbol errors per second over the line rate: a lower bound on the bit error rate
            limit = self.limits.link_ber_limit * gbps * 1e9
            rate = m.rates["symbol_error"]
            m.emit(out, np.flatnonzero(rate >= limit), "symbol_error", "rule:ber", rate / limit, rate, limit)
        for metric, limit in self.limits.pause_rate_per_s.get(m.name, {}).items():
            if metric in m.rates:
                rate = m.rates[metric]
                m.emit(out, np.flatnonzero(rate >= limit), metric, "rule:rate", rate / limit, rate, 0.0)
        states = self.states.get(m.name, {})
        if states:
            out += self._states(m, states, cohorts)
        if m.name in ("nic", "switch_port"):
            out += self._link_recoveries(m)
        if m.name == "gpu":
            out += self._pcie_link(m)
            out += self._sustained_throttle(m)
            out += self._application_xids(m)
            out += self._repeating_xids(m)
        return out

    def _repeating_xids(self, m: MeasurementTick) -> list[Anomaly]:
        """An informational Xid is an alarm when it repeats: its count within its window on one
        GPU (the registry's `repeat`); one that undoes another (power smoothing re-engaged)
        clears that one's count."""
        if XID_FIELD not in m.frame.fields or not len(REPEAT_CODES):
            return []
        v = m.frame.fields[XID_FIELD].as_float()
        self._info_last = grow(self._info_last, m.n_entities, np.nan)
        last = self._info_last[m.series]
        info = np.isin(v, REPEAT_CODES)
        new_event = np.flatnonzero(info & (v != last))  # DCGM holds the last Xid: a change is an event
        self._info_last[m.series] = np.where(info, v, np.where(v == 0, np.nan, last))
        due: list[int] = []
        for r in new_event.tolist():
            gpu, code = str(m.ids[r]), int(v[r])
            count, window = REPEATING_XIDS[code]
            cancelled = registry.XIDS[code].cancels
            seen = [(c, t) for c, t in self._info_seen.get(gpu, []) if m.t - t < window and c != cancelled]
            seen.append((code, m.t))
            if sum(1 for c, _ in seen if c == code) >= count:
                due.append(r)
                seen = [(c, t) for c, t in seen if c != code]  # said; counting starts again
            self._info_seen[gpu] = seen
        if len(self._info_seen) > 100_000:  # GPUs long quiet
            self._info_seen = {g: s for g, s in self._info_seen.items() if s and m.t - s[-1][1] < 86_400.0}
        out: list[Anomaly] = []
        m.emit(
            out, np.asarray(due, dtype=np.intp), XID_FIELD, "rule:xid", np.ones(len(m.frame)), v, np.nan, _xid_detail(v)
        )
        return out

    def _sustained_due(self, run: np.ndarray, fired_at: np.ndarray, m: MeasurementTick) -> NDArray[np.bool_]:
        """Rows whose run of bad scrapes reaches `sustained_ticks` now, or has gone on for
        another state_repeat_s since it was last said; `fired_at` (per entity) is updated."""
        fired = fired_at[m.series]
        limit = self.limits.sustained_ticks
        due: NDArray[np.bool_] = (run == limit) | ((run > limit) & (m.t - fired >= self.limits.state_repeat_s))
        fired_at[m.series] = np.where(due, m.t, fired)
        return due

    def _pcie_link(self, m: MeasurementTick) -> list[Anomaly]:
        """A busy GPU whose PCIe link runs below the generation or width it supports, for
        `sustained_ticks` scrapes in a row (an idle GPU lowers its link on purpose)."""
        f = m.frame.fields
        need = PCIE_FIELDS
        if any(name not in f for name in need):
            return []
        gen, max_gen = f[need[0]].as_float(), f[need[1]].as_float()
        low = gen < max_gen
        width, max_width = f.get(PCIE_WIDTH_FIELDS[0]), f.get(PCIE_WIDTH_FIELDS[1])
        narrow = np.zeros(len(gen), dtype=np.bool_)
        if width is not None and max_width is not None:
            narrow = width.as_float() < max_width.as_float()
        busy = f[need[2]].as_float() >= self.limits.pcie_busy_util_pct
        self._pcie_run = grow(self._pcie_run, m.n_entities, 0)
        self._pcie_fired = grow(self._pcie_fired, m.n_entities, -np.inf)
        # width is judged busy or not (lanes stay up at idle on most parts); generation only busy
        bad = (low & busy) | narrow
        run = np.where(bad, self._pcie_run[m.series] + 1, np.where(busy | narrow, 0, self._pcie_run[m.series]))
        self._pcie_run[m.series] = run
        due = self._sustained_due(run, self._pcie_fired, m)
        out: list[Anomaly] = []
        ones = np.ones(len(gen))
        if width is not None and max_width is not None:
            w, w_max = width.as_float(), max_width.as_float()
            m.emit(out, np.flatnonzero(due & narrow), PCIE_WIDTH_FIELDS[0], "rule:state", ones, w, w_max)
        m.emit(out, np.flatnonzero(due & ~narrow), need[0], "rule:state", ones, gen, max_gen)
        return out

    def _link_recoveries(self, m: MeasurementTick) -> list[Anomaly]:
        """A port that retrains (link_error_recovery) `count` times within `window` without
        going down; a lone recovery is not a fault."""
        if "link_error_recovery" not in m.increments:
            return []
        count, window = self.limits.link_recovery_repeat
        inc = np.nan_to_num(m.increments["link_error_recovery"])
        downed = m.increments.get("link_downed")
        if downed is not None:  # a recovery that ended in a down is the link rules' business
            inc = np.where(np.nan_to_num(downed) > 0, 0.0, inc)
        # per port, the times of its last count-1 recoveries
        keep = max(1, count - 1)
        recent = self._recoveries.get(m.name, np.zeros((0, keep)))
        if recent.shape[0] < m.n_entities or recent.shape[1] != keep:
            grown = np.full((m.n_entities, keep), -np.inf)
            rows, cols = min(len(recent), m.n_entities), min(recent.shape[1], keep)
            grown[:rows, keep - cols :] = recent[:rows, recent.shape[1] - cols :]
            recent = grown
        self._recoveries[m.name] = recent
        held = recent[m.series]
        within = (held > m.t - window).sum(axis=1)
        due = (inc > 0) & (within + inc >= count)
        shifted = np.concatenate([held[:, 1:], np.full((len(inc), 1), m.t)], axis=1)
        stamps = np.where(inc[:, None] > 0, shifted, held)
        stamps[due] = -np.inf  # said: counting starts again
        recent[m.series] = stamps
        out: list[Anomaly] = []
        value = within + inc
        m.emit(out, np.flatnonzero(due), "link_error_recovery", "rule:error_counter", value, value, float(count))
        return out

    def _sustained_throttle(self, m: MeasurementTick) -> list[Anomaly]:
        """Software slowdowns are a fault once they last `sustained_ticks` scrapes in a row."""
        field_name = REASONS_FIELD
        if not self._sustained_bits or field_name not in m.frame.fields:
            return []
        self._sustained = grow(self._sustained, m.n_entities, 0)
        v = m.frame.fields[field_name].as_float()
        on = (np.nan_to_num(v).astype(np.int64) & self._sustained_bits) > 0
        run = np.where(on, self._sustained[m.series] + 1, 0)
        self._sustained[m.series] = run
        self._sustained_fired = grow(self._sustained_fired, m.n_entities, -np.inf)
        due = self._sustained_due(run, self._sustained_fired, m)
        out: list[Anomaly] = []
        m.emit(out, np.flatnonzero(due), field_name, "rule:state", np.ones(len(m.frame)), v, np.nan)
        return out

    def _application_xids(self, m: MeasurementTick) -> list[Anomaly]:
        """An application XID is the job's; the GPU becomes a suspect when it raises them under
        `application_xid_jobs` different jobs within `application_xid_window_s`."""
        if XID_FIELD not in m.frame.fields:
            return []
        v = m.frame.fields[XID_FIELD].as_float()
        self._app_last = grow(self._app_last, m.n_entities, np.nan)
        last = self._app_last[m.series]
        # DCGM reports the last XID until another one or a driver reload: a value that stays is
        # the same event, even after its job ended and another began on the GPU
        app = np.isin(v, APPLICATION_XIDS)
        new_event = np.flatnonzero(app & (v != last))
        # a GPU whose XID went back to 0 (a driver reload) may raise the same code again
        self._app_last[m.series] = np.where(app, v, np.where(v == 0, np.nan, last))
        if not len(new_event):
            return []
        jobs = m.frame.tags.get("job")
        out: list[Anomaly] = []
        suspects: list[int] = []
        if jobs is not None:  # many GPUs of one job at once: the job crashed, once (one notice)
            names, counts = np.unique(jobs[new_event].astype(str), return_counts=True)
            for job, n in zip(names.tolist(), counts.tolist(), strict=True):
                if job and n >= STORM_GPUS:
                    codes = sorted({int(c) for c in v[new_event][jobs[new_event] == job]})
                    self.storms.append((m.t, job, codes, int(n)))
        window = self.limits.application_xid_window_s
        for r in new_event.tolist():
            gpu = str(m.ids[r])
            job = str(jobs[r]) if jobs is not None else ""
            seen = [(j, t) for j, t in self._app_jobs.get(gpu, []) if m.t - t < window]
            self.application_xids += 1
            before = len({j for j, _ in seen})
            seen.append((job or f"unknown@{m.t:.0f}", m.t))
            self._app_jobs[gpu] = seen
            if before < self.limits.application_xid_jobs <= len({j for j, _ in seen}):
                suspects.append(r)
        if len(self._app_jobs) > 100_000:  # GPUs long quiet
            self._app_jobs = {g: s for g, s in self._app_jobs.items() if s and m.t - s[-1][1] < window}
        m.emit(
            out,
            np.asarray(suspects, dtype=np.intp),
            XID_FIELD,
            "rule:xid",
            np.ones(len(m.frame)),
            v,
            np.nan,
            _xid_detail(v),
        )
        return out

    def _states(self, m: MeasurementTick, states: dict[str, StateTest], cohorts: CohortSummary | None) -> list[Anomaly]:
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
            if test is below_common and cohorts is not None:
                bad = below_common(v, cohorts.most_common(_common_key(m.name, metric))) & ~np.isnan(v)
            else:
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

    def _state_of(self, name: str) -> State:
        st = self._state.get(name, _RuleState())
        out: State = {"bad_state": st.bad.copy(), "state_fired": st.fired.copy()}
        if name == "gpu":
            # what a restart must not forget: a slowdown already two scrapes long, and which jobs
            # a GPU has already failed (else a suspect needs two fresh jobs after every restart)
            gpus = sorted(self._app_jobs)
            out.update(
                sustained_run=self._sustained.copy(),
                sustained_fired=self._sustained_fired.copy(),
                app_xid_last=self._app_last.copy(),
                app_xid_gpus=np.asarray(gpus, dtype=object),
                # "job@time" a raise, ";" between (job ids hold no ";"; "@" is split from the right)
                app_xid_raised=np.asarray(
                    [";".join(f"{j}@{t!r}" for j, t in self._app_jobs[g]) for g in gpus], dtype=object
                ),
            )
            out.update(pcie_run=self._pcie_run.copy(), pcie_fired=self._pcie_fired.copy())
            seen = sorted(self._info_seen)
            out.update(
                info_xid_last=self._info_last.copy(),
                info_xid_gpus=np.asarray(seen, dtype=object),
                info_xid_seen=np.asarray(
                    [";".join(f"{c}@{t!r}" for c, t in self._info_seen[g]) for g in seen], dtype=object
                ),
            )
        if name in self._recoveries:
            out["link_recoveries"] = self._recoveries[name].copy()
        return out

    def state_dict(self) -> State:
        return flatten({name: self._state_of(name) for name in sorted({*self._state, *self._recoveries})})

    def load_state(self, state: State) -> None:
        for name, s in per_measurement(state).items():
            self._load(name, s)

    def _load(self, name: str, s: State) -> None:
        if "bad_state" in s:
            st = _RuleState(bad=np.asarray(s["bad_state"]).copy())
            if "state_fired" in s:
                st.fired = np.asarray(s["state_fired"], dtype=np.float64).copy()
            self._state[name] = st
        if name == "gpu" and "sustained_run" in s:
            self._sustained = np.asarray(s["sustained_run"], dtype=np.int64).copy()
            self._sustained_fired = np.asarray(s["sustained_fired"], dtype=np.float64).copy()
            self._app_last = np.asarray(s["app_xid_last"], dtype=np.float64).copy()
            gpus = np.asarray(s["app_xid_gpus"], dtype=object).tolist()
            # a state saved before the window holds the jobs without their times ("app_xid_jobs"):
            # they cannot be placed in a window, so they are let go (a suspect then needs its
            # three jobs afresh: quieter for a day, never louder)
            raised = np.asarray(s.get("app_xid_raised", [""] * len(gpus)), dtype=object).tolist()
            self._app_jobs = {
                str(g): [(j, float(t)) for j, _, t in (e.rpartition("@") for e in str(x).split(";") if e)]
                for g, x in zip(gpus, raised, strict=True)
            }
        if "link_recoveries" in s:
            self._recoveries[name] = np.asarray(s["link_recoveries"], dtype=np.float64).copy()
        if name == "gpu" and "pcie_run" in s:  # absent from a state saved before links were judged
            self._pcie_run = np.asarray(s["pcie_run"], dtype=np.int64).copy()
            self._pcie_fired = np.asarray(s["pcie_fired"], dtype=np.float64).copy()
        if name == "gpu" and "info_xid_last" in s:  # absent from a state saved before these were counted
            self._info_last = np.asarray(s["info_xid_last"], dtype=np.float64).copy()
            gpus = np.asarray(s["info_xid_gpus"], dtype=object).tolist()
            seen = np.asarray(s["info_xid_seen"], dtype=object).tolist()
            self._info_seen = {
                str(g): [(int(c), float(t)) for c, t in (e.split("@") for e in str(x).split(";") if e)]
                for g, x in zip(gpus, seen, strict=True)
            }


def rule_columns(
    limits: RuleThresholds, states: dict[str, dict[str, StateTest]], measurement: str
) -> list[tuple[str, str]]:
    """The rules on a measurement's frames as (rule, metric): the columns of HardRules' scores."""
    out = [("error_counter", x) for x in limits.error_counters.get(measurement, {})]
    if limits.link_rate_gbps.get(measurement):
        out.append(("ber", "symbol_error"))
    out += [("rate", x) for x in limits.pause_rate_per_s.get(measurement, {})]
    out += [("state", x) for x in states.get(measurement, {})]
    if measurement in ("nic", "switch_port"):
        out.append(("recovery", "link_error_recovery"))
    if measurement == "gpu":
        out += [("pcie", PCIE_FIELDS[0]), ("sustained", REASONS_FIELD)]
        out += [("application_xid", XID_FIELD), ("repeating_xid", XID_FIELD)]
    return out


def readings(
    limits: RuleThresholds,
    states: dict[str, dict[str, StateTest]],
    m: MeasurementTick,
    cohorts: CohortSummary | None = None,
) -> FloatArray:
    """Each rule's reading of the frame, a column per rule (`rule_columns`): an increase or a rate
    over its limit (1: at the limit), 1 for a bad state (an application or informational Xid: one
    raised), 0 for none; NaN where the frame lacks what the rule reads."""
    columns = rule_columns(limits, states, m.name)
    out = np.full((len(m.frame), len(columns)), np.nan)
    for j, (rule, metric) in enumerate(columns):
        reading = _reading(limits, states, m, rule, metric, cohorts)
        if reading is not None:
            out[:, j] = reading
    return out


def _reading(
    limits: RuleThresholds,
    states: dict[str, dict[str, StateTest]],
    m: MeasurementTick,
    rule: str,
    metric: str,
    cohorts: CohortSummary | None,
) -> FloatArray | None:
    f = m.frame.fields
    if rule == "error_counter":
        inc = m.increments.get(metric)
        return None if inc is None else inc / limits.error_counters[m.name][metric]
    if rule in ("ber", "rate"):
        rate = m.rates.get(metric)
        if rate is None:
            return None
        if rule == "ber":
            return rate / (limits.link_ber_limit * limits.link_rate_gbps[m.name] * 1e9)
        return rate / limits.pause_rate_per_s[m.name][metric]
    if rule == "recovery":
        inc = m.increments.get(metric)
        downed = m.increments.get("link_downed")
        if inc is not None and downed is not None:  # a recovery that ended in a down is the link rules'
            inc = np.where(np.nan_to_num(downed) > 0, 0.0, inc)
        return None if inc is None else inc / limits.link_recovery_repeat[0]
    if rule == "pcie":
        if any(name not in f for name in PCIE_FIELDS):
            return None
        gen = f[PCIE_FIELDS[0]].as_float()
        bad = (gen < f[PCIE_FIELDS[1]].as_float()) & (f[PCIE_FIELDS[2]].as_float() >= limits.pcie_busy_util_pct)
        if all(name in f for name in PCIE_WIDTH_FIELDS):
            bad |= f[PCIE_WIDTH_FIELDS[0]].as_float() < f[PCIE_WIDTH_FIELDS[1]].as_float()
        return np.where(np.isnan(gen), np.nan, bad.astype(np.float64))
    if metric not in f:
        return None
    v = f[metric].as_float()
    if rule == "state":
        test = states[m.name][metric]
        if test is below_common and cohorts is not None:
            bad = below_common(v, cohorts.most_common(_common_key(m.name, metric)))
        else:
            bad = test(v)
    elif rule == "sustained":
        bad = (np.nan_to_num(v).astype(np.int64) & _reasons(limits.sustained_throttle_reasons)) > 0
    else:
        bad = np.isin(v, APPLICATION_XIDS if rule == "application_xid" else REPEAT_CODES)
    return np.where(np.isnan(v), np.nan, bad.astype(np.float64))


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
