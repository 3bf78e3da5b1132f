"""Tried on 2026-12-05, not kept: a warning after k of the last n scoring rounds above its
threshold, instead of k in a row (the shipped rule, n = k). Replays the default model's recorded
answers on the validation histories (scripts/predictor-validation records them once, ~8 min) and
prints each variant beside the shipped one. Validation histories only: no held-out set is read.

    PYTHONPATH=. .venv/bin/python docs/experiments/2026_12_05_k_of_n_rounds.py

Why it was tried: on the validation histories the thermal classifier's probability swings near its
plateau (0.95, 0.63, 0.95 in three rounds on GPUs failing at severity 0.8-0.97), so "two rounds in
a row at 0.9" waits for a third. Found: two of the last three rounds keep recall and precision
(0.813 / 0.975, thermal 18 of 46) and move the median lead by minutes (2.65 -> 2.66 h pooled,
1.93 -> 1.97 h at scale); the persistence rule is not what holds thermal back.
"""

from __future__ import annotations

import importlib.util
import sys
from collections import deque
from importlib.machinery import SourceFileLoader
from pathlib import Path
from typing import Any

import numpy as np

from aiops.default_model import default_model_path, load_or_train_default
from detectors.anomaly import Prediction
from detectors.predict.online import MIN_EMIT_LEAD_S, OnlinePredictor

SCRIPT = Path(__file__).parents[2] / "scripts" / "predictor-validation"
spec = importlib.util.spec_from_loader("predictor_validation", SourceFileLoader("predictor_validation", str(SCRIPT)))
assert spec is not None and spec.loader is not None
pv = importlib.util.module_from_spec(spec)
sys.modules["predictor_validation"] = pv
spec.loader.exec_module(pv)

WINDOW = {"n": 2}  # rounds looked back over, the current one included


class KOfN(OnlinePredictor):
    """OnlinePredictor with `persist_rounds` counted over the last WINDOW["n"] rounds: the
    product's scoring round (OnlinePredictor.score), told each entity's rounds above its threshold
    within the window where it counts the rounds in a row."""

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
        history: dict[str, dict[str, deque[bool]]] = self.__dict__.setdefault("_history", {})
        # which entities OnlinePredictor.score finds above their threshold this round
        soon = ~(ttf > self.emit_within_s) & ~(ttf < MIN_EMIT_LEAD_S)
        above = (p >= self.threshold_for(which)) & soon
        rounds = history.setdefault(kind, {})
        for i, entity in enumerate(map(str, ids.tolist())):
            if above[i] or entity in rounds:
                seen = rounds.setdefault(entity, deque(maxlen=WINDOW["n"]))
                seen.append(bool(above[i]))
                if not any(seen):
                    del rounds[entity]
        # its streak of an entity above is the one before plus this round: the rounds above in
        # the window, this one included
        self._streak[kind] = {e: sum(rounds[e]) - 1 for e in map(str, ids[above].tolist())}
        return super().score(t, kind, ids, p, which, ttf, blocked)


def main() -> None:
    pv.__dict__["OnlinePredictor"] = KOfN  # the replay builds its predictors from the script's name
    model = load_or_train_default(default_model_path())
    seeds = [(seed, {**pv.VALIDATION}) for seed in range(2001, 2009)]
    at_scale = [(seed, {**pv.VALIDATION, **extra}) for extra, group in pv.AT_SCALE for seed in group]
    groups = [pv.record([model], histories)[0] for histories in (seeds, at_scale)]
    print(
        "| k of n | thermal | recall | precision | median lead (h) | precision per group | thermal | lead per group |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for k, n in ((2, 2), (2, 3), (2, 4), (3, 3), (3, 4), (3, 5)):
        WINDOW["n"] = n
        for thermal in (0.8, 0.85, 0.9, 0.95):
            thresholds = {"gpu_hbm_ecc": 0.4, "gpu_thermal": thermal, "optic_degradation": 0.3, "rack_cooling": 0.3}
            setting: dict[str, Any] = {"persist_rounds": k, "emit_within_s": 8 * 3600.0, "thresholds": thresholds}
            parts = [pv.replay(group, setting, model.horizon_s, 600.0) for group in groups]
            pooled = pv.pool_reports(parts)
            found = pooled.kinds.get("gpu_thermal", {})
            false = sum(part.kinds.get("gpu_thermal", {}).get("false", 0) for part in parts)
            print(
                f"| {k}/{n} | {thermal} | {pooled.recall:.3f} | {pooled.precision:.3f} | {pooled.median_lead_h:.2f} "
                f"| {' / '.join(f'{part.precision:.2f}' for part in parts)} "
                f"| {int(found.get('predicted', 0))}/{int(found.get('faults', 0))}, {int(false)} false "
                f"| {' / '.join(f'{part.median_lead_h:.2f}' for part in parts)} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
