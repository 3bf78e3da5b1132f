"""A healthy fleet's everyday noise: what a real 10,000-GPU cluster shows when nothing is broken.

The clean generator is a clean room: error counters sit at exactly zero, no XID is ever set
without a fault, no host clock is off. Detection measured on it says nothing about a real fleet.
This module adds, per tick, the ordinary imperfections of a healthy fleet to the fault effects
(telemetry_gen/effects.py), and fixes per-part character (manufacturing spread, rack position)
once. Every rate is per entity-hour, with the figure it comes from beside it; the field studies
are quoted in telemetry_gen/REALISM_SOURCES.md (section numbers below refer to it).

Where a field study gives a figure, it is used; where the study gives none, the rate is the floor
the project set from what an operator sees (issue "Realism (1)": a lone symbol error per NIC per
100 h, a 2-minute incast burst per 200 NIC-h, one scrape of thermal slowdown per 200 busy GPU-h,
an application XID per 500 busy GPU-h) and is marked as such. `typical` is at least that noisy;
`harsh` multiplies every rate by three and doubles the clock error; `clean` adds nothing, so a
clean run is byte-identical to the generator without this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from telemetry_gen.effects import Effects
from telemetry_gen.topology import Topology
from vocab import registry

LEVELS = ("clean", "typical", "harsh")
SW_THERMAL = registry.clock_reason("sw_thermal_slowdown")
SW_POWER_CAP = registry.clock_reason("sw_power_cap")
# the application XIDs a fleet's jobs raise most (the generator's everyday noise); the detectors
# know the catalog's whole application class (vocab/xid_catalog.py)
APPLICATION_XIDS = (13, 31, 43, 45)
HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Rate:
    per_hour: float  # events per entity-hour at `typical`
    source: str


# ---------------------------------------------------------------- rates (typical)

# §1: no field study gives healthy-link symbol errors; the floor. At NDR 400 Gb/s a BER of 1e-12
# (the spec's and ibdiagnet's line) would be 1,440 bit errors per hour per port at line rate, so a
# lone error per 100 h is far inside the spec: noise, not a fault.
LONE_SYMBOL_ERROR = Rate(0.01, "floor: 1 per NIC per 100 h (no field figure; §1)")
# §6: incast at collective phases; no published burst rate, the floor: 2 minutes of 300 pause
# frames/s from one NIC per 200 busy NIC-h.
INCAST_BURST = Rate(1 / 200, "floor: 1 per 200 busy NIC-h, 120 s at 300 frames/s (no field figure; §6)")
INCAST_SECONDS = 120.0
INCAST_PAUSE_PER_S = 300.0
# §7: Llama 3 saw 1-2 % diurnal throughput swings from temperature; no per-GPU slowdown rate is
# published, the floor: one scrape of software thermal slowdown per 200 busy GPU-h.
THERMAL_BLIP = Rate(1 / 200, "floor: 1 scrape per 200 busy GPU-h (Llama 3 §3.3.4 shows it happens; no rate; §7)")
# superseded in the GPU frames by the held cap of telemetry_gen/powercap.py (issue 45), which
# sets reason 0x4 from the physics; still drawn, so the other noise draws stay as they were
POWER_CAP_BLIP = Rate(1 / 200, "as thermal blips: the software power cap brushes busy GPUs (inferred; §7)")
# §4: Delta (SC'25) counts XID 31 at 8.3e-4 per H100 GPU-h; the floor 1 per 500 busy GPU-h (2e-3)
# is higher, so it is used. XIDs 13, 31, 43, 45 are application errors in NVIDIA's catalog.
APPLICATION_XID = Rate(1 / 500, "floor 2e-3 per busy GPU-h, above Delta's XID 31 rate of 8.3e-4 (§4)")
# §2: Delta 5.06 %, Perlmutter 4.52 %, Titan < 5 % of GPUs ever log a correctable ECC error;
# fleet rates 4.4e-5 .. 4.5e-4 per GPU-h, on those few GPUs: ~1e-2 .. 1e-1 per prone GPU-h.
SBE_PRONE_FRACTION = 0.05
SBE_ON_PRONE = Rate(0.05, "Delta/Perlmutter: ~5 % of GPUs log CE, 4.4e-5..4.5e-4 per fleet GPU-h (§2)")
# §9: no published rate; one exporter restart per node per week (gap of 1-3 scrapes of the GPU
# lines while the node's other agents go on), and a driver reload (volatile counters and the
# last XID reset to zero) per node per month.
EXPORTER_RESTART = Rate(1 / (7 * 24), "inferred: 1 per node-week, gaps of 1-3 scrapes (§9)")
DRIVER_RELOAD = Rate(1 / (30 * 24), "inferred: 1 per node-month, volatile counters reset (§9)")
# No field study counts retrains on healthy InfiniBand links; the floor: one lone
# link_error_recovery per port per 1,000 h (a link inside its BER budget that retrained once),
# far from the repeat within an hour that marks a failing link.
LONE_LINK_RECOVERY = Rate(1 / 1000, "floor: 1 per port per 1,000 h (no field figure; §1)")
# A busy GPU's link reads a generation low for one scrape when power management lowers it in a
# pause of the GPU's work (dynamic link speed); no published rate, the floor of the thermal blips.
PCIE_GEN_BLIP = Rate(1 / 200, "floor: 1 scrape per 200 busy GPU-h, as thermal blips (no field figure; §7)")
# §8: Sinha et al. (SC'22) measured 8 % average performance variation across GPUs of one model
# under power caps; at full power it shows as power draw more than clocks.
POWER_SPREAD = 0.04  # sd of a GPU's power at equal work, fraction (VAR: 8 % mean variation, §8)
CLOCK_SPREAD = 0.008  # sd of its sustained SM clock (VAR; most of the spread is power, §8)
RACK_GRADIENT_C = 3.0  # bottom to top of a rack, inlet °C (inferred: hot-aisle recirculation, §8)
# §10: chrony keeps hosts within milliseconds, but fleets have stragglers: an agent whose host
# has not synced, a VM clock. "Seconds of skew" is what the brief measured; typical draws offsets
# in [0, 1] s, harsh in [0, 2] s, plus per-tick jitter of half that.
CLOCK_OFFSET_S = 1.0
JITTER_S = 0.5

SCALE = {"clean": 0.0, "typical": 1.0, "harsh": 3.0}


def collector_settings(level: str) -> dict[str, float | bool]:
    """What a real collector fleet does at this level: clock offsets, jitter, whole-second
    stamps, and no `job` tag (a stock dcgm-exporter sends none)."""
    if level == "clean":
        return {}
    skew = 1.0 if level == "typical" else 2.0
    return {"clock_offset_s": CLOCK_OFFSET_S * skew, "jitter_s": JITTER_S * skew, "truncate_s": True, "job_tags": False}


def rates_table() -> list[tuple[str, float, str]]:
    """(name, per entity-hour at typical, source) of every rate, for meta.json and the README."""
    named = {
        "lone_symbol_error_per_nic_h": LONE_SYMBOL_ERROR,
        "incast_burst_per_busy_nic_h": INCAST_BURST,
        "thermal_blip_per_busy_gpu_h": THERMAL_BLIP,
        "power_cap_blip_per_busy_gpu_h": POWER_CAP_BLIP,
        "application_xid_per_busy_gpu_h": APPLICATION_XID,
        "sbe_per_prone_gpu_h": SBE_ON_PRONE,
        "exporter_restart_per_node_h": EXPORTER_RESTART,
        "driver_reload_per_node_h": DRIVER_RELOAD,
        "lone_link_recovery_per_nic_h": LONE_LINK_RECOVERY,
        "pcie_gen_blip_per_busy_gpu_h": PCIE_GEN_BLIP,
    }
    return [(k, r.per_hour, r.source) for k, r in named.items()]


class FleetNoise:
    """Adds a level's everyday noise to each tick's effects; holds what lasts across ticks (an
    incast burst, a set XID, an exporter restart's gap)."""

    def __init__(self, topology: Topology, level: str, interval: float, seed: int) -> None:
        if level not in LEVELS:
            raise ValueError(f"--realism must be one of {', '.join(LEVELS)}, got {level!r}")
        self.level = level
        self.scale = SCALE[level]
        self.t = topology
        self.dt = interval
        self.rng = np.random.default_rng([seed, 5])
        self.link_rng = np.random.default_rng([seed, 7])
        static = np.random.default_rng([seed, 6])  # per-part character, fixed for the run
        g, n, nodes = topology.count("gpu"), topology.count("nic"), topology.count("node")
        on = self.scale > 0
        self.sbe_prone = static.random(g) < (SBE_PRONE_FRACTION if on else 0.0)
        self.power_factor = 1.0 + static.normal(0, POWER_SPREAD if on else 0.0, g)
        self.clock_factor = 1.0 + static.normal(0, CLOCK_SPREAD if on else 0.0, g)
        # a node's place in its rack: the top runs warmer than the bottom
        position = static.random(nodes)
        self.node_inlet_offset = RACK_GRADIENT_C * position if on else np.zeros(nodes)
        self.incast_until = np.zeros(n)
        self.app_xid = np.zeros(g)
        self.exporter_gap_until = np.zeros(nodes)
        self.counter_resets: NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.symbol_errors = np.zeros(n)  # this tick's lone symbol errors, one each

    def _draw(
        self, rate: Rate, eligible: NDArray[np.bool_], rng: np.random.Generator | None = None
    ) -> NDArray[np.bool_]:
        p = rate.per_hour * self.scale * self.dt / HOUR
        return eligible & ((rng or self.rng).random(len(eligible)) < p)

    def apply(self, now: float, e: Effects, busy_gpu: NDArray[np.bool_], busy_nic: NDArray[np.bool_]) -> None:
        """Add this tick's noise to the fault effects, in place."""
        if not self.scale:
            return
        t, dt = self.t, self.dt
        # a lone symbol error: one count in one scrape, expressed as this tick's rate
        self.symbol_errors = self._draw(LONE_SYMBOL_ERROR, np.ones(len(busy_nic), dtype=np.bool_)).astype(np.float64)
        # incast: a burst of pause frames from one NIC at a collective phase
        start = self._draw(INCAST_BURST, busy_nic & (self.incast_until <= now))
        self.incast_until[start] = now + INCAST_SECONDS
        bursting = self.incast_until > now
        e.nic_tx_pause_rate += np.where(bursting, INCAST_PAUSE_PER_S, 0.0)
        # one scrape of software thermal or power-cap slowdown on a busy GPU
        hot = self._draw(THERMAL_BLIP, busy_gpu)
        e.gpu_reasons |= np.where(hot, SW_THERMAL, 0)
        e.gpu_clock *= np.where(hot, 0.97, 1.0)
        capped = self._draw(POWER_CAP_BLIP, busy_gpu)
        e.gpu_reasons |= np.where(capped, SW_POWER_CAP, 0)
        # an application XID: the user's kernel, not the GPU; DCGM reports the last XID until
        # another one or a driver reload
        xid = self._draw(APPLICATION_XID, busy_gpu)
        if xid.any():
            self.app_xid[xid] = self.rng.choice(APPLICATION_XIDS, int(xid.sum()))
        e.gpu_xid = np.where(e.gpu_xid > 0, e.gpu_xid, self.app_xid)
        # slow correctable ECC on the few GPUs prone to it
        e.gpu_sbe_rate += np.where(self.sbe_prone, SBE_ON_PRONE.per_hour * self.scale / HOUR, 0.0)
        # link states (issue 29), from a stream of their own: adding them left every other
        # noise draw, and so every history generated before them, as it was
        e.nic_recovered += self._draw(LONE_LINK_RECOVERY, np.ones(len(busy_nic), dtype=np.bool_), self.link_rng)
        low = self._draw(PCIE_GEN_BLIP, busy_gpu, self.link_rng)
        e.gpu_pcie_gen_cap = np.where(low, np.minimum(e.gpu_pcie_gen_cap, 4.0), e.gpu_pcie_gen_cap)
        # exporter restarts: the node's GPU lines stop for 1-3 scrapes, its other agents go on
        nodes = len(self.exporter_gap_until)
        restart = self._draw(EXPORTER_RESTART, np.ones(nodes, dtype=np.bool_))
        self.exporter_gap_until[restart] = now + dt * self.rng.integers(1, 4, int(restart.sum()))
        e.gpu_silent |= (self.exporter_gap_until > now)[t.gpu_node]
        # driver reloads: volatile counters and the last XID go back to zero (the simulator resets
        # its counters for these GPUs)
        reload = self._draw(DRIVER_RELOAD, np.ones(nodes, dtype=np.bool_))
        reloaded = reload[t.gpu_node]
        self.app_xid[reloaded] = 0.0
        self.counter_resets = np.flatnonzero(reloaded)


__all__ = ["LEVELS", "FleetNoise", "collector_settings", "rates_table"]
