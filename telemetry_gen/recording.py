"""The generator's GPUs beside the recorded H200: the same statistics, measured on both.

`recording_stats` reads `../shared/datasets/real-gpu/h200/nvml-1s.csv` (or $AIOPS_RECORDING);
`generator_stats` measures a fault-free generated cluster, classifying each sample by the state
the scheduler put the GPU in (computing, checkpointing, no job). `python -m telemetry_gen.recording`
prints both side by side (scripts/realism-table calls it); tests/unit/test_gpu_behaviour.py holds
the generator to the recording's distributions.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from telemetry_gen.generator import GenConfig, Generation
from vocab.catalog import DCGM_FP64_BLANK

RECORDING = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "real-gpu" / "h200" / "nvml-1s.csv"
BUSY_UTIL = 90.0  # a sample counts as busy at >= 90 % utilisation
LOW_W = 600.0  # a busy sample under this is a step-boundary sample (train's steady floor: 675 W)

# (key, what it is); the recording's compute-bound rows come from phases train (and burn)
ROWS = (
    ("busy_clock_p5", "busy compute-bound SM clock p5 (MHz)"),
    ("busy_clock_p50", "busy compute-bound SM clock median (MHz)"),
    ("busy_clock_p95", "busy compute-bound SM clock p95 (MHz)"),
    ("wander_sd", "clock wander, sd / median of one GPU's busy samples"),
    ("busy_power_p5", "busy compute-bound power p5 (W)"),
    ("busy_power_p50", "busy compute-bound power median (W)"),
    ("busy_power_max", "busy compute-bound power max (W)"),
    ("cap_reason_share", "busy compute-bound samples with reason 0x4"),
    ("step_boundary_rate", f"busy samples under {LOW_W:.0f} W (step-boundary samples)"),
    ("membound_clock", "memory-bound SM clock median (MHz)"),
    ("membound_power", "memory-bound power median (W)"),
    ("context_idle_clock", "context, no kernels (checkpoint): SM clock median (MHz)"),
    ("context_idle_power", "context, no kernels (checkpoint): power median (W)"),
    ("context_idle_reason0", "context, no kernels: share with no reason"),
    ("no_context_clock", "no context: SM clock median (MHz)"),
    ("no_context_power", "no context: power median (W)"),
    ("no_context_idle_reason", "no context: share with reason 0x1"),
)


def recording_path() -> Path:
    return Path(os.environ.get("AIOPS_RECORDING", RECORDING))


def _q(x: NDArray[np.float64], p: float) -> float:
    return float(np.percentile(x, p)) if len(x) else float("nan")


def _busy_stats(clock: NDArray[np.float64], power: NDArray[np.float64], reasons: NDArray[np.int64]) -> dict[str, float]:
    return {
        "busy_clock_p5": _q(clock, 5),
        "busy_clock_p50": _q(clock, 50),
        "busy_clock_p95": _q(clock, 95),
        "busy_power_p5": _q(power, 5),
        "busy_power_p50": _q(power, 50),
        "busy_power_max": float(power.max()) if len(power) else float("nan"),
        "cap_reason_share": float(((reasons & 4) > 0).mean()) if len(reasons) else float("nan"),
    }


def _idle_stats(prefix: str, clock: NDArray[np.float64], power: NDArray[np.float64]) -> dict[str, float]:
    return {f"{prefix}_clock": _q(clock, 50), f"{prefix}_power": _q(power, 50)}


def recording_stats(path: Path | None = None, busy_phase: str = "train") -> dict[str, float]:
    """The recording's figures; `busy_phase` is the compute-bound phase (train or burn)."""
    with open(path or recording_path()) as f:
        rows = list(csv.DictReader(f))
    col = {k: np.array([float(r[k] or "nan") for r in rows]) for k in ("gpu_util", "power_w", "sm_clock")}
    reasons = np.array([int(r["clocks_event_reasons"] or 0) for r in rows])
    phase = np.array([r["phase"] for r in rows])
    busy = (phase == busy_phase) & (col["gpu_util"] >= BUSY_UTIL)
    steady = busy & (col["power_w"] >= LOW_W)
    out = _busy_stats(col["sm_clock"][steady], col["power_w"][steady], reasons[steady])
    c = col["sm_clock"][steady]
    out["wander_sd"] = float(c.std() / np.median(c))
    out["step_boundary_rate"] = float((col["power_w"][busy] < LOW_W).mean())
    mb = phase == "membound"
    out |= {"membound_clock": _q(col["sm_clock"][mb], 50), "membound_power": _q(col["power_w"][mb], 50)}
    ctx = np.isin(phase, ("cooldown", "eval-gap", "cooldown2")) | (
        (phase == "train-checkpoint") & (col["gpu_util"] == 0)
    )
    out |= _idle_stats("context_idle", col["sm_clock"][ctx], col["power_w"][ctx])
    out["context_idle_reason0"] = float((reasons[ctx] == 0).mean())
    idle = phase == "idle"
    out |= _idle_stats("no_context", col["sm_clock"][idle], col["power_w"][idle])
    out["no_context_idle_reason"] = float(((reasons[idle] & 1) > 0).mean())
    return out


def generator_stats(gen: Generation) -> dict[str, float]:
    """The same figures on a generated cluster (best run without faults): each GPU sample is
    classed by its scheduled state; the per-GPU wander is the median over GPUs of sd / median of
    a GPU's compute-bound samples within one job."""
    sim, w = gen.sim, gen.workload
    membound_of = sim.cap.membound(len(w.jobs)) if sim.cap is not None else np.zeros(len(w.jobs) + 1, dtype=np.bool_)
    acc: dict[str, list[NDArray[np.float64]]] = {}

    def add(key: str, v: NDArray[np.float64]) -> None:
        acc.setdefault(key, []).append(np.asarray(v, dtype=np.float64))

    per_gpu: dict[tuple[int, int], list[float]] = {}
    for tick in gen.ticks():
        fr = next(f for f in tick.frames if f.measurement == "gpu")
        rows = tick.rows["gpu"]
        now = tick.time_ns / 1e9
        job = w.gpu_job(now)[rows]
        ckpt = np.append(w.in_checkpoint(now), False)[job] & (job >= 0)
        mb = membound_of[job] & (job >= 0)
        clock = fr.fields["DCGM_FI_DEV_SM_CLOCK"].values.astype(np.float64)
        power = fr.fields["DCGM_FI_DEV_POWER_USAGE"].values.astype(np.float64)
        util = fr.fields["DCGM_FI_DEV_GPU_UTIL"].values.astype(np.float64)
        reasons = fr.fields["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"].values.astype(np.int64)
        ok = (clock < DCGM_FP64_BLANK / 10) & (power < DCGM_FP64_BLANK / 10) & (clock < 1e5) & (power < 1e5)
        compute = ok & (job >= 0) & ~ckpt & ~mb & (util >= BUSY_UTIL)
        add("busy_clock", clock[compute])
        add("busy_power", power[compute])
        add("busy_reasons", reasons[compute].astype(np.float64))
        add("busy_low", (power[compute] < LOW_W).astype(np.float64))
        steady = compute & (power >= LOW_W)
        for g, j, c in zip(rows[steady].tolist(), job[steady].tolist(), clock[steady].tolist(), strict=True):
            per_gpu.setdefault((g, j), []).append(c)
        add("mb_clock", clock[ok & mb & ~ckpt & (util >= BUSY_UTIL)])
        add("mb_power", power[ok & mb & ~ckpt & (util >= BUSY_UTIL)])
        add("ctx_clock", clock[ok & ckpt & (util == 0)])
        add("ctx_power", power[ok & ckpt & (util == 0)])
        add("ctx_reasons", reasons[ok & ckpt & (util == 0)].astype(np.float64))
        add("idle_clock", clock[ok & (job < 0)])
        add("idle_power", power[ok & (job < 0)])
        add("idle_reasons", reasons[ok & (job < 0)].astype(np.float64))
    a = {k: np.concatenate(v) for k, v in acc.items()}
    steady_all = a["busy_power"] >= LOW_W
    out = _busy_stats(
        a["busy_clock"][steady_all], a["busy_power"][steady_all], a["busy_reasons"][steady_all].astype(np.int64)
    )
    sds = [np.std(v) / np.median(v) for v in per_gpu.values() if len(v) >= 10]
    out["wander_sd"] = float(np.median(sds)) if sds else float("nan")
    out["step_boundary_rate"] = float(a["busy_low"].mean())
    out |= {"membound_clock": _q(a["mb_clock"], 50), "membound_power": _q(a["mb_power"], 50)}
    out |= _idle_stats("context_idle", a["ctx_clock"], a["ctx_power"])
    out["context_idle_reason0"] = float((a["ctx_reasons"] == 0).mean()) if len(a["ctx_reasons"]) else float("nan")
    out |= _idle_stats("no_context", a["idle_clock"], a["idle_power"])
    out["no_context_idle_reason"] = float(((a["idle_reasons"].astype(np.int64) & 1) > 0).mean())
    return out


def chip_spread(gen: Generation) -> float:
    """p95 / p5 - 1 of the GPUs' chip factors under the cap (Sinha et al.: 8 % average variation)."""
    if gen.sim.cap is None:
        return 0.0
    f = gen.sim.cap.chip * gen.sim.noise.power_factor ** (-1.0 / 3.0)
    return float(np.percentile(f, 95) / np.percentile(f, 5) - 1.0)


def table(columns: dict[str, dict[str, float]]) -> list[str]:
    """Markdown rows: one per statistic, one column per source."""
    names = list(columns)
    lines = ["| statistic | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for key, label in ROWS:
        cells = []
        for n in names:
            v = columns[n].get(key, float("nan"))
            fraction = key.endswith(("share", "rate", "sd", "reason", "reason0"))
            cells.append("-" if math.isnan(v) else (f"{v:.3f}" if fraction else f"{v:.0f}"))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="the generator's GPUs beside the recorded H200")
    p.add_argument("--gpus", type=int, default=2048)
    p.add_argument("--hours", type=float, default=6.0)
    p.add_argument("--interval", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=5101)
    p.add_argument("--levels", nargs="+", default=["clean", "typical", "harsh"])
    a = p.parse_args(argv)
    cols: dict[str, dict[str, float]] = {}
    spreads = {}
    for level in a.levels:
        gen = Generation(
            GenConfig(realism=level, gpus=a.gpus, hours=a.hours, interval=a.interval, seed=a.seed, faults="")
        )
        cols[f"generator {level}"] = generator_stats(gen)
        spreads[level] = chip_spread(gen)
    if recording_path().exists():
        cols["recording (train)"] = recording_stats()
        cols["recording (burn)"] = recording_stats(busy_phase="burn")
    print("\n".join(table(cols)))
    print(
        "\nchip factor under the cap, p95/p5 - 1: "
        + ", ".join(f"{k} {v:.1%}" for k, v in spreads.items())
        + " (Sinha et al. SC'22: 8 % average variation)"
    )
    print(f"(generator: {a.gpus} GPUs x {a.hours} h every {a.interval:.0f} s, seed {a.seed}, no faults)")


if __name__ == "__main__":
    main()
