"""The metric models: one tick of the whole cluster at a time, every kind as numpy arrays.

Couplings, in the order they are computed: the scheduler says which job a node runs and whether
it is checkpointing; faults say what is slow, hot, broken or silent; a job moves at the pace of
its slowest member; utilisation and power follow the job; temperature follows power and the
inlet air (diurnal ambient plus the rack's cooling) with a 45-second lag; clocks drop when hot
or power-braked; NIC traffic follows the job's pace; counters integrate their rates and never go
down. Exporters' habits are copied too: now and then a sample is missing or a DCGM field reads
"blank".
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from ingest.frames import Column, Frame
from ingest.lineprotocol import encode_heads, encode_lines
from telemetry_gen.effects import GPU_IDLE, HW_THERMAL, SW_THERMAL, Effects, FaultEffects, active
from telemetry_gen.faults import KINDS, Fault
from telemetry_gen.powercap import (
    CONTEXT_IDLE_W,
    IDLE_CLOCK_MHZ,
    MAX_CLOCK_MHZ,
    MEMBOUND_TENSOR,
    NO_CONTEXT_W,
    POWER_LIMIT_W,
    SW_POWER_CAP,
    PowerCap,
    quantize,
)
from telemetry_gen.realism import FleetNoise
from telemetry_gen.topology import Topology
from telemetry_gen.workload import Workload
from vocab.catalog import DCGM_FP64_BLANK, DCGM_INT32_BLANK, MEASUREMENTS, FieldType

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z: every run starts here, so runs are comparable
IDLE_W, PEAK_W = 70.0, 700.0
# What a generated history looks like, as a number: the default predictor is trained on generated
# histories, so its fingerprint holds this (aiops/default_model.json's `generator_behaviour`,
# checked equal by tests/unit/test_default_model_shipped.py). Bump it with any change to what the
# generator emits. 2: an energy counter per GPU, and dies that settle within seconds.
BEHAVIOUR_VERSION = 2
THERMAL_R = 0.06  # °C per W, die over inlet: ~60 °C at full load, as H100s run
# the die answers its load within seconds: the recorded H200 fell from 61 to 42 C in the second
# after training stopped and to 39 C within 8 s, and rose from 37 to 60 C within 10 s of it
# starting (datasets/real-gpu/h200/nvml-1s.csv); so at any scrape interval a sample sees a settled
# die. (It was 45 s: a GPU scraped every 10 s read up to ten degrees "warm" for a minute after each
# checkpoint began, which no real GPU does.)
THERMAL_TAU_S = 2.0
MISSING_SAMPLE_P = 2e-5  # per entity per tick
BLANK_FIELD_P = 2e-5  # per GPU per tick
NIC_LINE_RATE = 50e9  # bytes/s, 400 Gb/s
REBOOT_S = 600.0
# the parts modelled: an HGX H100 board (PCIe Gen5 x16 to the host, 18 NVLink 4 links per GPU,
# NVSwitches under a fabric manager) and NDR InfiniBand HCAs (4 lanes x 100 Gb/s)
PCIE_MAX_GEN, PCIE_MAX_WIDTH = 5.0, 16.0
NVLINKS = 18.0
FM_IN_PROGRESS, FM_SUCCESS, FM_FAILURE = 2.0, 3.0, 4.0  # dcgmFabricManagerStatus_t
IB_WIDTH, IB_LANE_GBPS = 4.0, 100.0  # a drained node reboots once, mid-window, and is silent meanwhile

_F = NDArray[np.float64]
_B = NDArray[np.bool_]
_GPU_BLANKABLE = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_FB_USED")


@dataclass(frozen=True, slots=True)
class GpuWork:
    """What each GPU does this tick, as the schedule and the faults say: all that either GPU model
    reads (ClusterSim._plain_gpus, or ClusterSim._capped_gpus at the recorded H200's power cap)."""

    job: NDArray[np.int64]  # its job's index (-1: none)
    busy: NDArray[np.bool_]  # a job holds it
    ckpt: NDArray[np.bool_]  # its job is writing a checkpoint
    stalled: NDArray[np.bool_]  # its job is stalled (a hung collective)
    working: NDArray[np.bool_]  # busy, neither checkpointing nor stalled
    # its job's pace where working, else 0: the straggler moves at it because its clock is low, its
    # peers because they wait for it (so their power drops too; only the straggler's clock gives it away)
    own: _F
    intensity: _F  # its job's (0 without one)
    inlet: _F  # the air at its node's inlet (°C)


@dataclass(frozen=True, slots=True)
class GpuReadings:
    """What a GPU model makes of a tick's GpuWork: what its frame shows and its node's meter sees."""

    temp: _F
    power: _F  # the 1-s sample a scrape reads
    sustained: _F  # the state over the interval: what heats the die and what the node's meter sees
    clock: _F
    util: _F
    reasons: NDArray[np.int64]
    tensor: _F  # the tensor pipe's activity (0-1)


@dataclass(slots=True)
class Tick:
    time_ns: int
    frames: list[Frame]
    # which entities (rows of the static tag arrays) each frame holds, for cached line heads
    rows: dict[str, NDArray[np.int64]] = field(default_factory=dict)

    @property
    def value_count(self) -> int:
        return sum(f.value_count for f in self.frames)


class ClusterSim:
    def __init__(
        self,
        topology: Topology,
        workload: Workload,
        faults: list[Fault],
        interval: float,
        seed: int,
        realism: str = "clean",
    ) -> None:
        self.t = topology
        self.noise = FleetNoise(topology, realism, interval, seed)
        # realism levels other than clean: busy GPUs at their power cap, as the recorded H200
        self.cap = (
            PowerCap(topology.count("gpu"), topology.count("node"), self.noise.scale, seed)
            if self.noise.scale
            else None
        )
        self.w = workload
        self.faults = faults
        self.dt = interval
        self.rng = np.random.default_rng([seed, 2])
        self.fx = FaultEffects(topology, interval)
        t = topology
        g, n, nodes = t.count("gpu"), t.count("nic"), t.count("node")
        r = np.random.default_rng([seed, 3])  # fixed per-part character: offsets, spreads
        self.gpu_offset = r.normal(0, 1.5, g)
        self.gpu_temp = 30.0 + self.gpu_offset
        self.gpu_fb = r.uniform(50_000, 75_000, g)
        self.optic_rx = -2.0 + r.normal(0, 0.4, n)
        self.optic_tx = -1.2 + r.normal(0, 0.3, n)
        self.optic_bias = 7.5 + r.normal(0, 0.4, n)
        # cumulative counters as float64 (exact to 2^53), emitted as int64
        self.gpu_counters = {
            k: r.integers(0, 50, g).astype(np.float64) * (k == "sbe")
            for k in ("sbe", "dbe", "remap", "uremap", "crc", "replay", "nvbw", "pcie")
        }
        self.nvbw_base = r.uniform(1e12, 5e12, g)
        # NVML's total energy since the driver loaded (mJ): days of it already on the counter. Its
        # own stream, so adding it moved no other part's draws.
        self.gpu_energy_mj = np.random.default_rng([seed, 7]).uniform(1e9, 5e11, g)
        self.remap_failure = np.zeros(g, dtype=np.bool_)
        self.nic_counters = {k: np.zeros(n) for k in _PORT_COUNTERS}
        self.nic_counters["port_xmit_data"] += r.uniform(1e12, 1e14, n)
        self.nic_counters["port_rcv_data"] += r.uniform(1e12, 1e14, n)
        p = len(t.port_switch)
        self.port_counters = {k: np.zeros(p) for k in _PORT_COUNTERS}
        self.nvsw_counters = {k: np.zeros(t.count("nvswitch")) for k in ("crc", "replay")}
        self.node_fan = np.full(nodes, 8000.0)
        self._failed_jobs: set[str] = set()
        self._was_rebooting = np.zeros(nodes, dtype=np.bool_)
        self._tags = _static_tags(t)
        # `measurement,tag=...` of every entity, encoded once: tags do not change between ticks
        self._heads = {
            name: encode_heads(name, tags, len(next(iter(tags.values())))) for name, tags in self._tags.items()
        }
        self._rows: dict[str, NDArray[np.int64]] = {}
        self.job_tag = np.array([j.id for j in workload.jobs] + ["idle"], dtype=object)

    # ------------------------------------------------------------------ the tick

    @property
    def steps(self) -> int:
        """How many ticks the window holds: the last tick starts before the workload's end."""
        return math.floor((self.w.t_end - self.w.t0) / self.dt)

    def ticks(self) -> Iterator[Tick]:
        for k in range(self.steps):
            yield self.tick(self.w.t0 + k * self.dt)

    def tick(self, now: float) -> Tick:
        t, dt, rng = self.t, self.dt, self.rng
        e = Effects.neutral(t)
        for fault in self.faults:
            if active(fault, now):
                self.fx.apply(fault, now, e, rng)
                if now >= fault.onset and KINDS[fault.kind].kills_job:
                    self._fail_jobs_on(fault, now, e)
        gpu_job = self.w.gpu_job(now)
        # a node's job, for what the node shares (its NICs, CPUs, fans): the last-planned of the
        # jobs on it (the only one when jobs hold whole nodes)
        node_job = np.full(t.count("node"), -1, dtype=np.int64)
        np.maximum.at(node_job, t.gpu_node, gpu_job)
        checkpoint = self.w.in_checkpoint(now)
        reboot = self._rebooting(now)
        # the first scrape after a reboot finds the fabric manager still bringing the fabric up
        fabric_starting, self._was_rebooting = self._was_rebooting & ~reboot, reboot
        nodes = t.count("node")
        if self.noise.scale:  # a healthy fleet's everyday noise, on top of the faults
            in_job = node_job >= 0
            self.noise.apply(now, e, in_job[t.gpu_node], in_job[t.nic_node])
            for k in self.gpu_counters:  # a driver reload zeroes the volatile counters
                if k != "nvbw":
                    self.gpu_counters[k][self.noise.counter_resets] = 0.0

        # --- the job's pace: its slowest member, GPU or network
        gpu_pace = e.gpu_clock.copy()
        node_pace = np.ones(nodes)
        np.minimum.at(node_pace, t.gpu_node, gpu_pace)
        nic_pace = np.where(e.nic_down, 0.0, e.nic_traffic)
        np.minimum.at(node_pace, t.nic_node, nic_pace)
        node_pace = np.minimum(node_pace, e.node_speed)
        jobs = len(self.w.jobs)
        job_pace = np.ones(jobs + 1)
        running = node_job >= 0
        held = gpu_job >= 0  # every node a job holds GPUs on sets its pace
        np.minimum.at(job_pace, gpu_job[held], node_pace[t.gpu_node[held]])
        job_stalled = np.zeros(jobs + 1, dtype=np.bool_)
        np.logical_or.at(job_stalled, gpu_job[held], e.node_stalled[t.gpu_node[held]])
        job_pace[job_stalled] = 0.0
        intensity = np.array([j.intensity for j in self.w.jobs] + [0.0])
        in_ckpt = np.append(checkpoint, False)

        # --- GPUs
        busy = gpu_job >= 0
        ckpt = busy & in_ckpt[gpu_job]
        stalled = busy & job_stalled[gpu_job]
        working = busy & ~ckpt & ~stalled
        own = np.where(working, job_pace[gpu_job], 0.0)
        inlet = self._inlet(now, e)
        gpu_inlet = inlet[t.node_rack[t.gpu_node]] + self.noise.node_inlet_offset[t.gpu_node]
        work = GpuWork(gpu_job, busy, ckpt, stalled, working, own, intensity[gpu_job], gpu_inlet)
        # above the clean realism level, the GPU as the recorded H200 behaves at its power cap (powercap.py)
        gpus = self._capped_gpus(now, e, work) if self.cap is not None else self._plain_gpus(e, work)
        c = self.gpu_counters
        c["sbe"] += rng.poisson(e.gpu_sbe_rate * dt)
        c["remap"] += rng.poisson(e.gpu_remap_rate * dt) + e.gpu_remap_now
        c["dbe"] += e.gpu_dbe
        c["uremap"] += e.gpu_uncorrectable_remap
        c["crc"] += rng.poisson(e.gpu_nvlink_crc_rate * dt)
        c["replay"] += rng.poisson(e.gpu_nvlink_replay_rate * dt)
        c["nvbw"] += np.where(working, 2.0e11 * own * e.gpu_nvlink_bw, 1e6) * dt
        self.remap_failure |= e.gpu_remap_failure
        nvsw_node = t.nvswitch_node
        node_crc = np.zeros(nodes)
        np.add.at(node_crc, t.gpu_node, rng.poisson(e.gpu_nvlink_crc_rate * dt))
        self.nvsw_counters["crc"] += node_crc[nvsw_node] / 4.0
        self.nvsw_counters["replay"] += node_crc[nvsw_node] / 40.0

        # --- NICs, optics, switch ports
        n = t.count("nic")
        nic_job = node_job[t.nic_node]
        nic_busy = (nic_job >= 0) & ~in_ckpt[nic_job]
        multi_node = np.array([len(j.nodes) > 1 for j in self.w.jobs] + [False])
        rate = np.where(nic_busy & multi_node[nic_job], 0.5 * NIC_LINE_RATE * job_pace[nic_job], 0.0)
        rate = np.where(nic_busy & ~multi_node[nic_job], 1e8, rate) + np.where(in_ckpt[nic_job], 2e9, 1e5)
        rate = np.where(e.nic_down, 0.0, rate * e.nic_traffic) * rng.uniform(0.97, 1.03, n)
        nc = self.nic_counters
        nc["port_xmit_data"] += rate * dt
        nc["port_rcv_data"] += rate * dt
        nc["port_xmit_wait"] += (2e3 + 4e4 * rate / NIC_LINE_RATE + e.nic_wait_rate) * dt * rng.uniform(0.8, 1.2, n)
        nc["np_cnp_sent"] += rng.poisson((rate / NIC_LINE_RATE) * 5.0 + e.nic_wait_rate / 2e4) * 1.0
        nc["symbol_error"] += rng.poisson(e.nic_symbol_rate * dt) + self.noise.symbol_errors
        nc["port_rcv_errors"] += rng.poisson(e.nic_symbol_rate * dt / 8.0)
        nc["link_downed"] += e.nic_downed
        nc["link_error_recovery"] += e.nic_downed + e.nic_recovered
        nc["rx_prio3_pause"] += e.nic_rx_pause_rate * dt
        nc["tx_prio3_pause"] += e.nic_tx_pause_rate * dt
        optic_rx = self.optic_rx + e.optic_rx_delta + rng.normal(0, 0.03, n)
        optic_rx = np.where(e.nic_down & (e.optic_rx_delta < -1.0), -30.0, optic_rx)
        optic_temp = 42.0 + 8.0 * rate / NIC_LINE_RATE + rng.normal(0, 0.3, n)
        port_rate = self._ports(rate, e, dt)

        # --- nodes, PSUs, cooling
        node_power = np.zeros(nodes)
        # the node's meter samples at its own instant: it sees the GPUs' state, not their 1-s dips
        np.add.at(node_power, t.gpu_node, gpus.sustained)
        self.gpu_energy_mj += gpus.sustained * dt * 1000.0  # what the die burnt over the interval, not a 1-s sample
        node_busy = running & ~in_ckpt[node_job]
        node_power += 900.0 + np.where(node_busy, 250.0, 0.0) + rng.normal(0, 20.0, nodes)
        node_inlet = inlet[t.node_rack] + self.noise.node_inlet_offset + rng.normal(0, 0.15, nodes)
        self.node_fan += ((5500.0 + 0.5 * node_power + 120.0 * (node_inlet - 22.0)) - self.node_fan) * 0.5
        psu_share = np.where(e.psu_failed, 0.0, 1.0)
        per_node_psus = np.zeros(nodes)
        np.add.at(per_node_psus, t.psu_node, psu_share)
        psu_out = np.where(e.psu_failed, 0.0, node_power[t.psu_node] / np.maximum(per_node_psus[t.psu_node], 1.0))
        rack_power = np.zeros(t.count("rack"))
        np.add.at(rack_power, t.node_rack, node_power)
        supply = 30.0 + e.cooling_supply_delta + rng.normal(0, 0.05, len(rack_power))
        flow = 30.0 * e.cooling_flow + rng.normal(0, 0.2, len(rack_power))
        ret = supply + rack_power / 1000.0 * 14.3 / np.maximum(flow, 1.0)

        # --- frames, without the silent entities
        silent_node = reboot | (rng.random(nodes) < MISSING_SAMPLE_P)  # a missed scrape, or a reboot
        ts = round(now * 1e9)
        frames = [
            self._gpu_frame(ts, gpus, work, e, silent_node, fabric_starting),
            self._frame(
                "nvswitch",
                ts,
                ~silent_node[nvsw_node],
                {
                    "temperature_c": 45.0 + 0.004 * node_power[nvsw_node] + rng.normal(0, 0.3, len(nvsw_node)),
                    "nvlink_crc_errors": self.nvsw_counters["crc"],
                    "nvlink_replay_errors": self.nvsw_counters["replay"],
                },
            ),
            self._frame(
                "nic",
                ts,
                ~silent_node[t.nic_node],
                {
                    **nc,
                    "link_state": np.where(e.nic_down, 0.0, 1.0),
                    # as the port trained: 4 lanes at the fabric's lane speed unless a fault says less
                    "link_width": np.minimum(IB_WIDTH, e.nic_width_cap),
                    "link_rate_gbps": np.minimum(IB_WIDTH, e.nic_width_cap)
                    * np.minimum(IB_LANE_GBPS, e.nic_lane_gbps_cap),
                },
            ),
            self._frame(
                "optic",
                ts,
                ~silent_node[t.nic_node],
                {
                    "rx_power_dbm": optic_rx,
                    "tx_power_dbm": self.optic_tx + rng.normal(0, 0.02, n),
                    "temperature_c": optic_temp,
                    "bias_current_ma": self.optic_bias + rng.normal(0, 0.05, n),
                },
            ),
            self._frame(
                "node",
                ts,
                ~silent_node,
                {
                    "cpu_util": np.where(node_busy, 22.0, 2.0) + rng.normal(0, 2.0, nodes).clip(-2, None),
                    "mem_used_pct": np.where(running, 45.0, 6.0) + rng.normal(0, 0.5, nodes),
                    "inlet_temp_c": node_inlet,
                    "fan_speed_rpm": self.node_fan,
                    "power_w": node_power,
                    "power_cap_w": e.node_power_cap,
                },
            ),
            self._frame(
                "psu",
                ts,
                ~silent_node[t.psu_node],
                {
                    "output_power_w": psu_out,
                    "input_voltage_v": 230.0 + rng.normal(0, 0.8, len(psu_out)),
                    "status": np.where(e.psu_failed, 0.0, 1.0),
                },
            ),
            self._frame(
                "cooling",
                ts,
                np.ones(len(supply), dtype=np.bool_),
                {"supply_temp_c": supply, "return_temp_c": ret, "flow_lpm": flow},
            ),
        ]
        if len(t.switches):
            frames += self._switch_frames(ts, port_rate, e, reboot)  # a missed scrape leaves links up
        rows, self._rows = self._rows, {}
        return Tick(ts, [f for f in frames if len(f)], rows)

    def lines(self, tick: Tick) -> list[tuple[Frame, pa.Array]]:
        """Each frame with its encoded lines, reusing the heads computed at start."""
        return [(frame, encode_lines(self.heads(tick, frame), frame)) for frame in tick.frames]

    def heads(self, tick: Tick, frame: Frame, job_tag: bool = True) -> pa.Array:
        """`measurement,tag=...` of each row of one of the tick's frames, from the heads computed at
        start. job_tag=False leaves out the gpu `job` tag, as a stock dcgm-exporter does."""
        head = self._heads[frame.measurement].take(pa.array(tick.rows[frame.measurement]))
        if job_tag and frame.measurement == "gpu":  # the one tag that changes: which job the GPU runs
            head = pc.binary_join_element_wise(head, ",job=", pa.array(frame.tags["job"], pa.string()), "")
        return head

    # ------------------------------------------------------------------ parts

    def _plain_gpus(self, e: Effects, work: GpuWork) -> GpuReadings:
        """GPUs at the `clean` realism level: power in proportion to the work, no cap held."""
        rng, dt, g = self.rng, self.dt, len(work.job)
        busy, ckpt, stalled, working = work.busy, work.ckpt, work.stalled, work.working
        load = np.where(working, work.intensity * (0.35 + 0.65 * work.own), 0.0)
        power = IDLE_W + (PEAK_W - IDLE_W) * load + np.where(ckpt, 25.0, 0.0) + np.where(stalled, 40.0, 0.0)
        power = np.minimum(power * self.noise.power_factor, e.gpu_power_cap) + rng.normal(0, 4.0, g)
        target = work.inlet + THERMAL_R * power + self.gpu_offset + e.gpu_heat
        self.gpu_temp += (target - self.gpu_temp) * (1.0 - math.exp(-dt / THERMAL_TAU_S))
        temp = self.gpu_temp + rng.normal(0, 0.3, g)
        thermal = np.clip(1.0 - 0.06 * (temp - 87.0), 0.45, 1.0)
        reasons = e.gpu_reasons.copy()
        reasons |= np.where(temp > 87.0, SW_THERMAL, 0) | np.where(temp > 92.0, HW_THERMAL, 0)
        reasons |= np.where(busy, 0, GPU_IDLE)
        clock = np.where(busy, 1980.0 * e.gpu_clock * thermal * np.minimum(self.noise.clock_factor, 1.0), 345.0)
        clock = np.where(ckpt, 1755.0 * e.gpu_clock * thermal, clock) + rng.normal(0, 4.0, g)  # slow parts stay slow
        util = np.where(working | stalled, 96.0 + rng.normal(0, 1.5, g), np.where(ckpt, 4.0, 0.0))
        return GpuReadings(temp, power, power, clock, util, reasons, self._tensor(work, np.ones(g)))

    def _capped_gpus(self, now: float, e: Effects, work: GpuWork) -> GpuReadings:
        """GPUs that behave like the recorded H200 (telemetry_gen/powercap.py; the figures and their
        phases are there)."""
        assert self.cap is not None
        cap, rng, dt, g = self.cap, self.rng, self.dt, len(work.job)
        gpu_job, busy, ckpt, stalled, working = work.job, work.busy, work.ckpt, work.stalled, work.working
        pf = self.noise.power_factor
        jobs = len(self.w.jobs)
        membound = cap.membound(jobs)[gpu_job] & busy
        limit = np.minimum(POWER_LIMIT_W, e.gpu_power_cap)  # a power brake lowers the enforced limit
        computing = working | ckpt  # the state either side of a checkpoint's boundary
        load = 0.35 + 0.65 * np.where(working, work.own, 1.0)
        p_busy, c_busy, capped = cap.busy(computing, membound, work.intensity, load, pf, limit, e.gpu_clock)
        p_busy = np.where(capped, p_busy, p_busy + rng.normal(0, 2.0, g))  # membound: 585-592 W
        # the idle states: a context and no kernels (a checkpoint's wait; a hung collective spins
        # a kernel, so it draws a little more), or no context at all
        idle_w = np.where(ckpt, CONTEXT_IDLE_W, np.where(stalled, CONTEXT_IDLE_W + 40.0, NO_CONTEXT_W))
        idle_w = np.minimum(idle_w * pf, limit) + rng.normal(0, 0.3, g)
        sustained = np.where(working, p_busy, idle_w)
        target = work.inlet + THERMAL_R * sustained + self.gpu_offset + e.gpu_heat
        self.gpu_temp += (target - self.gpu_temp) * (1.0 - math.exp(-dt / THERMAL_TAU_S))
        temp = self.gpu_temp + rng.normal(0, 0.3, g)
        thermal = np.clip(1.0 - 0.06 * (temp - 87.0), 0.45, 1.0)
        # a thermal slowdown pulls the clock under what the cap allows: power falls with it
        # (dynamic power ~ f^3, powercap.py) and the cap no longer holds
        slowed = thermal < 1.0
        p_busy = np.where(slowed & capped, CONTEXT_IDLE_W + (p_busy - CONTEXT_IDLE_W) * thermal**3, p_busy)
        capped &= ~slowed
        power = np.where(working, p_busy, idle_w)
        # a 1-s sample that straddles a boundary: a step's pause (per node, powercap.STEP_DIP_P) or
        # a checkpoint starting or ending within the second before the scrape
        share = cap.step_dips(np.bincount(self.t.gpu_node, weights=working, minlength=cap.nodes) > 0, self.t.gpu_node)
        power = np.where(working & (share < 1.0), CONTEXT_IDLE_W + share * (p_busy - CONTEXT_IDLE_W), power)
        before = np.append(self.w.in_checkpoint(now - 1.0), False)[gpu_job]
        edge = computing & (before != ckpt)
        x = rng.uniform(0.0, 1.0, g)  # the share of the second spent in the state now
        now_w, then_w = np.where(ckpt, idle_w, p_busy), np.where(ckpt, p_busy, idle_w)
        power = np.where(edge, x * now_w + (1.0 - x) * then_w, power)
        clock = np.where(working, c_busy, MAX_CLOCK_MHZ * e.gpu_clock)  # slow parts stay slow
        clock = np.where(busy, quantize(clock * thermal), IDLE_CLOCK_MHZ)
        util = np.where(working | stalled, 100.0 - np.abs(rng.normal(0, 0.7, g)), 0.0)  # train: 99-100 %
        util = np.where(edge & ckpt, 100.0 * (1.0 - x), util)
        # the cap's reason is the physics' (held while demand exceeds the limit), not a blip's
        reasons = e.gpu_reasons & ~SW_POWER_CAP
        reasons |= np.where(temp > 87.0, SW_THERMAL, 0) | np.where(temp > 92.0, HW_THERMAL, 0)
        reasons |= np.where(busy, 0, GPU_IDLE)
        reasons |= np.where((capped & working) | (edge & capped), SW_POWER_CAP, 0)
        tensor = self._tensor(work, np.where(membound, MEMBOUND_TENSOR, 1.0))
        return GpuReadings(temp, power, sustained, clock, util, reasons, tensor)

    def _tensor(self, work: GpuWork, scale: _F) -> _F:
        """The tensor pipe's activity, `scale` of a compute-bound job's (drawn after the GPU model's
        own draws, as both models end)."""
        noise = self.rng.normal(0, 0.01, len(work.job))
        return np.where(work.working, np.clip(0.62 * work.intensity * work.own * scale + noise, 0, 1), 0.0)

    def _inlet(self, now: float, e: Effects) -> NDArray[np.float64]:
        """Per rack: diurnal ambient (coolest at 06:00) plus the rack's cooling."""
        ambient = 22.0 + 2.0 * math.sin(2 * math.pi * ((now - T0) / 86_400.0 - 0.5))
        return ambient + 0.3 * e.cooling_supply_delta + e.rack_heat

    def _rebooting(self, now: float) -> NDArray[np.bool_]:
        off = np.zeros(self.t.count("node"), dtype=np.bool_)
        for m in self.w.maintenance:
            middle = (m.start + m.end) / 2
            if middle - REBOOT_S / 2 <= now < middle + REBOOT_S / 2:
                off[m.nodes] = True
        return off

    def _fail_jobs_on(self, fault: Fault, now: float, e: Effects) -> None:
        stalled = np.flatnonzero(e.node_stalled)
        gpu_job = self.w.gpu_job(now)
        for j in np.unique(gpu_job[np.isin(self.t.gpu_node, stalled)]).tolist():
            if j >= 0:
                job = self.w.jobs[j]
                if job.id not in fault.jobs:
                    fault.jobs.append(job.id)
                self.w.fail_job(job, max(now, fault.onset))

    def _ports(self, nic_rate: NDArray[np.float64], e: Effects, dt: float) -> NDArray[np.float64]:
        """Switch-port counters: downlinks mirror their NIC, uplinks carry the cross-pod share."""
        t = self.t
        p = len(t.port_switch)
        if not p:
            return np.zeros(0)
        down = t.port_peer_nic >= 0
        rate = np.zeros(p)
        rate[down] = nic_rate[t.port_peer_nic[down]]
        leaf_total = np.zeros(len(t.switches))
        np.add.at(leaf_total, t.port_switch[down], rate[down])
        up = ~down
        uplinks_per_switch = np.bincount(t.port_switch[up], minlength=len(t.switches)).astype(np.float64)
        # half of a leaf's traffic leaves the pod, spread over its uplinks; the spine side mirrors
        rate[up] = 0.5 * leaf_total[t.port_switch[up]] / np.maximum(uplinks_per_switch[t.port_switch[up]], 1.0)
        spine_side = up & (np.asarray(t.switch_role, dtype=object)[t.port_switch] == "spine")
        rate[spine_side] = (
            0.5
            * leaf_total[t.port_peer_switch[spine_side]]
            / np.maximum(uplinks_per_switch[t.port_peer_switch[spine_side]], 1.0)
        )
        rate = np.where(e.port_down, 0.0, rate)
        ports = self.port_counters
        ports["port_xmit_data"] += rate * dt
        ports["port_rcv_data"] += rate * dt
        ports["port_xmit_wait"] += (2e3 + 4e4 * rate / NIC_LINE_RATE + e.port_wait_rate) * dt
        ports["rx_prio3_pause"] += e.port_rx_pause_rate * dt
        ports["tx_prio3_pause"] += e.port_tx_pause_rate * dt
        ports["link_downed"] += e.port_downed
        ports["link_error_recovery"] += e.port_downed
        ports["link_error_recovery"][down] += e.nic_recovered[t.port_peer_nic[down]]  # both ends retrain
        nic_sym = self.nic_counters["symbol_error"]
        ports["symbol_error"][down] = nic_sym[t.port_peer_nic[down]]  # the same cable's errors
        ports["port_rcv_errors"][down] = self.nic_counters["port_rcv_errors"][t.port_peer_nic[down]]
        return rate

    def _switch_frames(
        self, ts: int, port_rate: NDArray[np.float64], e: Effects, powered_off: NDArray[np.bool_]
    ) -> list[Frame]:
        t = self.t
        s = len(t.switches)
        counters = self.port_counters
        sums: dict[str, NDArray[np.float64]] = {
            k: np.bincount(t.port_switch, weights=v, minlength=s).astype(np.float64) for k, v in counters.items()
        }
        peer_silent = np.zeros(len(t.port_switch), dtype=np.bool_)
        down = t.port_peer_nic >= 0
        peer_silent[down] = powered_off[t.nic_node[t.port_peer_nic[down]]]
        link_up = ~(e.port_down | peer_silent)
        ports_up = np.bincount(t.port_switch, weights=link_up.astype(np.float64), minlength=s).astype(np.float64)
        load = (
            np.bincount(t.port_switch, weights=port_rate, minlength=s)
            / np.maximum(np.bincount(t.port_switch, minlength=s), 1)
            / NIC_LINE_RATE
        )
        switch = self._frame(
            "switch",
            ts,
            ~e.switch_silent,
            {
                **sums,
                "link_state": np.where(e.switch_silent, 0.0, 1.0),
                "ports_up": ports_up,
                "temperature_c": 48.0 + 15.0 * load + self.rng.normal(0, 0.3, s),
            },
        )
        ports = self._frame(
            "switch_port", ts, ~e.switch_silent[t.port_switch], {**counters, "link_state": link_up.astype(np.float64)}
        )
        return [switch, ports]

    def _gpu_frame(
        self, ts: int, gpus: GpuReadings, work: GpuWork, e: Effects, silent_node: _B, fabric_starting: _B
    ) -> Frame:
        t, c, g, gpu_job = self.t, self.gpu_counters, len(gpus.temp), work.job
        values: dict[str, NDArray[np.float64]] = {
            "DCGM_FI_DEV_GPU_TEMP": gpus.temp,
            "DCGM_FI_DEV_MEMORY_TEMP": gpus.temp + 3.5 + 0.3 * self.gpu_offset,
            "DCGM_FI_DEV_POWER_USAGE": gpus.power,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": np.floor(self.gpu_energy_mj),
            "DCGM_FI_DEV_SM_CLOCK": gpus.clock,
            "DCGM_FI_DEV_MEM_CLOCK": np.full(g, 2619.0),
            "DCGM_FI_DEV_GPU_UTIL": np.clip(gpus.util, 0, 100),
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": gpus.tensor,
            "DCGM_FI_DEV_FB_USED": np.where(work.busy, self.gpu_fb, 480.0),
            "DCGM_FI_DEV_XID_ERRORS": e.gpu_xid,
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": c["sbe"],
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": c["dbe"],
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": c["remap"],
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": c["uremap"],
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": self.remap_failure.astype(np.float64),
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": c["crc"],
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": c["replay"],
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": self.nvbw_base + c["nvbw"],
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": c["pcie"],
            # an idle GPU lets its link fall to Gen1 (dynamic link speed); in use it runs at the
            # most it trained at
            "DCGM_FI_DEV_PCIE_LINK_GEN": np.where(gpu_job >= 0, np.minimum(PCIE_MAX_GEN, e.gpu_pcie_gen_cap), 1.0),
            "DCGM_FI_DEV_PCIE_LINK_WIDTH": np.minimum(PCIE_MAX_WIDTH, e.gpu_pcie_width_cap),
            "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": np.full(g, PCIE_MAX_GEN),
            "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": np.full(g, PCIE_MAX_WIDTH),
            "DCGM_FI_DEV_ROW_REMAP_PENDING": e.gpu_remap_pending.astype(np.float64),
            "DCGM_FI_DEV_FABRIC_MANAGER_STATUS": np.where(
                e.gpu_fabric_failed, FM_FAILURE, np.where(fabric_starting[t.gpu_node], FM_IN_PROGRESS, FM_SUCCESS)
            ),
            "nvlink_links_up": NVLINKS - e.gpu_nvlinks_down,
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": gpus.reasons.astype(np.float64),
        }
        frame = self._frame(
            "gpu",
            ts,
            ~(silent_node[t.gpu_node] | e.gpu_silent),
            values,
            job=self.job_tag[np.where(gpu_job >= 0, gpu_job, -1)],
        )
        blanks = np.flatnonzero(self.rng.random(len(frame)) < BLANK_FIELD_P)
        for row in blanks.tolist():  # rare by design: the exporters' "no value" sentinel
            name = _GPU_BLANKABLE[int(self.rng.integers(0, len(_GPU_BLANKABLE)))]
            col = frame.fields[name]
            col.values[row] = DCGM_FP64_BLANK if col.type is FieldType.FLOAT else DCGM_INT32_BLANK
        return frame

    def _frame(
        self,
        name: str,
        ts: int,
        keep: NDArray[np.bool_],
        values: dict[str, NDArray[np.float64]],
        **dynamic_tags: NDArray[np.object_],
    ) -> Frame:
        spec = _SPECS[name]
        keep = keep & (self.rng.random(len(keep)) >= MISSING_SAMPLE_P)
        rows = np.flatnonzero(keep)
        tags = {k: column[rows] for k, column in self._tags[name].items()}
        for k, column in dynamic_tags.items():
            tags[k] = column[rows]
        fields: dict[str, Column] = {}
        for metric in spec.metrics:
            v = np.asarray(values[metric.name], dtype=np.float64)[rows]
            if metric.type is FieldType.FLOAT:
                fields[metric.name] = Column.of(FieldType.FLOAT, np.round(v, 3))
            else:
                fields[metric.name] = Column.of(FieldType.INT, np.floor(v).astype(np.int64))
        self._rows[name] = rows
        return Frame(name, np.full(len(rows), ts, dtype=np.int64), tags, fields)


_SPECS = {m.name: m for m in MEASUREMENTS}
_PORT_COUNTERS = (
    "symbol_error",
    "port_rcv_errors",
    "link_downed",
    "link_error_recovery",
    "port_xmit_wait",
    "port_xmit_discards",
    "rx_prio3_pause",
    "tx_prio3_pause",
    "port_xmit_data",
    "port_rcv_data",
    "np_cnp_sent",
)


def _static_tags(t: Topology) -> dict[str, dict[str, NDArray[np.object_]]]:
    """Tag columns of every entity, built once (the gpu `job` tag is added per tick)."""

    def arr(values: list[str]) -> NDArray[np.object_]:
        return np.array(values, dtype=object)

    node_ids = t.ids["node"]
    racks = t.ids["rack"]
    nics = t.ids["nic"]
    tags: dict[str, dict[str, NDArray[np.object_]]] = {
        "gpu": {"gpu": arr(t.ids["gpu"]), "node": arr([node_ids[i] for i in t.gpu_node.tolist()])},
        "nvswitch": {"nvswitch": arr(t.ids["nvswitch"]), "node": arr([node_ids[i] for i in t.nvswitch_node.tolist()])},
        "nic": {
            "nic": arr(nics),
            "node": arr([node_ids[i] for i in t.nic_node.tolist()]),
            "rail": arr([str(r) for r in t.nic_rail.tolist()]),
        },
        "optic": {
            "optic": arr(t.ids["optic"]),
            "nic": arr(nics),
            "node": arr([node_ids[i] for i in t.nic_node.tolist()]),
        },
        "node": {"node": arr(node_ids), "rack": arr([racks[i] for i in t.node_rack.tolist()])},
        "psu": {"psu": arr(t.ids["psu"]), "node": arr([node_ids[i] for i in t.psu_node.tolist()])},
        "cooling": {"cooling": arr(t.ids["cooling"]), "rack": arr(racks)},
        "switch": {"switch": arr(t.switches), "role": arr(t.switch_role)},
    }
    if len(t.port_switch):
        port_ids = t.ids["port"]
        tags["switch_port"] = {
            "port": arr(port_ids),
            "switch": arr([t.switches[i] for i in t.port_switch.tolist()]),
            "peer": arr(t.port_peer),
        }
    return tags
