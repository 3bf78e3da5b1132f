"""What active faults do to the cluster at one tick, as per-entity modifiers.

Every tick starts from neutral modifiers; each active fault writes into them (a slowdown factor
for a GPU, a pause-frame rate on a port, a missing switch...), and the metric models read them.
Symptoms spread through the topology here: a leaf down takes every NIC under it, a PFC storm
pushes pause frames upstream, a PSU failure brakes all GPUs of its node, rack cooling heats every
node of the rack, a straggler slows its job (via the job's speed, in the simulator).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from telemetry_gen.faults import Fault
from telemetry_gen.topology import Topology
from telemetry_gen.workload import Workload
from vocab import registry
from vocab.ids import link_id, nvswitch_id, optic_id

# DCGM_FI_DEV_CLOCKS_EVENT_REASONS bits, as the registry defines them
GPU_IDLE = registry.clock_reason("gpu_idle")
SW_THERMAL = registry.clock_reason("sw_thermal_slowdown")
HW_THERMAL = registry.clock_reason("hw_thermal_slowdown")
HW_POWER_BRAKE = registry.clock_reason("hw_power_brake_slowdown")


def _zeros(n: int) -> NDArray[np.float64]:
    return np.zeros(n, dtype=np.float64)


def _ones(n: int) -> NDArray[np.float64]:
    return np.ones(n, dtype=np.float64)


def _false(n: int) -> NDArray[np.bool_]:
    return np.zeros(n, dtype=np.bool_)


@dataclass(slots=True)
class Effects:
    # GPUs
    gpu_silent: NDArray[np.bool_]
    gpu_xid: NDArray[np.float64]
    gpu_clock: NDArray[np.float64]  # SM clock factor (fail-slow, throttling by cause)
    gpu_reasons: NDArray[np.int64]
    gpu_heat: NDArray[np.float64]  # extra °C at the die
    gpu_sbe_rate: NDArray[np.float64]  # per second
    gpu_remap_rate: NDArray[np.float64]
    gpu_dbe: NDArray[np.float64]  # increments this tick
    gpu_uncorrectable_remap: NDArray[np.float64]
    gpu_remap_failure: NDArray[np.bool_]
    gpu_nvlink_crc_rate: NDArray[np.float64]
    gpu_nvlink_replay_rate: NDArray[np.float64]
    gpu_nvlink_bw: NDArray[np.float64]
    gpu_power_cap: NDArray[np.float64]  # watts, inf = none
    # nodes: a hard fault hangs the job's collectives until the job dies
    node_stalled: NDArray[np.bool_]
    node_speed: NDArray[np.float64]  # network-side slowdown of the node's traffic
    node_power_cap: NDArray[np.float64]
    # NICs (and their optics, index-aligned)
    nic_down: NDArray[np.bool_]
    nic_downed: NDArray[np.float64]  # link_downed increments this tick
    nic_symbol_rate: NDArray[np.float64]
    nic_traffic: NDArray[np.float64]  # traffic factor
    nic_wait_rate: NDArray[np.float64]  # extra port_xmit_wait per second
    nic_rx_pause_rate: NDArray[np.float64]
    nic_tx_pause_rate: NDArray[np.float64]
    optic_rx_delta: NDArray[np.float64]
    # switches and their ports
    switch_silent: NDArray[np.bool_]
    port_down: NDArray[np.bool_]
    port_downed: NDArray[np.float64]
    port_wait_rate: NDArray[np.float64]
    port_rx_pause_rate: NDArray[np.float64]
    port_tx_pause_rate: NDArray[np.float64]
    # power and cooling
    psu_failed: NDArray[np.bool_]
    rack_heat: NDArray[np.float64]  # extra °C at node inlets
    cooling_supply_delta: NDArray[np.float64]
    cooling_flow: NDArray[np.float64]
    # quiet faults: states that no error counter shows (issue 29)
    gpu_pcie_gen_cap: NDArray[np.float64]  # the link trained at most this generation (inf = max)
    gpu_pcie_width_cap: NDArray[np.float64]  # ... and this many lanes
    gpu_nvlinks_down: NDArray[np.float64]
    gpu_fabric_failed: NDArray[np.bool_]  # the node's fabric manager failed: status 4
    gpu_remap_now: NDArray[np.float64]  # rows remapped this tick (correctable): a reset is due
    gpu_remap_pending: NDArray[np.bool_]
    nic_width_cap: NDArray[np.float64]  # lanes the link trained at (inf = all four)
    nic_lane_gbps_cap: NDArray[np.float64]  # per-lane speed it trained at (inf = the fabric's)
    nic_recovered: NDArray[np.float64]  # link_error_recovery increments this tick

    @staticmethod
    def neutral(t: Topology) -> Effects:
        g, n, s = t.count("gpu"), t.count("nic"), len(t.switches)
        p, nodes, racks = len(t.port_switch), t.count("node"), t.count("rack")
        return Effects(
            _false(g),
            _zeros(g),
            _ones(g),
            np.zeros(g, dtype=np.int64),
            _zeros(g),
            _zeros(g),
            _zeros(g),
            _zeros(g),
            _zeros(g),
            _false(g),
            _zeros(g),
            _zeros(g),
            _ones(g),
            np.full(g, np.inf),
            _false(nodes),
            _ones(nodes),
            np.full(nodes, 10_200.0),
            _false(n),
            _zeros(n),
            _zeros(n),
            _ones(n),
            _zeros(n),
            _zeros(n),
            _zeros(n),
            _zeros(n),
            _false(s),
            _false(p),
            _zeros(p),
            _zeros(p),
            _zeros(p),
            _zeros(p),
            _false(t.count("psu")),
            _zeros(racks),
            _zeros(racks),
            _ones(racks),
            gpu_pcie_gen_cap=np.full(g, np.inf),
            gpu_pcie_width_cap=np.full(g, np.inf),
            gpu_nvlinks_down=_zeros(g),
            gpu_fabric_failed=_false(g),
            gpu_remap_now=_zeros(g),
            gpu_remap_pending=_false(g),
            nic_width_cap=np.full(n, np.inf),
            nic_lane_gbps_cap=np.full(n, np.inf),
            nic_recovered=_zeros(n),
        )


class FaultEffects:
    """Applies every active fault to an Effects; knows the topology's index maps."""

    def __init__(self, topology: Topology, interval: float) -> None:
        self.t = topology
        self.dt = interval
        self.node_index = {n: i for i, n in enumerate(topology.ids["node"])}
        self.switch_index = {s: i for i, s in enumerate(topology.switches)}
        self.nic_index = {n: i for i, n in enumerate(topology.ids["nic"])}
        self.rack_of_cooling = {c: i for i, c in enumerate(topology.ids["cooling"])}

    def gpu_node(self, gpu: int) -> int:
        return int(self.t.gpu_node[gpu])

    def node_gpus(self, node: int) -> NDArray[np.int64]:
        return np.flatnonzero(self.t.gpu_node == node)

    def nics_of_switch(self, switch: int) -> NDArray[np.int64]:
        return np.flatnonzero(self.t.nic_switch == switch)

    def apply(self, fault: Fault, now: float, e: Effects, rng: np.random.Generator) -> None:
        started = now >= fault.onset
        p = 1.0 if started else _progress(fault, now)
        sev = fault.severity
        since = max(0.0, now - fault.onset)
        i = fault.root_index
        kind = fault.kind
        first_tick = started and since < self.dt
        if kind == "gpu_fell_off_bus":
            if first_tick:
                e.gpu_xid[i] = 79
            else:
                e.gpu_silent[i] = True
            e.node_stalled[self.gpu_node(i)] = True
        elif kind == "gpu_hbm_ecc":
            # correctable errors climb over hours (exponential), then an uncorrectable one
            e.gpu_sbe_rate[i] += 0.004 * sev * np.exp(4.0 * p) if not started else 0.05 * sev
            e.gpu_remap_rate[i] += e.gpu_sbe_rate[i] / 40.0
            if first_tick:
                e.gpu_dbe[i] += 1 + int(2 * sev)
                e.gpu_xid[i] = 48
                if sev > 0.6:
                    e.gpu_remap_failure[i] = True
                else:
                    e.gpu_uncorrectable_remap[i] += 1
            elif started:
                e.gpu_xid[i] = 94 if fault.params["u"] < 0.5 else 95
                e.gpu_remap_failure[i] |= sev > 0.6
            if started:
                e.node_stalled[self.gpu_node(i)] = True
                # the uncorrectable error's row is remapped at the next reset, unless remapping failed
                e.gpu_remap_pending[i] = sev <= 0.6
        elif kind == "gpu_thermal":
            e.gpu_heat[i] += 14.0 * sev * p**1.5 if not started else 30.0 + 10.0 * sev
        elif kind == "gpu_nvlink":
            if started:
                e.gpu_nvlink_crc_rate[i] += 20.0 + 200.0 * sev
                e.gpu_nvlink_replay_rate[i] += 2.0 + 20.0 * sev
                e.gpu_nvlink_bw[i] *= 1.0 - 0.5 * sev
                e.gpu_clock[i] *= 1.0  # the GPU is fine; its job waits on the slow link
                e.node_speed[self.gpu_node(i)] = min(e.node_speed[self.gpu_node(i)], 1.0 - 0.3 * sev)
        elif kind == "gpu_straggler":
            if started:  # fail-slow: lower clocks, no error counter anywhere
                # 5 % slow at the mildest (barely visible: Sinha et al. measure 8 % spread between
                # healthy GPUs) to 45 % at the worst
                e.gpu_clock[i] *= 1.0 - (0.05 + 0.40 * sev)
        elif kind == "nic_link_flap":
            if started:
                e.nic_symbol_rate[i] += 2.0 + 30.0 * sev
                period = 120.0 + 240.0 * fault.params["u"]
                if (since % period) < self.dt:  # the link bounces
                    e.nic_down[i] = True
                    e.nic_downed[i] += 1
                else:
                    e.nic_traffic[i] *= 0.8
                self._mirror_port(i, e)
        elif kind == "optic_degradation":
            # a 1 dB sag at the mildest (inside the usual 2-3 dB link margin) to 7 dB at the worst
            e.optic_rx_delta[i] -= (1.0 + 6.0 * sev) * (p**1.5 if not started else 1.0) + (0.5 if started else 0.0)
            if started:
                fail_after = 300.0 + 900.0 * fault.params["u"]
                e.nic_symbol_rate[i] += (5.0 + 100.0 * sev) * (1.0 + since / 60.0)
                if since >= fail_after:
                    e.nic_down[i] = True
                    if since - fail_after < self.dt:
                        e.nic_downed[i] += 1
                    e.node_stalled[int(self.t.nic_node[i])] = True
                else:
                    e.nic_traffic[i] *= 0.9
                self._mirror_port(i, e)
        elif kind == "leaf_down":
            if started:
                e.switch_silent[i] = True
                nics = self.nics_of_switch(i)
                e.nic_down[nics] = True
                if first_tick:
                    e.nic_downed[nics] += 1
                e.node_stalled[self.t.nic_node[nics]] = True
                peers = np.flatnonzero(self.t.port_peer_switch == i)
                e.port_down[peers] = True
                if first_tick:
                    e.port_downed[peers] += 1
        elif kind == "pfc_storm":
            if started:
                self._pfc_storm(i, sev, e)
        elif kind == "spine_congestion":
            if started:
                ports = np.flatnonzero(self.t.port_switch == i)
                e.port_wait_rate[ports] += 4e6 * (0.3 + sev)
                rail = int(self.t.attrs[fault.root]["rail"])
                nics = np.flatnonzero(self.t.nic_rail == rail)
                e.nic_wait_rate[nics] += 3e5 * (0.3 + sev)
                e.nic_traffic[nics] *= 1.0 - 0.35 * sev
                leaves = np.unique(self.t.nic_switch[nics])
                up = np.flatnonzero(np.isin(self.t.port_switch, leaves) & (self.t.port_peer_switch == i))
                e.port_wait_rate[up] += 2e6 * (0.3 + sev)
        elif kind == "psu_failure":
            if started:
                e.psu_failed[i] = True
                node = int(self.t.psu_node[i])
                e.node_power_cap[node] = 6_000.0
                gpus = self.node_gpus(node)
                e.gpu_power_cap[gpus] = np.minimum(e.gpu_power_cap[gpus], 330.0 - 120.0 * sev)
                e.gpu_clock[gpus] *= 0.75 - 0.3 * sev
                e.gpu_reasons[gpus] |= HW_POWER_BRAKE
        elif kind == "rack_cooling":
            rack = self.rack_of_cooling[fault.root]
            if not started:
                e.cooling_supply_delta[rack] += 4.0 * sev * p**1.5
            else:
                e.cooling_supply_delta[rack] += 6.0 + 10.0 * sev
                e.cooling_flow[rack] *= 0.7 - 0.3 * sev
                e.rack_heat[rack] += 6.0 + 10.0 * sev

        elif kind == "gpu_pcie_downtrained":
            if started:  # after a reset the link trained one or two generations low, or at half width
                if fault.params["u"] < 0.5:
                    e.gpu_pcie_gen_cap[i] = 4.0 if sev < 0.5 else 3.0
                else:
                    e.gpu_pcie_width_cap[i] = 8.0 if sev < 0.7 else 4.0
                # host-device copies (input pipeline, checkpoints) at half speed or worse: a few
                # per cent of a training step that overlaps most of them
                node = self.gpu_node(i)
                e.node_speed[node] = min(e.node_speed[node], 0.97 - 0.05 * sev)
        elif kind == "gpu_nvlink_down":
            if started:  # links that failed to train: the fabric routes around them, bandwidth falls
                down = 1.0 + np.floor(5.0 * sev)
                e.gpu_nvlinks_down[i] += down
                e.gpu_nvlink_bw[i] *= 1.0 - down / 18.0
                node = self.gpu_node(i)
                e.node_speed[node] = min(e.node_speed[node], 1.0 - 0.5 * down / 18.0)
        elif kind == "nvswitch_fabric_manager":
            if started:  # every GPU of the node: "fabric not ready"; the job's NVLink collectives hang
                e.gpu_fabric_failed[self.node_gpus(i)] = True
                e.node_stalled[i] = True
        elif kind == "gpu_lost":
            if started:  # the driver lost the GPU (or the exporter lost that one device): no Xid
                e.gpu_silent[i] = True
                e.node_stalled[self.gpu_node(i)] = True
        elif kind == "gpu_row_remap_pending":
            if started:  # a row remapped on correctable errors; it takes effect at the next reset
                if first_tick:
                    e.gpu_remap_now[i] += 1.0 + np.floor(2.0 * fault.params["u"])
                e.gpu_remap_pending[i] = True
        elif kind == "ib_link_degraded":
            if started:  # the cable trained at 2x (or 1x) width, or at the lower speed (HDR on NDR)
                if fault.params["u"] < 0.6:
                    e.nic_width_cap[i] = 2.0 if sev < 0.7 else 1.0
                    share = e.nic_width_cap[i] / 4.0
                else:
                    e.nic_lane_gbps_cap[i] = 50.0
                    share = 0.5
                # a rail's collectives move at its slowest link's pace, partly hidden by compute
                e.nic_traffic[i] *= 0.5 + 0.5 * share
        elif kind == "ib_link_errors" and started:  # the PHY retrains and corrupts symbols, never drops
            period = 900.0 - 780.0 * sev  # a retrain every 2 to 15 minutes
            if (since % period) < self.dt:
                e.nic_recovered[i] += 1.0
            e.nic_symbol_rate[i] += 0.05 + 5.0 * sev
            e.nic_traffic[i] *= 0.97

    def _mirror_port(self, nic: int, e: Effects) -> None:
        """The leaf port at the other end of a NIC's cable sees the same link."""
        port = nic  # downlink ports are index-aligned with NICs (see topology builders)
        if port < len(e.port_down) and self.t.port_peer_nic[port] == nic:
            e.port_down[port] |= e.nic_down[nic]
            e.port_downed[port] += e.nic_downed[nic]

    def _pfc_storm(self, nic: int, sev: float, e: Effects) -> None:
        """One NIC sends pause frames without end; its leaf stops draining toward it, fills up and
        pauses its other senders and its spines, which pause the other leaves of the rail."""
        t = self.t
        rate = 2e4 + 2e5 * sev  # pause frames per second from the origin
        e.nic_tx_pause_rate[nic] += rate
        leaf = int(t.nic_switch[nic])
        if leaf < 0:
            return
        e.port_rx_pause_rate[nic] += rate  # the leaf port facing the origin receives them
        siblings = np.setdiff1d(self.nics_of_switch(leaf), [nic])
        e.port_tx_pause_rate[siblings] += 0.3 * rate
        e.nic_rx_pause_rate[siblings] += 0.3 * rate
        e.nic_traffic[siblings] *= 0.6
        e.nic_wait_rate[siblings] += 2e5 * sev
        uplinks = np.flatnonzero((t.port_switch == leaf) & (t.port_peer_switch >= 0))
        e.port_tx_pause_rate[uplinks] += 0.2 * rate
        spines = t.port_peer_switch[uplinks]
        spine_side = np.flatnonzero(np.isin(t.port_switch, spines) & (t.port_peer_switch == leaf))
        e.port_rx_pause_rate[spine_side] += 0.2 * rate
        other_leaf_side = np.flatnonzero(np.isin(t.port_switch, spines) & (t.port_peer_switch != leaf))
        e.port_tx_pause_rate[other_leaf_side] += 0.05 * rate
        other_leaves = t.port_peer_switch[other_leaf_side]
        their_uplinks = np.flatnonzero(np.isin(t.port_switch, other_leaves) & np.isin(t.port_peer_switch, spines))
        e.port_rx_pause_rate[their_uplinks] += 0.05 * rate
        far = np.flatnonzero(np.isin(t.nic_switch, other_leaves))
        e.nic_traffic[far] *= 0.85
        e.nic_wait_rate[far] += 5e4 * sev
        e.port_wait_rate[np.concatenate([siblings, uplinks])] += 1e5 * sev


def _progress(fault: Fault, now: float) -> float:
    """0 at the precursor's start, 1 at onset."""
    if fault.precursor_start is None or now < fault.precursor_start:
        return 0.0
    return float(min(1.0, (now - fault.precursor_start) / max(1.0, fault.onset - fault.precursor_start)))


def active(fault: Fault, now: float) -> bool:
    start = fault.precursor_start if fault.precursor_start is not None else fault.onset
    return start <= now < fault.end


def affected_entities(fault: Fault, t: Topology) -> list[str]:
    """The root and the entities that show its symptoms directly."""
    kind = registry.KINDS[fault.kind]
    root = fault.root
    out = [root]
    if kind.root == "gpu":
        node_id = str(t.attrs[root]["node"])
        out.append(node_id)
        if fault.kind == "gpu_nvlink":  # the node's NVSwitches count the same link errors
            out += [nvswitch_id(node_id, s) for s in range(4)]
    elif fault.kind == "nvswitch_fabric_manager":
        node = fault.root_index
        out += [t.ids["gpu"][g] for g in np.flatnonzero(t.gpu_node == node).tolist()]
        out += [t.ids["nvswitch"][s] for s in np.flatnonzero(t.nvswitch_node == node).tolist()]
    elif fault.kind in ("nic_link_flap", "optic_degradation", "ib_link_degraded", "ib_link_errors"):
        nic = root if kind.root == "nic" else str(t.attrs[root]["nic"])
        n = t.ids["nic"].index(nic)
        out += [nic, optic_id(nic), link_id(nic), str(t.attrs[nic]["node"])]
        if len(t.port_switch):
            out.append(t.ids["port"][n])
    elif fault.kind == "pfc_storm":
        # the origin, then every port and NIC the pause frames reach (see effects._pfc_storm)
        n = fault.root_index
        out += [optic_id(root), str(t.attrs[root]["node"])]
        leaf = int(t.nic_switch[n])
        if leaf >= 0:
            siblings = np.flatnonzero(t.nic_switch == leaf)
            out += [t.switches[leaf], *(t.ids["nic"][i] for i in siblings.tolist())]
            uplinks = np.flatnonzero((t.port_switch == leaf) & (t.port_peer_switch >= 0))
            spines = np.unique(t.port_peer_switch[uplinks])
            spine_ports = np.flatnonzero(np.isin(t.port_switch, spines))
            other_leaves = np.unique(t.port_peer_switch[spine_ports])
            far_uplinks = np.flatnonzero(np.isin(t.port_switch, other_leaves) & np.isin(t.port_peer_switch, spines))
            ports = np.concatenate([siblings, uplinks, spine_ports, far_uplinks])
            out += [t.ids["port"][p] for p in np.unique(ports).tolist()]
    elif fault.kind == "leaf_down":
        nics = np.flatnonzero(t.nic_switch == fault.root_index)
        out += [t.ids["nic"][i] for i in nics.tolist()]
        out += list(dict.fromkeys(t.ids["node"][int(t.nic_node[i])] for i in nics.tolist()))
        ports = np.flatnonzero((t.port_switch == fault.root_index) | (t.port_peer_switch == fault.root_index))
        out += [t.ids["port"][p] for p in ports.tolist()]
    elif fault.kind == "spine_congestion":
        # its ports, and the leaves whose uplinks queue toward it
        ports = np.flatnonzero((t.port_switch == fault.root_index) | (t.port_peer_switch == fault.root_index))
        out += [t.ids["port"][p] for p in ports.tolist()]
        leaves = np.unique(t.port_switch[ports])
        out += [t.switches[s] for s in leaves.tolist() if s != fault.root_index]
    elif fault.kind == "psu_failure":
        node = int(t.psu_node[fault.root_index])
        out.append(t.ids["node"][node])
        out += [t.ids["gpu"][g] for g in np.flatnonzero(t.gpu_node == node).tolist()]
    elif fault.kind == "rack_cooling":
        rack = t.ids["cooling"].index(root)
        out.append(t.ids["rack"][rack])
        nodes = np.flatnonzero(t.node_rack == rack)
        out += [t.ids["node"][n] for n in nodes.tolist()]
        out += [t.ids["gpu"][g] for g in np.flatnonzero(np.isin(t.gpu_node, nodes)).tolist()]
    return list(dict.fromkeys(out))


def jobs_at(fault: Fault, t: Topology, w: Workload) -> list[str]:
    """Jobs running at onset that the fault hits: the job holding a failing GPU, every job on a
    node whose shared parts (NIC, PSU, cooling, leaf) fail, and for a congested spine the jobs
    whose traffic crosses it, those on two of its rail's leaves (a job inside one pod never
    reaches a spine: rca/blast.py `radius`)."""
    gpu_job = w.gpu_job(fault.onset)
    if fault.kind == "spine_congestion":
        on_rail = t.nic_rail == int(t.attrs[fault.root]["rail"])
        leaf_of = dict(zip(t.nic_node[on_rail].tolist(), t.nic_switch[on_rail].tolist(), strict=True))
        running = [w.jobs[j] for j in np.unique(gpu_job[gpu_job >= 0]).tolist()]
        return sorted(job.id for job in running if len({leaf_of.get(n) for n in job.nodes.tolist()}) > 1)
    if registry.KINDS[fault.kind].root == "gpu":
        gpus = [t.ids["gpu"].index(fault.root)]
    else:
        node_index = {n: i for i, n in enumerate(t.ids["node"])}
        nodes = [node_index[e] for e in fault.affected if e in node_index]
        gpus = np.flatnonzero(np.isin(t.gpu_node, nodes)).tolist()
    return sorted({w.jobs[j].id for j in gpu_job[gpus].tolist() if j >= 0})
