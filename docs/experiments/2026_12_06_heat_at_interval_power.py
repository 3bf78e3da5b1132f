"""Measured on 2026-12-06, kept (feature version 5): a GPU's heat read at the power its scrape
interval burnt (the energy counter's delta) against the same heat read at the power gauge's one
second. Runs the predictor's features over validation histories twice, once with the energy
counter and once with it removed from every frame (the gauge is then all there is, as before),
and prints, per group of histories, the spread of healthy GPUs' heat rise against their own 12 h
(`heat_vs_node_rise_12h`) and when a thermal fault's rise first passes the healthy 99.99th
percentile (a single-feature oracle: the model itself also reads level, trend and power).
Validation histories only: no held-out set is read.

    PYTHONPATH=. .venv/bin/python docs/experiments/2026_12_06_heat_at_interval_power.py   # ~3 min
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aiops.default_model import generated_history
from detectors.predict.features import ENERGY_FIELD, FEATURES, WARMUP_S, PrecursorFeatures

VALIDATION = {  # scripts/predictor-validation's VALIDATION and two of its AT_SCALE histories
    "gpus": 512,
    "hours": 14.0,
    "interval": 60.0,
    "faults": "all=1,gpu_hbm_ecc=4,gpu_thermal=4,optic_degradation=4,rack_cooling=3",
    "realism": "typical",
    "job_shapes": ["nodes", "gpus"],
}
GROUPS: dict[str, list[tuple[int, dict[str, Any]]]] = {
    "whole nodes (2002, 2004)": [(2002, VALIDATION), (2004, VALIDATION)],
    "part of a node (2001, 2003)": [(2001, VALIDATION), (2003, VALIDATION)],
    "4,096 GPUs, typical and harsh (2102, 2108)": [
        (2102, {**VALIDATION, "gpus": 4096, "hours": 6.0, "faults": "all=2"}),
        (2108, {**VALIDATION, "gpus": 4096, "hours": 6.0, "faults": "all=2", "realism": "harsh"}),
    ],
}
RISE = FEATURES["gpu"].index("heat_vs_node_rise_12h")


def rounds(seed: int, config: dict[str, Any], counted: bool) -> tuple[list[tuple[float, Any, Any]], list[Any]]:
    """(time, GPU ids, rise) every 5 minutes after the warm-up, and the truth."""
    ticks, truth = generated_history(seed, config)
    features, out, start, due = PrecursorFeatures(), [], None, 0.0
    for t, frames in ticks:
        if not counted:
            frames["gpu"].fields.pop(ENERGY_FIELD, None)
        features.update(t, frames)
        start = t if start is None else start
        if t >= start + WARMUP_S and t >= due:
            due = t + 300.0
            ids, X = features.matrix("gpu")
            out.append((t, ids, X[:, RISE]))
    return out, truth


def main() -> None:
    print(
        "| histories | heat read at | healthy rise: 99th / 99.9th / 99.99th pct (C) "
        "| thermal faults past the 99.99th | median share of the ramp gone then | median lead then (h) |"
    )
    print("|---|---|---|---|---|---|")
    for name, histories in GROUPS.items():
        for counted in (False, True):
            healthy, faults = [], []
            for seed, config in histories:
                recorded, truth = rounds(seed, config, counted)
                failing = {f["root"] for f in truth if f["kind"] in ("gpu_thermal", "gpu_hbm_ecc")}
                for _, ids, rise in recorded:
                    healthy.append(rise[np.array([i not in failing for i in ids.tolist()])])
                for f in truth:
                    if f["kind"] == "gpu_thermal" and f.get("precursor_start") is not None:
                        faults.append((f, recorded))
            limits = np.nanpercentile(np.concatenate(healthy), [99, 99.9, 99.99])
            shares, leads = [], []
            for f, recorded in faults:
                begun, onset = float(f["precursor_start"]), float(f["onset"])
                for t, ids, rise in recorded:
                    where = np.flatnonzero(ids == f["root"])
                    if t < onset and len(where) and rise[where[0]] > limits[2]:
                        shares.append((t - begun) / (onset - begun))
                        leads.append((onset - t) / 3600.0)
                        break
            share, lead = (np.median(v) if v else float("nan") for v in (shares, leads))
            print(
                f"| {name} | {'the energy counter' if counted else 'the power gauge'} "
                f"| {' / '.join(f'{v:.2f}' for v in limits)} | {len(leads)} of {len(faults)} "
                f"| {share:.2f} | {lead:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
