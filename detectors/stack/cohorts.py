"""Peer groups on what the workload moves: a GPU against the other GPUs of its job, a switch
against switches of its role, a node's inlet or a cooling loop against all the others. Jobs
starting, checkpoints and the diurnal cycle move whole cohorts, so they cancel out; a deviation
must persist a few ticks. Close to its peers it is an early warning, not a failure."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from detectors.anomaly import Anomaly
from detectors.base import FloatArray, State
from detectors.peers import Persistence
from detectors.stack.summary import CohortSummary, robust_scale
from detectors.stack.view import MeasurementTick, finite
from ingest.frames import Frame
from vocab.thresholds import PeerThresholds

NO_COHORT = "\x00"  # line protocol cannot carry it: no tag value is mistaken for it
MIN_COHORT = 4  # fewer members than this make no cohort to stand out from (as robust_z)


class PeerRules:
    def __init__(self, limits: PeerThresholds) -> None:
        self.limits = limits
        self._persistence: dict[str, Persistence] = {}
        # per measurement, between summarise and judge: the rules' values and cohort keys
        self._tick: dict[str, tuple[FloatArray, list[NDArray[np.object_]]]] = {}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_tick", {})  # a checkpoint from before the split

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
            col = values[:, j]
            ok = (cohort != NO_COHORT) & ~np.isnan(col)
            if not ok.any():
                continue
            names, inverse = np.unique(cohort[ok], return_inverse=True)
            order = np.argsort(inverse, kind="stable")
            bounds = np.flatnonzero(np.diff(inverse[order])) + 1
            for rows in np.split(order, bounds):
                summary.add_values(_key(m.name, j, str(names[inverse[rows[0]]])), col[ok][rows])
        self._tick[m.name] = (values, keys)

    def judge(self, m: MeasurementTick, cohorts: CohortSummary) -> list[Anomaly]:
        """Each entity against its cohort as the merged summary of the tick shows it."""
        held = self._tick.pop(m.name, None)
        if held is None:
            return []
        values, keys = held
        rules = self.limits.rules[m.name]
        persistence = self._persistence.get(m.name)
        if persistence is None:
            persistence = self._persistence[m.name] = Persistence(len(rules), self.limits.persist_ticks)
        beyond = np.zeros(values.shape, dtype=np.bool_)
        zs = np.full(values.shape, np.nan)
        medians = np.full(values.shape, np.nan)
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
            zs[rows, j], medians[rows, j] = z, median
            beyond[:, j] = (zs[:, j] <= rule.z) if rule.z < 0 else (zs[:, j] >= rule.z)
        fired = persistence.update(m.series, beyond, zs)
        out: list[Anomaly] = []
        for r, j in zip(*np.nonzero(fired), strict=True):
            rule = rules[j]
            value, expected = values[r, j], medians[r, j]
            if rule.log:
                value, expected = 10**value, 10**expected
            early = bool(abs(value - expected) < rule.warn_within)
            out.append(
                Anomaly(
                    m.t,
                    str(m.ids[r]),
                    rule.metric,
                    f"warn:{rule.cohort}" if early else f"peer:{rule.cohort}",
                    float(abs(zs[r, j])),
                    finite(value),
                    finite(expected),
                    m.name,
                )
            )
        return out

    def state_dict(self, name: str) -> State:
        p = self._persistence.get(name)
        return {f"persistence.{k}": v for k, v in p.state_dict().items()} if p is not None else {}

    def load_state(self, name: str, s: State) -> None:
        sub = {k.split(".", 1)[1]: v for k, v in s.items() if k.startswith("persistence.")}
        if sub:
            p = Persistence(np.asarray(sub["count"]).shape[1], self.limits.persist_ticks)
            p.load_state(sub)
            self._persistence[name] = p


def _key(measurement: str, rule: int, cohort: str) -> str:
    return f"peer/{measurement}/{rule}/{cohort}"


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
