"""Online prediction in the pipeline, the default model, and prediction quality.

Features are updated every tick (cheap); the model scores every entity every `every_ticks` ticks.
A prediction is emitted when an entity's probability has been at least its failure kind's
threshold for two scoring rounds in a row and its expected time to failure is within
`emit_within_s`, once per episode: the entity is not predicted again until its probability has
stayed below half the threshold for an hour, or the horizon has passed.

Why: a prediction made earlier than the horizon (12 h) before onset counts as false, and a failure
expected further out than 8 h is better announced later, with the next checkpoint still ahead; one
round above the threshold is often a single noisy feature. The thresholds differ by kind because
the kinds do, and because precision falls with the healthy parts a fault is found among: HBM
(0.4), optic and cooling (0.3) warnings come from memory errors and trends that healthy parts do
not show; so does a GPU's heat rise above its node's inlet against its own past (feature version
8: a healthy GPU's stays under 0.5 C), so thermal needs 0.4 (0.7 with version 7, whose healthy
GPUs "rose" up to 3 C when their rack's air or the site's slope moved).
All of it was chosen on validation histories (seeds 2001-2008, 512 GPUs x 14 h at typical
realism, 2011-2018 the same at harsh, and the AT_SCALE ones, 256-8192 GPUs, 6-8 h, 10-60 s;
`scripts/predictor-validation`, which replays recorded model answers through `score`), never on
the seeds, sizes or intervals the figures are reported for, by one rule: the most recall with a
median lead >= 2 h and precision >= 0.90 in each group (whole nodes or part of a node, typical
or harsh, at scale), held one standard error below what the group showed, counting a prediction
from 10 minutes of lead (0.4 / 0.4 / 0.3 / 0.3, 2 rounds, within 8 h for model 13b9a02eade7:
recall 0.93, precision 1.00, median lead 3.12 h; thermal 0.7 for 80075c511ba2 before it, 0.8 for
77104b233044, 0.6 for it under the rule before, two groups and no margin, and 0.9 for 9dcb21c4e45b).
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from detectors.anomaly import Prediction
from detectors.predict.features import FEATURES, HOUR, WARMUP_S, PrecursorFeatures
from detectors.predict.model import (
    HORIZON_S,
    PREDICTABLE,
    Predictor,
)
from detectors.stack.summary import CohortSummary
from ingest.frames import Frame
from vocab import registry
from vocab.thresholds import MIN_USEFUL_LEAD_S

log = logging.getLogger(__name__)

RE_ARM_S = HOUR
# a failure expected sooner than this is not announced: no time left to drain at a checkpoint
# (a job checkpoints every 15-30 min and a checkpoint takes about a minute; operational choice).
# Not the lead a view counts a prediction from (vocab/thresholds.py MIN_USEFUL_LEAD_S, 30 min): a
# warning 10-30 min ahead is still said, it is only not counted as predicted.
MIN_EMIT_LEAD_S = 10 * 60.0


@dataclass
class OnlinePredictor:
    model: Predictor
    threshold: float = 0.5  # for a kind without its own below
    # by the failure kind the model expects; with the two below, chosen on validation (see above)
    thresholds: dict[str, float] = field(default_factory=registry.warning_thresholds)  # vocab/faults.toml
    persist_rounds: int = 2
    emit_within_s: float = 8 * HOUR
    every_ticks: int = 10
    features: PrecursorFeatures = field(default_factory=PrecursorFeatures)
    warmup_s: float = WARMUP_S  # what the model learnt from: see features.WARMUP_S
    # A warning is said once per episode, at the probability it had then (just over its kind's
    # threshold, 0.4 for HBM); the failure grows surer as its precursor climbs, and acting on a
    # warning needs more (a drain pays from 0.57: act/costs.py). So a warning whose probability has
    # risen by this much since it was last said is said again, as an update: the incident takes
    # the higher probability and acting decides again. (Said once, the warnings of the held-out
    # goodput seeds stayed at 0.56 while their failures came: no drain ahead of any.)
    raise_by: float = 0.15
    _ticks: int = 0
    _started: float | None = None
    _episode: dict[str, tuple[float, float]] = field(default_factory=dict)  # entity -> (predicted at, low since)
    _streak: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> entity -> rounds in a row above
    _said: dict[str, float] = field(default_factory=dict)  # entity -> the probability its warning last said

    def __getstate__(self) -> dict[str, object]:
        """A checkpoint keeps the features and the streaks, not the model (a file of its own)."""
        state = self.__dict__.copy()
        state["model"] = None
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_said", {})  # a checkpoint from before warnings were raised

    def fresh(self) -> OnlinePredictor:
        """The same model and settings, nothing learnt yet (one per partition in split detection)."""
        return replace(self, features=PrecursorFeatures(), _ticks=0, _started=None, _episode={}, _streak={}, _said={})

    def update(
        self,
        t: float,
        frames: dict[str, Frame],
        failing: set[str] | frozenset[str] = frozenset(),
        cohorts: CohortSummary | None = None,
    ) -> list[Prediction]:
        """`failing`: entities the detectors currently report; a failure that is already under way
        is an incident, not something to predict. `cohorts`: the tick's merged summary (None:
        these frames are the whole fleet)."""
        if not self.advance(t, frames, cohorts):
            return []
        out: list[Prediction] = []
        for kind in FEATURES:
            ids, X = self.features.matrix(kind)
            if not len(ids):
                continue
            p, which, ttf = self.model.probabilities(kind, X)
            lowest = min([self.threshold, *self.thresholds.values()])
            out += self.score(t, kind, ids, p, which, ttf, self.blocked(ids[p >= lowest], failing))
        return out

    def advance(self, t: float, frames: dict[str, Frame], cohorts: CohortSummary | None = None) -> bool:
        """Take the tick into the features; True when the model scores this tick."""
        self.features.update(t, frames, cohorts)
        self._ticks += 1
        if self._started is None:
            self._started = t
        return not (self._ticks % self.every_ticks or t - self._started < self.warmup_s)

    def blocked(self, ids: np.ndarray, failing: set[str] | frozenset[str]) -> frozenset[str]:
        """Of these entities, the ones whose failure (or their part's) is under way: not predicted."""
        related = self.features.related
        return frozenset(e for e in map(str, ids.tolist()) if e in failing or related.get(e) in failing)

    def threshold_for(self, which: np.ndarray) -> np.ndarray:
        """Each entity's threshold, by the failure kind the model expects of it."""
        out = np.full(len(which), self.threshold)
        for kind, threshold in self.thresholds.items():  # a few kinds, every entity at once
            out[which == kind] = threshold
        return out

    def score(
        self,
        t: float,
        kind: str,
        ids: np.ndarray,
        p: np.ndarray,
        which: np.ndarray,
        ttf: np.ndarray,
        blocked: frozenset[str] = frozenset(),
    ) -> list[Prediction]:
        """One scoring round for one entity kind, from the model's answers (the validation script
        replays recorded answers through this to choose the settings)."""
        out: list[Prediction] = []
        threshold = self.threshold_for(which)
        # expected time to failure further out: coming, but not yet worth a drain
        soon = ~(ttf > self.emit_within_s) & ~(ttf < MIN_EMIT_LEAD_S)
        above = np.flatnonzero((p >= threshold) & soon)
        before = self._streak.get(kind, {})
        streak = {str(e): before.get(str(e), 0) + 1 for e in ids[above].tolist()}
        self._streak[kind] = streak  # an entity that dropped below starts again
        for i in above.tolist():
            entity = str(ids[i])
            if streak[entity] < self.persist_rounds or entity in blocked:
                continue
            update = entity in self._episode
            if update and float(p[i]) < self._said.get(entity, math.inf) + self.raise_by:
                continue
            if not update:
                self._episode[entity] = (t, math.inf)
            self._said[entity] = float(p[i])
            expected = None if math.isnan(ttf[i]) else float(min(ttf[i], self.model.horizon_s))
            out.append(
                Prediction(
                    entity,
                    t,
                    str(which[i]),
                    round(float(p[i]), 4),
                    self.model.horizon_s,
                    expected,
                    registry.warning_action(str(which[i])),
                    update=update,
                )
            )
        self._end_episodes(t, ids, p < threshold / 2)
        return out

    def _end_episodes(self, t: float, ids: np.ndarray, below_half: np.ndarray) -> None:
        """This round's entities only: an optic is not "not low" because the GPUs were scored
        (read against every episode, each kind's round reset the others' low spells, so only the
        last kind scored ever re-armed after an hour low)."""
        if not self._episode:
            return
        for i in np.flatnonzero(np.isin(ids, np.array(list(self._episode), dtype=object))).tolist():
            entity, low = str(ids[i]), bool(below_half[i])
            since, low_since = self._episode[entity]
            if t - since > self.model.horizon_s:
                del self._episode[entity]
                self._said.pop(entity, None)
            elif low:
                if low_since == math.inf:
                    self._episode[entity] = (since, t)
                elif t - low_since >= RE_ARM_S:
                    del self._episode[entity]
                    self._said.pop(entity, None)
            elif low_since != math.inf:
                self._episode[entity] = (since, math.inf)


# ---------------------------------------------------------------- quality


@dataclass
class PredictionReport:
    kinds: dict[str, dict[str, float]]
    predictions: int
    hits: int
    recall: float
    precision: float
    median_lead_h: float
    leads_h: list[float] = field(default_factory=list)  # per predicted fault, its longest lead


def pool_reports(reports: list[PredictionReport]) -> PredictionReport:
    """Several held-out histories as one: counts added, medians over every fault."""
    kinds: dict[str, dict[str, float]] = {}
    for r in reports:
        for kind, k in r.kinds.items():
            into = kinds.setdefault(kind, {"faults": 0, "predicted": 0, "leads": []})  # type: ignore[dict-item]
            into["faults"] += k["faults"]
            into["predicted"] += k["predicted"]
            into["leads"] += k.get("leads", [])  # type: ignore[operator]
    for k in kinds.values():
        leads: list[float] = k.pop("leads")  # type: ignore[assignment]
        k["recall"] = k["predicted"] / k["faults"] if k["faults"] else math.nan
        k["median_lead_h"] = float(np.median(leads)) if leads else math.nan
    faults = sum(k["faults"] for k in kinds.values())
    predictions, hits = sum(r.predictions for r in reports), sum(r.hits for r in reports)
    leads = [x for r in reports for x in r.leads_h]
    return PredictionReport(
        kinds,
        predictions,
        hits,
        sum(k["predicted"] for k in kinds.values()) / faults if faults else math.nan,
        hits / predictions if predictions else math.nan,
        float(np.median(leads)) if leads else math.nan,
        leads,
    )


def evaluate_predictions(
    predictions: Iterable[Prediction],
    truth: list[dict[str, Any]],
    min_lead_s: float = MIN_USEFUL_LEAD_S,
    earliest: float | None = None,
) -> PredictionReport:
    """docs/prediction.md's measures: a prediction for E at t is a hit if a fault rooted at E has onset in
    (t, t + horizon]; recall counts predictable faults predicted at least `min_lead_s` ahead.
    `earliest`: when the predictor could first speak (start of the record plus its warm-up);
    faults with onset before earliest + min_lead_s could not be predicted and are left out.
    A warning said again at a higher probability (`update`) is not another prediction."""
    preds = [p for p in predictions if not p.update]
    predictable = [f for f in truth if any(f["kind"] in kinds for kinds in PREDICTABLE.values())]
    if earliest is not None:
        predictable = [f for f in predictable if float(f["onset"]) >= earliest + min_lead_s]
    by_root: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for f in truth:
        by_root[str(f["root"])].append(f)
    hits = 0
    leads: dict[str, float] = {}
    for p in preds:
        for f in by_root.get(p.entity, []):
            onset = float(f["onset"])
            if p.at < onset <= p.at + p.horizon_s:
                hits += 1
                leads[f["fault_id"]] = max(leads.get(f["fault_id"], 0.0), onset - p.at)
                break
    kinds: dict[str, dict[str, float]] = {}
    for kind in sorted({f["kind"] for f in predictable}):
        faults = [f for f in predictable if f["kind"] == kind]
        caught = [f for f in faults if leads.get(f["fault_id"], 0.0) >= min_lead_s]
        kind_leads = [leads[f["fault_id"]] / HOUR for f in caught]
        kinds[kind] = {
            "faults": len(faults),
            "predicted": len(caught),
            "recall": len(caught) / len(faults) if faults else math.nan,
            "median_lead_h": float(np.median(kind_leads)) if kind_leads else math.nan,
            "leads": kind_leads,  # type: ignore[dict-item]
        }
    caught_all = [f for f in predictable if leads.get(f["fault_id"], 0.0) >= min_lead_s]
    all_leads = [leads[f["fault_id"]] / HOUR for f in caught_all]
    return PredictionReport(
        kinds,
        len(preds),
        hits,
        len(caught_all) / len(predictable) if predictable else math.nan,
        hits / len(preds) if preds else math.nan,
        float(np.median(all_leads)) if all_leads else math.nan,
        all_leads,
    )


def format_prediction_report(r: PredictionReport) -> str:
    lines = [f"{'kind':20s} {'faults':>6s} {'predicted':>9s} {'recall':>7s} {'median lead (h)':>16s}"]
    for kind, k in r.kinds.items():
        lines.append(
            f"{kind:20s} {int(k['faults']):6d} {int(k['predicted']):9d} {k['recall']:7.2f} {k['median_lead_h']:16.2f}"
        )
    lines.append(
        f"recall {r.recall:.3f} (lead >= 30 min), precision {r.precision:.3f} "
        f"({r.hits}/{r.predictions} predictions), median lead {r.median_lead_h:.2f} h"
    )
    return "\n".join(lines)


__all__ = [
    "HORIZON_S",
    "MIN_EMIT_LEAD_S",
    "OnlinePredictor",
    "Prediction",
    "PredictionReport",
    "evaluate_predictions",
    "format_prediction_report",
    "pool_reports",
]
