"""Peer groups on what the workload moves: a GPU against the other GPUs of its job, a switch
against switches of its role, a node's inlet or a cooling loop against all the others. Jobs
starting, checkpoints and the diurnal cycle move whole cohorts, so they cancel out; a deviation
must persist a few ticks. Close to its peers it is an early warning, not a failure."""

from __future__ import annotations

import numpy as np

from detectors.anomaly import Anomaly
from detectors.base import IndexArray, State
from detectors.peers import Persistence, robust_z
from detectors.stack.view import MeasurementTick, finite
from ingest.frames import Frame
from vocab.thresholds import PeerThresholds


class PeerRules:
    def __init__(self, limits: PeerThresholds) -> None:
        self.limits = limits
        self._persistence: dict[str, Persistence] = {}

    def process(self, m: MeasurementTick) -> list[Anomaly]:
        all_rules = self.limits.rules.get(m.name, ())
        if not any(r.metric in m.frame.fields for r in all_rules):
            return []
        persistence = self._persistence.get(m.name)
        if persistence is None:
            persistence = self._persistence[m.name] = Persistence(len(all_rules), self.limits.persist_ticks)
        values = np.full((len(m.frame), len(all_rules)), np.nan)
        for j, rule in enumerate(all_rules):
            if rule.metric not in m.frame.fields:
                continue
            v = m.rates.get(rule.metric) if rule.rate else m.frame.fields[rule.metric].as_float()
            if v is None:
                continue
            values[:, j] = np.log10(np.maximum(v, 1.0)) if rule.log else v
        beyond = np.zeros(values.shape, dtype=np.bool_)
        zs = np.full(values.shape, np.nan)
        medians = np.full(values.shape, np.nan)
        for j, rule in enumerate(all_rules):
            cohort = cohort_codes(m.frame, rule.cohort)
            z, med = robust_z(values[:, j : j + 1], cohort, abs_floor=rule.abs_floor, rel_floor=rule.rel_floor)
            zs[:, j], medians[:, j] = z[:, 0], med[:, 0]
            beyond[:, j] = (z[:, 0] <= rule.z) if rule.z < 0 else (z[:, 0] >= rule.z)
        fired = persistence.update(m.series, beyond, zs)
        out: list[Anomaly] = []
        for r, j in zip(*np.nonzero(fired), strict=True):
            rule = all_rules[j]
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


def cohort_codes(frame: Frame, kind: str) -> IndexArray:
    """Cohort id per row (-1: in no cohort)."""
    if kind == "all":
        return np.zeros(len(frame), dtype=np.int64)
    key = frame.tag({"job": "job", "role": "role"}[kind])
    codes = np.unique(key, return_inverse=True)[1].astype(np.int64)
    if kind == "job":
        # idle GPUs are not a cohort worth comparing, nor are GPUs whose job nobody told us
        codes[(key == "idle") | (key == "")] = -1
    return codes
