"""Putting a synthetic cluster together: topology, workload, faults, metric models, and the
outputs (topology.json, telemetry.lp, events.jsonl, truth.jsonl).

Everything random is drawn from generators seeded by (seed, purpose), so the same arguments and
seed give byte-identical outputs, and changing one purpose's draws does not shift another's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from telemetry_gen.faults import KINDS, Fault, default_counts, parse_spec, schedule
from telemetry_gen.simulate import T0, ClusterSim, Tick
from telemetry_gen.topology import Topology, build
from telemetry_gen.workload import HOUR, Workload


@dataclass(frozen=True, slots=True)
class GenConfig:
    gpus: int = 1024
    topology: str = "fat-tree"
    hours: float = 6.0
    interval: float = 10.0
    seed: int = 0
    faults: str | None = None  # None: the default published rate; "" : none at all
    maintenance_per_day: float = 2.0


class Generation:
    """One generated cluster history. Iterate `ticks()` once; truth and events are final after."""

    def __init__(self, config: GenConfig) -> None:
        if config.interval <= 0 or config.hours <= 0:
            raise ValueError("--interval and --hours must be positive")
        self.config = config
        self.topology: Topology = build(config.topology, config.gpus)
        t_end = T0 + config.hours * HOUR
        self.workload = Workload(
            nodes=self.topology.count("node"),
            t0=T0,
            t_end=t_end,
            rng=np.random.default_rng([config.seed, 1]),
            node_ids=self.topology.ids["node"],
        )
        self.workload.plan(config.maintenance_per_day)
        fault_rng = np.random.default_rng([config.seed, 4])
        counts = (
            default_counts(self.topology, config.hours, fault_rng)
            if config.faults is None
            else parse_spec(config.faults)
        )
        self.faults: list[Fault] = schedule(counts, self.topology, self.workload, fault_rng)
        for fault in self.faults:
            fault.affected = affected_entities(fault, self.topology)
            fault.jobs = jobs_at(fault, self.topology, self.workload)
        self.sim = ClusterSim(self.topology, self.workload, self.faults, config.interval, config.seed)

    def ticks(self) -> Iterator[Tick]:
        return self.sim.ticks()

    def truth(self) -> list[dict[str, object]]:
        return [f.truth() for f in self.faults]

    def events(self) -> list[dict[str, object]]:
        return self.workload.events()


def affected_entities(fault: Fault, t: Topology) -> list[str]:
    """The root and the entities that show its symptoms directly."""
    kind = KINDS[fault.kind]
    root = fault.root
    out = [root]
    if kind.root == "gpu":
        node_id = str(t.attrs[root]["node"])
        out.append(node_id)
        if fault.kind == "gpu_nvlink":  # the node's NVSwitches count the same link errors
            out += [f"{node_id}-nvsw{s}" for s in range(4)]
    elif fault.kind in ("nic_link_flap", "optic_degradation"):
        nic = root if kind.root == "nic" else str(t.attrs[root]["nic"])
        n = t.ids["nic"].index(nic)
        out += [nic, f"{nic}-optic", f"link-{nic}", str(t.attrs[nic]["node"])]
        if len(t.port_switch):
            out.append(t.ids["port"][n])
    elif fault.kind == "pfc_storm":
        # the origin, then every port and NIC the pause frames reach (see effects._pfc_storm)
        n = fault.root_index
        out += [f"{root}-optic", str(t.attrs[root]["node"])]
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
    """Jobs running at onset on the nodes the fault touches."""
    node_index = {n: i for i, n in enumerate(t.ids["node"])}
    nodes = [node_index[e] for e in fault.affected if e in node_index]
    if fault.kind == "spine_congestion":  # every job with a NIC on the spine's rail
        rail = int(t.attrs[fault.root]["rail"])
        nodes = np.unique(t.nic_node[t.nic_rail == rail]).tolist()
    node_job = w.node_job(fault.onset)
    return sorted({w.jobs[j].id for j in node_job[nodes].tolist() if j >= 0})


def write_jsonl(path: Path, records: list[dict[str, object]]) -> None:
    with path.open("w") as f:
        for r in records:
            f.write(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n")
