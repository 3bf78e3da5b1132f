"""The generator's healthy fleet is at least as noisy as the floor the project set (issue "Realism
(1)"), measured on the generated telemetry, not read from the constants: lone symbol errors,
incast pause bursts, one-scrape thermal slowdowns and application XIDs on busy GPUs, correctable
ECC, exporter gaps. Harsh is three times typical. Clean adds nothing.

A rate passes unless the telemetry shows, with 99% confidence, that it is below the floor: the
Poisson upper bound of the measured count must reach floor x exposure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from telemetry_gen.generator import GenConfig, Generation
from vocab import registry

FLOOR_PER_H = {
    "lone_symbol_error_per_nic_h": 1 / 100,
    "incast_burst_per_busy_nic_h": 1 / 200,
    "thermal_blip_per_busy_gpu_h": 1 / 200,
    "application_xid_per_busy_gpu_h": 1 / 500,
    # Delta's fleet-wide correctable ECC rate, low end (telemetry_gen/REALISM_SOURCES.md §2)
    "sbe_per_gpu_h": 4.4e-5,
    # two exporter restarts in 6 h of 128 nodes
    "exporter_gap_per_node_h": 2 / (6 * 128),
}
SW_THERMAL = registry.clock_reason("sw_thermal_slowdown")
APPLICATION = {c for c, x in registry.XIDS.items() if x.xid_class == "application"}
INTERVAL = 120.0


@dataclass
class Measured:
    counts: dict[str, int]
    exposure_h: dict[str, float]

    def rate(self, name: str) -> float:
        return self.counts[name] / self.exposure_h[name]

    def upper_99(self, name: str) -> float:
        k = self.counts[name]
        return (k + 2.33 * math.sqrt(k + 1) + 2.7) / self.exposure_h[name]


@cache
def measure(realism: str) -> Measured:
    """Count the noise in 1,024 GPUs x 12 h with no fault at all."""
    gen = Generation(GenConfig(realism=realism, gpus=1024, hours=12, interval=INTERVAL, seed=9101, faults=""))
    t, dt_h = gen.topology, INTERVAL / 3600
    counts = dict.fromkeys(FLOOR_PER_H, 0)
    exposure = dict.fromkeys(FLOOR_PER_H, 0.0)
    prev: dict[str, Any] = {}
    for tick in gen.ticks():
        frames = {f.measurement: f for f in tick.frames}
        nic, gpu = frames["nic"], frames["gpu"]
        nic_ids = nic.tag("nic")
        symbol = dict(zip(nic_ids.tolist(), nic.fields["symbol_error"].values.tolist(), strict=True))
        pause = dict(zip(nic_ids.tolist(), nic.fields["tx_prio3_pause"].values.tolist(), strict=True))
        sent = dict(zip(nic_ids.tolist(), nic.fields["port_xmit_data"].values.tolist(), strict=True))
        # in a job: sending at line-rate scale (an idle NIC sends ~1e5 B/s of management traffic)
        busy_nic = {n for n, v in sent.items() if n in prev.get("sent", {}) and v - prev["sent"][n] > 1e8 * INTERVAL}
        prev["sent"] = sent
        exposure["lone_symbol_error_per_nic_h"] += len(nic_ids) * dt_h
        exposure["incast_burst_per_busy_nic_h"] += len(busy_nic) * dt_h
        if "symbol" in prev:
            counts["lone_symbol_error_per_nic_h"] += sum(
                1 for n, v in symbol.items() if n in prev["symbol"] and v > prev["symbol"][n]
            )
            # a burst starts when a NIC's pause counter starts rising
            rising = {n for n, v in pause.items() if n in prev["pause"] and v > prev["pause"][n]}
            counts["incast_burst_per_busy_nic_h"] += len(rising - prev["rising"])
            prev["rising"] = rising
        else:
            prev["rising"] = set()
        prev["symbol"], prev["pause"] = symbol, pause
        ids = gpu.tag("gpu").tolist()
        busy = gpu.fields["DCGM_FI_DEV_GPU_UTIL"].values.astype(np.float64) > 50
        reasons = gpu.fields["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"].values.astype(np.int64)
        xid = dict(zip(ids, gpu.fields["DCGM_FI_DEV_XID_ERRORS"].values.tolist(), strict=True))
        sbe = dict(zip(ids, gpu.fields["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"].values.tolist(), strict=True))
        exposure["thermal_blip_per_busy_gpu_h"] += int(busy.sum()) * dt_h
        exposure["application_xid_per_busy_gpu_h"] += int(busy.sum()) * dt_h
        exposure["sbe_per_gpu_h"] += len(ids) * dt_h
        counts["thermal_blip_per_busy_gpu_h"] += int((busy & ((reasons & SW_THERMAL) > 0)).sum())
        if "xid" in prev:
            counts["application_xid_per_busy_gpu_h"] += sum(
                1 for g, v in xid.items() if v in APPLICATION and prev["xid"].get(g) != v
            )
            counts["sbe_per_gpu_h"] += int(sum(max(v - prev["sbe"][g], 0) for g, v in sbe.items() if g in prev["sbe"]))
        prev["xid"], prev["sbe"] = xid, sbe
        # an exporter gap: a node whose NICs report while its GPUs do not
        gpu_nodes = set(gpu.tag("node").tolist())
        nic_nodes = set(nic.tag("node").tolist())
        gap = nic_nodes - gpu_nodes
        exposure["exporter_gap_per_node_h"] += len(nic_nodes) * dt_h
        counts["exporter_gap_per_node_h"] += len(gap - prev.get("gap", set()))
        prev["gap"] = gap
    assert t.count("gpu") == 1024
    return Measured(counts, exposure)


def test_typical_is_at_least_as_noisy_as_the_floor() -> None:
    m = measure("typical")
    below = {k: (m.counts[k], round(m.rate(k), 6), floor) for k, floor in FLOOR_PER_H.items() if m.upper_99(k) < floor}
    assert below == {}, f"measured below the floor (count, rate, floor): {below}"


def test_harsh_is_three_times_the_floor() -> None:
    m = measure("harsh")
    below = {
        k: (m.counts[k], round(m.rate(k), 6), 3 * floor)
        for k, floor in FLOOR_PER_H.items()
        if m.upper_99(k) < 3 * floor
    }
    assert below == {}, f"measured below three times the floor (count, rate, floor): {below}"


def test_clean_has_no_noise() -> None:
    m = measure("clean")
    noisy = {k: v for k, v in m.counts.items() if v and k != "exporter_gap_per_node_h"}
    assert noisy == {}
