"""A busy GPU as a real one behaves: at its power cap, its SM clock wandering under it (issue 45).

Everything here comes from one recording of a real H200 under a real training loop
(`../shared/datasets/real-gpu/h200/nvml-1s.csv`, phases named below; the measurements are
re-derived by `scripts/realism-table --gpu`), from NVML's documentation, and from Sinha et al.,
"Not All GPUs Are Created Equal", SC'22 (VAR in telemetry_gen/REALISM_SOURCES.md §8 and §11).

What a scrape reads (NVML API reference, nvmlDeviceGetPowerUsage: "On Ampere (except GA100) or
newer GPUs, the API returns power averaged over 1 sec interval"; nvmlDeviceGetClockInfo: the
current clock, an instantaneous value; DCGM reads both from NVML and dcgm-exporter serves DCGM's
latest sample): power is a 1-second average, the SM clock an instant. Neither is an average over
the 10-60 s scrape interval. In the recording the 1-s clock series of steady training has no
persistence (lag-1 autocorrelation -0.27..-0.49, a period-3 beat with the 0.19-s step at lag 3,
+0.49..+0.65, nothing systematic at lags 10 and 15: -0.46..+0.26 over three stretches), and power
none either (|r| <= 0.34 at every lag); so each scrape draws the clock and the power afresh,
independently of the scrape before.

The model, for a GPU doing work:
- demand: what it would draw at its top clock (1980 MHz), `STATIC_W` (the context-idle power at
  1980 MHz: the floor that does not scale with work) plus dynamic power, which scales as C*V^2*f
  with V roughly proportional to f over the DVFS range, so as f^3. The dynamic part at 1980 MHz
  is derived from what the cap held in the recording: train held 1747.5 MHz at 691.9 W (medians),
  burn 1485 MHz at 690.7 W; a job's intensity (0.8-1.0) places it between the two.
- a GPU whose demand exceeds its limit runs at the limit (SW power cap, reason 0x4, held) and
  its clock is what fits: 1980 * ((P - STATIC) / dynamic)^(1/3), times its chip factor, times
  the scrape's wander. One whose demand does not (a memory-bound job) runs at 1980 MHz with no
  reason, at its demand.
- faults act as they physically would under the cap: a fail-slow GPU (gpu_straggler) needs more
  power per clock, so under the cap its clock stays lower than its peers' by its factor while
  its power stays at the cap; a thermal slowdown pulls the clock under what the cap allows, so
  power falls below the cap (and the cap reason clears); a PSU failure lowers the GPUs' power
  limit (power brake), power sits at the lowered limit and the clock is what fits under it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from vocab import registry

SW_POWER_CAP = registry.clock_reason("sw_power_cap")

# ---------------------------------------------------------------- the recorded H200
POWER_LIMIT_W = 700.0  # enforced limit (nvml-1s.csv power_limit_w; nvidia-smi-q.xml)
MAX_CLOCK_MHZ = 1980.0  # top SM clock: membound, cooldown, eval-gap phases (every sample)
IDLE_CLOCK_MHZ = 345.0  # no CUDA context: idle phase (every sample), reason 0x1
CLOCK_STEP_MHZ = 15.0  # every recorded SM clock is a multiple of 15 MHz
NO_CONTEXT_W = 80.5  # idle phase, median (80.1-80.6 W, p5-p95)
CONTEXT_IDLE_W = 126.5  # context alive, no kernels: cooldown 125.8, eval-gap 127.2, checkpoint 127.6 W (medians)
STATIC_W = CONTEXT_IDLE_W  # the part of power that does not scale with the clock's work
# compute-bound phases: the clock the cap held and the power it held (medians)
TRAIN_CLOCK_MHZ, TRAIN_W = 1747.5, 691.9  # train, steady samples (util >= 90, power >= 600 W)
BURN_CLOCK_MHZ, BURN_W = 1485.0, 690.7  # burn (8192^2 bf16 matrix products)
TRAIN_DYNAMIC_W = (TRAIN_W - STATIC_W) * (MAX_CLOCK_MHZ / TRAIN_CLOCK_MHZ) ** 3  # ~823 W at 1980 MHz
BURN_DYNAMIC_W = (BURN_W - STATIC_W) * (MAX_CLOCK_MHZ / BURN_CLOCK_MHZ) ** 3  # ~1337 W at 1980 MHz
# the clock's wander scrape to scrape, relative sd: train 65.8 / 1747.5 MHz (range 1605-1860,
# p5-p95 1642-1845); burn 16.9 / 1485 (range 1470-1530)
TRAIN_WANDER, BURN_WANDER = 0.0377, 0.0114
WANDER_CLIP = 2.5  # sd: train's extremes are -2.2 and +1.7 sd from its median
# power at the cap: train's steady samples sit 8.1 W under 700 (median), sd 4.0 W (range 675-702)
CAP_SHORTFALL, CAP_SPREAD = 8.1 / POWER_LIMIT_W, 4.0 / POWER_LIMIT_W
# memory-bound: membound phase, 1980 MHz and 590.8 W (median; 585-592 p5-p95), util 99, no reason
MEMBOUND_W = 590.8
# Which share of jobs are memory-bound (inference, embedding or data-heavy work) no source gives:
# an operational choice, one job in ten
MEMBOUND_JOB_SHARE = 0.10
MEMBOUND_TENSOR = 0.15  # tensor-pipe activity relative to a compute-bound job's: operational choice
# a 1-s power sample that catches a step boundary: in train, 1 of the 131 samples at >= 90 %
# utilisation read under 600 W (279 W at 100 %, the second after a checkpoint ended); the other
# 130 sat at the cap. Per node and scrape (the node's GPUs are in the same step, and DCGM samples
# them at one instant): 1/131 at `typical` (3/131, the rule-of-three bound of 0 in 130, at harsh)
STEP_DIP_P = 1.0 / 131.0
# chip-to-chip spread under the cap: VAR's 8 % average performance variation between GPUs of one
# model under a power cap, read as the 5th-95th percentile spread of the clock a GPU holds under
# the cap (sd 0.08 / 3.29 = 2.4 %). Part of it is already the power factor (realism.POWER_SPREAD,
# 4 % sd of demand, which moves the clock that fits by a third of that, 1.3 %); the chip factor
# is the rest: sqrt(2.43^2 - 1.33^2) = 2.0 % sd
CHIP_SPREAD = float(np.sqrt((0.08 / 3.29) ** 2 - (0.04 / 3.0) ** 2))
CHIP_CLIP = 0.08  # +-8 %: no healthy outliers (VAR's 1.5x outliers are stragglers, the fault)


def quantize(clock: NDArray[np.float64]) -> NDArray[np.float64]:
    """SM clocks come in 15 MHz steps."""
    return np.asarray(np.round(clock / CLOCK_STEP_MHZ) * CLOCK_STEP_MHZ, dtype=np.float64)


def dynamic_w(intensity: NDArray[np.float64]) -> NDArray[np.float64]:
    """A compute-bound job's dynamic power at 1980 MHz: intensity 0.8 the recorded train, 1.0 the burn."""
    x = np.clip((intensity - 0.8) / 0.2, 0.0, 1.0)
    return np.asarray(TRAIN_DYNAMIC_W + (BURN_DYNAMIC_W - TRAIN_DYNAMIC_W) * x, dtype=np.float64)


def wander_sd(intensity: NDArray[np.float64]) -> NDArray[np.float64]:
    x = np.clip((intensity - 0.8) / 0.2, 0.0, 1.0)
    return np.asarray(TRAIN_WANDER + (BURN_WANDER - TRAIN_WANDER) * x, dtype=np.float64)


class PowerCap:
    """Per-GPU character (chip factor) and per-job character (memory-bound or not), fixed for the
    run, and the per-scrape draws (wander, shortfall under the cap, step-boundary dips)."""

    def __init__(self, gpus: int, nodes: int, scale: float, seed: int) -> None:
        static = np.random.default_rng([seed, 10])
        self.chip = 1.0 + np.clip(static.normal(0, CHIP_SPREAD, gpus), -CHIP_CLIP, CHIP_CLIP)
        self.rng = np.random.default_rng([seed, 11])
        self._job_rng = np.random.default_rng([seed, 12])
        self._membound = np.zeros(0, dtype=np.bool_)
        self.scale = scale
        self.nodes = nodes

    def membound(self, jobs: int) -> NDArray[np.bool_]:
        """Per job (and one for "no job"): memory-bound or not, drawn once per job."""
        if len(self._membound) < jobs:
            more = self._job_rng.random(jobs - len(self._membound)) < MEMBOUND_JOB_SHARE
            self._membound = np.concatenate([self._membound, more])
        return np.append(self._membound[:jobs], False)

    def busy(
        self,
        working: NDArray[np.bool_],
        membound: NDArray[np.bool_],
        intensity: NDArray[np.float64],
        load: NDArray[np.float64],
        power_factor: NDArray[np.float64],
        limit: NDArray[np.float64],
        fault_clock: NDArray[np.float64],
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_]]:
        """Power (W, the 1-s sample), SM clock (MHz, before thermal slowdown) and whether the
        power cap holds, for GPUs doing work; `load` is the share of full work (0.35-1: a job
        that waits on a slow peer does less), `limit` the enforced power limit (W)."""
        g = len(working)
        dyn = np.where(membound, (MEMBOUND_W - STATIC_W), dynamic_w(intensity)) * load * power_factor
        demand = STATIC_W + dyn
        capped = working & (demand > limit)
        at_cap = limit * (1.0 - CAP_SHORTFALL + self.rng.normal(0, CAP_SPREAD, g))
        at_cap = np.minimum(at_cap, limit * 1.003)  # train's highest sample: 701.6 W of 700
        power = np.where(capped, at_cap, demand)
        fits = MAX_CLOCK_MHZ * np.cbrt(np.clip(at_cap - STATIC_W, 1.0, None) / np.maximum(dyn, 1.0))
        wander = 1.0 + np.clip(self.rng.normal(0, 1, g), -WANDER_CLIP, WANDER_CLIP) * wander_sd(intensity)
        clock = np.where(capped, np.minimum(fits * self.chip * wander, MAX_CLOCK_MHZ), MAX_CLOCK_MHZ)
        return power, clock * fault_clock, capped

    def step_dips(self, node_busy: NDArray[np.bool_], gpu_node: NDArray[np.int64]) -> NDArray[np.float64]:
        """Per GPU: the share of the last second its node's GPUs were busy (1.0: no dip)."""
        dip = node_busy & (self.rng.random(self.nodes) < STEP_DIP_P * self.scale)
        share = np.where(dip, self.rng.uniform(0.0, 1.0, self.nodes), 1.0)
        return np.asarray(share[gpu_node], dtype=np.float64)
