"""Peer groups on what the workload moves: a GPU against the other GPUs of its job, a switch
against switches of its role, a node's inlet or a cooling loop against all the others. Jobs
starting, checkpoints and the diurnal cycle move whole cohorts, so they cancel out; a deviation
must persist a few ticks. Close to its peers it is an early warning, not a failure.

A rule with `window_s` judges each entity's own level (the median of its busy samples over the
window) against the levels of its cohort: a power-capped GPU's clock wanders
+-8 % from one second to the next and a scrape catches one instant of it, so a straggler is a GPU
that *stays* below its job, beyond the spread the job's own GPUs show (chip to chip, a few
percent), not one that sampled a different instant.

Stated alternative to score-then-learn: scoring a frame takes it in. A windowed rule's level is the
median of a window that holds this scrape, a history rule's recent place is one that holds it, and
split detection's shares (`summarise`) carry those levels before anything is judged; so `judge`
and `score_and_learn` score and learn in one pass, `score` is that pass on a copy (tests and
tools; the stack never calls it), and `learn` is it with the scores let go."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from detectors.anomaly import Anomaly
from detectors.base import Family, FloatArray, Mask, State, flatten, grow, per_measurement
from detectors.peers import Persistence
from detectors.stack.place import PlaceHistory
from detectors.stack.summary import CohortSummary, robust_scale
from detectors.stack.view import MeasurementTick, finite
from ingest.frames import Frame
from vocab import registry
from vocab.thresholds import GPU_UTIL_FIELD, PeerRule, PeerThresholds

NO_COHORT = "\x00"  # line protocol cannot carry it: no tag value is mistaken for it
MIN_COHORT = 4  # fewer members than this make no cohort to stand out from (as robust_z)


TENSOR_FIELD = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
REASONS_FIELD = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"


@dataclass
class _Window:
    """Per entity, one rule's last busy samples (a ring, NaN: none yet) and when each was taken,
    where the ring writes next, and the cohort they were gathered in (a GPU moving to another job
    starts again)."""

    samples: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    taken: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    at: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    cohort: NDArray[np.object_] = field(default_factory=lambda: np.zeros(0, dtype=object))


class PeerRules(Family):
    """Each rule of a measurement (a column) judged within its cohort; the score is the rule's z
    in its own direction (a rule on slow GPUs scores a slower one higher), NaN where not judged
    (no cohort, a window not yet full)."""

    def __init__(self, limits: PeerThresholds, interval: float = 30.0) -> None:
        self.limits = limits
        self.interval = interval  # the scrape interval: one sample's weight in a smoothed level
        self._persistence: dict[str, Persistence] = {}
        # per measurement, between summarise and judge: the rules' values and cohort keys
        self._tick: dict[str, tuple[FloatArray, list[NDArray[np.object_]]]] = {}
        self._windows: dict[tuple[str, int], _Window] = {}
        self._places: dict[tuple[str, int], PlaceHistory] = {}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_tick", {})  # a checkpoint from before the split
        self.__dict__.setdefault("_windows", {})  # ... and from before windows
        self.__dict__.setdefault("_places", {})  # ... and from before places

    def window(self, rule: PeerRule) -> int:
        """Scrapes in a rule's window: its seconds at this interval, never fewer than the least."""
        return max(self.limits.window_min_scrapes, int(np.ceil(rule.window_s / self.interval)))

    def _working(self, m: MeasurementTick) -> NDArray[np.bool_] | None:
        """Rows whose GPU does work this scrape (None: the frame cannot say). Utilisation says a
        kernel ran; a GPU spinning in a collective that waits for a stalled peer runs one too,
        at 100 % and a fraction of its power, so where DCGM exports the tensor pipe's activity a
        GPU with none is not working either."""
        util = m.frame.fields.get(GPU_UTIL_FIELD)
        if util is None:
            return None
        busy: NDArray[np.bool_] = util.as_float() >= self.limits.busy_util_pct
        tensor = m.frame.fields.get(TENSOR_FIELD)
        if tensor is not None:
            active = tensor.as_float()
            busy &= np.isnan(active) | (active >= self.limits.busy_tensor_active)
        return busy

    def _windowed(self, m: MeasurementTick, values: FloatArray, keys: list[NDArray[np.object_]]) -> None:
        """The windowed rules' columns of `values` replaced by each entity's median over its
        window of busy samples (NaN until the window is full, and while it is not busy: no
        member of its cohort then). A median: a lone step-boundary second is not its level."""
        rules = self.limits.rules[m.name]
        busy = self._working(m)
        for j, rule in enumerate(rules):
            if rule.busy_only:
                values[:, j] = np.nan if busy is None else np.where(busy, values[:, j], np.nan)
            if rule.held_reason:
                values[:, j] = np.where(_holds(m, rule.held_reason), values[:, j], np.nan)
            if rule.unheld_reason:
                values[:, j] = np.where(_holds(m, rule.unheld_reason), np.nan, values[:, j])
            if rule.window_s <= 0:
                continue
            size = self.window(rule)
            w = self._windows.setdefault((m.name, j), _Window())
            if w.samples.shape[1:] != (size,) or w.taken.shape != w.samples.shape:  # new, or resized
                w.samples, w.at = np.zeros((0, size)), np.zeros(0, dtype=np.int64)
                w.taken, w.cohort = np.zeros((0, size)), np.zeros(0, dtype=object)
            w.samples, w.taken = grow(w.samples, m.n_entities, np.nan), grow(w.taken, m.n_entities, -np.inf)
            w.at, w.cohort = grow(w.at, m.n_entities, 0), grow(w.cohort, m.n_entities, NO_COHORT)
            v, key = values[:, j], keys[j]
            moved = np.flatnonzero(w.cohort[m.series] != key)
            w.samples[m.series[moved]] = np.nan
            w.cohort[m.series] = key
            seen = np.flatnonzero(~np.isnan(v) & (key != NO_COHORT))
            rows = m.series[seen]
            w.samples[rows, w.at[rows] % size] = v[seen]
            w.taken[rows, w.at[rows] % size] = m.t
            w.at[rows] += 1
            # a level is the median of the samples of the window's span (missed scrapes leave
            # older ones in the ring: those are another moment of the job, not this one), and
            # needs most of the span's scrapes
            recent = w.taken[m.series] > m.t - size * self.interval + self.interval / 2
            held = np.where(recent, w.samples[m.series], np.nan)
            full = (~np.isnan(held)).sum(axis=1) > size // 2
            level = np.full(len(v), np.nan)
            if full.any():
                level[full] = np.nanmedian(held[full], axis=1)
            values[:, j] = np.where(full & ~np.isnan(v), level, np.nan)

    def _summarise_off_cap(
        self,
        m: MeasurementTick,
        rules: tuple[PeerRule, ...] | list[PeerRule],
        keys: list[NDArray[np.object_]],
        summary: CohortSummary,
    ) -> None:
        """For the history rules, how many working GPUs of each cohort do not hold the rule's
        reason this scrape (their regime: the share that does is judge's to work out)."""
        busy = self._working(m)
        for j, rule in enumerate(rules):
            if not (rule.history and rule.held_reason) or busy is None or rule.metric not in m.frame.fields:
                continue
            off = busy & ~_holds(m, rule.held_reason) & (keys[j] != NO_COHORT)
            names, counts = np.unique(keys[j][off], return_counts=True)
            for name, count in zip(names.tolist(), counts.tolist(), strict=True):
                summary.add_values(_off_key(m.name, j, str(name)), np.zeros(count))

    def summarise(self, m: MeasurementTick, summary: CohortSummary) -> None:
        """This share of the tick's cohorts: each rule's values per cohort key (held for judge)."""
        rules = self.limits.rules.get(m.name, ())
        if not any(r.metric in m.frame.fields for r in rules):
            return
        values = np.full((len(m.frame), len(rules)), np.nan)
        keys: list[NDArray[np.object_]] = []
        for j, rule in enumerate(rules):
            cohort = cohort_keys(m.frame, rule.cohort)
            keys.append(cohort)
            if rule.metric not in m.frame.fields:
                continue
            v = m.rates.get(rule.metric) if rule.rate else m.frame.fields[rule.metric].as_float()
            if v is None:
                continue
            values[:, j] = np.log10(np.maximum(v, 1.0)) if rule.log else v
        self._windowed(m, values, keys)
        self._summarise_off_cap(m, rules, keys, summary)
        for j in range(len(rules)):
            col, cohort = values[:, j], keys[j]
            ok = (cohort != NO_COHORT) & ~np.isnan(col)
            if not ok.any():
                continue
            names, inverse = np.unique(cohort[ok], return_inverse=True)
            order = np.argsort(inverse, kind="stable")
            bounds = np.flatnonzero(np.diff(inverse[order])) + 1
            for rows in np.split(order, bounds):
                summary.add_values(_key(m.name, j, str(names[inverse[rows[0]]])), col[ok][rows])
        self._tick[m.name] = (values, keys)

    def score(self, m: MeasurementTick, cohorts: CohortSummary | None = None) -> FloatArray:
        scratch = copy.deepcopy(self, {id(self.limits): self.limits})  # the settings are not state
        return scratch._step(m, cohorts)[0]

    def learn(self, m: MeasurementTick, mask: Mask | None = None) -> None:
        if mask is not None:
            raise ValueError("peer rules keep their own mask: a fall still being established is not learnt")
        self._step(m, None)

    def score_and_learn(self, m: MeasurementTick, threshold: float | None = None) -> FloatArray:
        if threshold is not None:
            raise ValueError("peer rules keep their own mask: a fall still being established is not learnt")
        return self._step(m, None)[0]

    def judge(self, m: MeasurementTick, cohorts: CohortSummary | None = None) -> list[Anomaly]:
        return self._step(m, cohorts)[1]

    def _step(self, m: MeasurementTick, cohorts: CohortSummary | None) -> tuple[FloatArray, list[Anomaly]]:
        """Each entity against its cohort as the merged summary of the tick shows it (None: this
        frame is the whole cohort, summarised here): the scores and the anomalies said."""
        if cohorts is None:
            cohorts = CohortSummary()
            self.summarise(m, cohorts)
        held = self._tick.pop(m.name, None)
        if held is None:
            return np.full((len(m.frame), len(self.limits.rules.get(m.name, ()))), np.nan), []
        values, keys = held
        rules = self.limits.rules[m.name]
        persistence = self._persistence.get(m.name)
        if persistence is None:
            persistence = self._persistence[m.name] = Persistence(len(rules), self.limits.persist_ticks)
        beyond = np.zeros(values.shape, dtype=np.bool_)
        zs = np.full(values.shape, np.nan)
        medians = np.full(values.shape, np.nan)
        shown = values.copy()  # what an anomaly says the value was (a history rule: its recent level)
        for j, rule in enumerate(rules):
            col, cohort = values[:, j], keys[j]
            rows = np.flatnonzero((cohort != NO_COHORT) & ~np.isnan(col))
            if not len(rows):
                continue
            names, inverse = np.unique(cohort[rows], return_inverse=True)
            stats = cohorts.stats([_key(m.name, j, str(n)) for n in names.tolist()])
            scale = robust_scale(stats, rule.abs_floor, rule.rel_floor)
            median = stats.median[inverse]
            with np.errstate(divide="ignore", invalid="ignore"):
                z = (col[rows] - median) / scale[inverse]
            z[stats.count[inverse] < MIN_COHORT] = np.nan
            if rule.history:
                place = np.full(len(col), np.nan)
                with np.errstate(divide="ignore", invalid="ignore"):
                    place[rows] = np.where(np.isnan(z), np.nan, col[rows] / median - 1.0)
                off = cohorts.stats([_off_key(m.name, j, str(n)) for n in names.tolist()]).count[inverse]
                share = stats.count[inverse] / (stats.count[inverse] + off)
                z, shown[rows, j], median = self._against_place(m, j, rule, place, share, cohort, rows, median)
            zs[rows, j], medians[rows, j] = z, median
            beyond[:, j] = (zs[:, j] <= rule.z) if rule.z < 0 else (zs[:, j] >= rule.z)
            if rule.cohort == "job" and not rule.history and "node" in m.frame.tags:
                beyond[rows, j] = self._apart_from_mates(m, rule, col, cohort, rows, scale[inverse], beyond[rows, j])
            if rule.history:  # a fall still being established is not learned as the GPU's new place
                self._places[(m.name, j)].judged(m.series, zs[:, j] <= self.limits.history_hold_z)
        fired = persistence.update(m.series, beyond, zs)
        scores = np.where(np.array([rule.z < 0 for rule in rules]), -zs, zs)
        out: list[Anomaly] = []
        for r, j in zip(*np.nonzero(fired), strict=True):
            rule = rules[j]
            value, expected = shown[r, j], medians[r, j]
            if rule.log:
                value, expected = 10**value, 10**expected
            early = bool(abs(value - expected) < rule.warn_within)
            out.append(
                Anomaly(
                    m.t,
                    str(m.ids[r]),
                    rule.metric,
                    _detector(rule, early),
                    float(abs(zs[r, j])),
                    finite(value),
                    finite(expected),
                    m.name,
                )
            )
        return scores, out

    def _apart_from_mates(
        self,
        m: MeasurementTick,
        rule: PeerRule,
        col: FloatArray,
        cohort: NDArray[np.object_],
        rows: NDArray[np.intp],
        scale: FloatArray,
        beyond: NDArray[np.bool_],
    ) -> NDArray[np.bool_]:
        """`beyond` (per row of `rows`), kept only where the GPU also stands out from its node's
        other GPUs in the same job (or has fewer than `node_mates` of them: the job alone judges).
        A node whose GPUs all shift together is the host's doing, and its own rules' to name (PSU,
        inlet, power brake). Only the nodes of GPUs beyond the job's bar are looked at."""
        limits = self.limits
        if not beyond.any():
            return beyond
        nodes = m.frame.tag("node")[rows]
        jobs = cohort[rows]
        out = beyond.copy()
        bar = rule.z * limits.node_mates_share
        for i in np.flatnonzero(beyond):
            members = np.flatnonzero((nodes == nodes[i]) & (jobs == jobs[i]))
            if len(members) <= limits.node_mates:
                continue
            mates = float(np.median(col[rows[members]]))
            with np.errstate(divide="ignore", invalid="ignore"):
                z = (col[rows[i]] - mates) / scale[i]
            out[i] = bool(z <= bar) if rule.z < 0 else bool(z >= bar)
        return out

    def _against_place(
        self,
        m: MeasurementTick,
        j: int,
        rule: PeerRule,
        place: FloatArray,
        share: FloatArray,
        cohort: NDArray[np.object_],
        rows: NDArray[np.intp],
        median: FloatArray,
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """A history rule's judgement of `rows`: the drop of each one's place below its own
        earlier place in standard errors (NaN: not judged; a drop under the rule's least drop is
        not one), the value its recent place means at this scrape's median, and the value its
        earlier place means."""
        limits = self.limits
        history = self._places.get((m.name, j))
        if history is None:
            history = self._places[(m.name, j)] = PlaceHistory(
                limits.history_recent_scrapes,
                limits.history_baseline_scrapes,
                limits.history_baseline_min,
            )
        # the regime: the share of the cohort's working GPUs at the cap, and its median (log)
        regime = np.full((len(place), 2), np.nan)
        regime[rows, 0] = share / limits.history_regime
        with np.errstate(divide="ignore", invalid="ignore"):
            regime[rows, 1] = np.log(median) / np.log1p(limits.history_regime_level)
        history.add(m.series, place, regime, cohort)
        test = history.test(m.series[rows])
        z = np.where(test.drop <= -rule.rel_floor, test.z, np.where(np.isnan(test.z), np.nan, 0.0))
        return z, median * (1.0 + test.recent), median * (1.0 + test.baseline)

    def state_dict(self) -> State:
        names = {*self._persistence, *(name for name, _ in self._windows), *(name for name, _ in self._places)}
        return flatten({name: self._state_of(name) for name in sorted(names)})

    def load_state(self, state: State) -> None:
        for name, s in per_measurement(state).items():
            self._load(name, s)

    def _state_of(self, name: str) -> State:
        p = self._persistence.get(name)
        out: State = {f"persistence.{k}": v for k, v in p.state_dict().items()} if p is not None else {}
        for (measurement, j), w in self._windows.items():
            if measurement == name:
                out.update({f"window{j}.samples": w.samples.copy(), f"window{j}.at": w.at.copy()})
                out[f"window{j}.taken"] = w.taken.copy()
                out[f"window{j}.cohort"] = w.cohort.copy()
        for (measurement, j), h in self._places.items():
            if measurement == name:
                out.update({f"place{j}.{k}": v for k, v in h.state_dict().items()})
        return out

    def _load(self, name: str, s: State) -> None:
        sub = {k.split(".", 1)[1]: v for k, v in s.items() if k.startswith("persistence.")}
        if sub:
            p = Persistence(np.asarray(sub["count"]).shape[1], self.limits.persist_ticks)
            p.load_state(sub)
            self._persistence[name] = p
        for key in s:  # absent from a state saved before windows
            if key.startswith("window") and key.endswith(".samples"):
                j = int(key[len("window") : -len(".samples")])
                self._windows[(name, j)] = _Window(
                    np.asarray(s[key], dtype=np.float64).copy(),
                    # a state saved before sample times: its samples are of no known moment
                    np.asarray(s.get(f"window{j}.taken", np.full(np.shape(s[key]), -np.inf)), dtype=np.float64).copy(),
                    np.asarray(s[f"window{j}.at"], dtype=np.int64).copy(),
                    np.asarray(s[f"window{j}.cohort"], dtype=object).copy(),
                )
            if key.startswith("place") and key.endswith(".recent"):
                j = int(key[len("place") : -len(".recent")])
                sub = {k.split(".", 1)[1]: v for k, v in s.items() if k.startswith(f"place{j}.")}
                limits = self.limits
                self._places[(name, j)] = PlaceHistory.from_state(
                    sub,
                    limits.history_recent_scrapes,
                    limits.history_baseline_scrapes,
                    limits.history_baseline_min,
                )


def _detector(rule: PeerRule, early: bool) -> str:
    """peer:<cohort> (against the cohort), place:<cohort> (against its own place in it), or
    warn:<cohort> when it is off by less than the rule's warn_within."""
    if early:
        return f"warn:{rule.cohort}"
    return f"place:{rule.cohort}" if rule.history else f"peer:{rule.cohort}"


def _holds(m: MeasurementTick, reason: str) -> NDArray[np.bool_]:
    """Rows whose GPU holds this clock event reason, or does not say (a site that does not export
    the reasons): such a site is judged on all its samples by the rules that want the reason held,
    and by none of those that want it not held."""
    field_ = m.frame.fields.get(REASONS_FIELD)
    if field_ is None:
        return np.ones(len(m.frame), dtype=np.bool_)
    bits = field_.as_float()
    held = (np.nan_to_num(bits, nan=0.0).astype(np.int64) & registry.clock_reason(reason)) != 0
    return np.asarray(held | np.isnan(bits), dtype=np.bool_)


def _key(measurement: str, rule: int, cohort: str) -> str:
    return f"peer/{measurement}/{rule}/{cohort}"


def _off_key(measurement: str, rule: int, cohort: str) -> str:
    return f"off/{measurement}/{rule}/{cohort}"


def cohort_keys(frame: Frame, kind: str) -> NDArray[np.object_]:
    """Cohort name per row (NO_COHORT: in none): the job a GPU works for, a switch's role, or the
    one cohort of them all."""
    if kind == "all":
        return np.full(len(frame), "*", dtype=object)
    key = frame.tag({"job": "job", "role": "role"}[kind]).astype(object)
    if kind == "job":
        # idle GPUs are not a cohort worth comparing, nor are GPUs whose job nobody told us
        key = np.where((key == "idle") | (key == ""), NO_COHORT, key).astype(object)
    return key
