"""Fault catalog, scheduling and the truth log.

Kinds and their root entities are the registry's (vocab/faults.toml). Default rates come from Meta's Llama 3
report (Dubey et al., 2024, table 5): 419 unexpected interruptions in 54 days on 16,384 H100s,
i.e. 1.97e-5 per GPU-hour, of which faulty GPUs 30.1%, HBM3 17.2%, network switch/cable 8.4%,
GPU SRAM and processor 8.4%, NIC 1.4%, host/power/cooling the rest; we split that total across
our kinds with each kind's generator_weight in the registry (vocab/faults.toml).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from telemetry_gen.topology import Topology
from telemetry_gen.workload import HOUR, Workload
from vocab import registry
from vocab.registry import FaultKind

LLAMA3_INTERRUPTIONS_PER_GPU_HOUR = 419 / (16_384 * 54 * 24)


# The kinds the generator injects, with their mix, durations and whether they have a precursor or
# kill their job: the registry's (vocab/faults.toml), so the generator and the engine share them.
KINDS: dict[str, FaultKind] = {name: registry.KINDS[name] for name in registry.INJECTED}
PRECURSOR_S = (1 * HOUR, 12 * HOUR)
SEPARATION_S = 600.0


class FaultSpecError(ValueError):
    """A --faults value that cannot be honoured, with what is wrong in it."""


@dataclass(slots=True)
class Fault:
    fault_id: str
    kind: str
    root: str
    root_index: int  # index of the root within its kind's id list
    onset: float
    end: float
    precursor_start: float | None
    severity: float  # 0.3 (subtle) .. 1.0
    affected: list[str] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    # per-fault randomness fixed at scheduling time (e.g. when a degrading link finally fails)
    params: dict[str, float] = field(default_factory=dict)

    def truth(self) -> dict[str, object]:
        return {
            "fault_id": self.fault_id,
            "kind": self.kind,
            "root": self.root,
            "onset": self.onset,
            "end": self.end,
            "precursor_start": self.precursor_start,
            "affected": self.affected,
            "jobs": self.jobs,
            "severity": round(self.severity, 3),
        }


def parse_spec(spec: str, topology: Topology | None = None) -> dict[str, int]:
    """'gpu_hbm_ecc=3,leaf_down=1' -> counts; 'all=2' schedules two of every kind the topology
    has a root for (a dragonfly has no spine); a kind named on its own must have one."""
    counts: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        m = re.fullmatch(r"([a-z_]+)=(\d+)", part)
        if not m:
            raise FaultSpecError(f"bad fault spec {part!r}: expected kind=count")
        kind, n = m.group(1), int(m.group(2))
        if kind == "all":
            for k, fault_kind in KINDS.items():
                if topology is None or _candidates(topology, fault_kind.root):
                    counts[k] = counts.get(k, 0) + n
            continue
        if kind not in KINDS:
            raise FaultSpecError(f"unknown fault kind {kind!r}; kinds: {', '.join(KINDS)}")
        counts[kind] = counts.get(kind, 0) + n
    return counts


def default_counts(topology: Topology, hours: float, rng: np.random.Generator) -> dict[str, int]:
    """Poisson draws at the published rate, split by kind weight."""
    expected = LLAMA3_INTERRUPTIONS_PER_GPU_HOUR * topology.gpus * hours
    total = sum(k.generator_weight for k in KINDS.values())
    return {k.name: int(rng.poisson(expected * k.generator_weight / total)) for k in KINDS.values()}


def _candidates(topology: Topology, root_kind: str) -> list[str]:
    if root_kind in ("leaf", "spine"):
        return [s for s, role in zip(topology.switches, topology.switch_role, strict=True) if role == root_kind]
    return topology.ids.get(root_kind, [])


# Severity: clean keeps faults plainly visible (uniform 0.3..1); realistic runs draw uniform 0..1,
# so the mildest reach the barely visible (a 5 % straggler, a 1 dB optic sag, a 2 °C creep).
SEVERITY_CLEAN = (0.3, 1.0)
SEVERITY_REALISTIC = (0.0, 1.0)


def schedule(
    counts: dict[str, int],
    topology: Topology,
    workload: Workload,
    rng: np.random.Generator,
    overlap: bool = False,
) -> list[Fault]:
    """Place faults at random times and places, on distinct roots. Clean (overlap=False): no two
    faults on one node, switch or rack at overlapping times, none in a maintenance drain, so the
    truth stays unambiguous. overlap=True, as faults come: only the root's own node or switch is
    kept free, so two faults can share a rack, a leaf or a plane, or hit a draining node."""
    severity = SEVERITY_REALISTIC if overlap else SEVERITY_CLEAN
    faults: list[Fault] = []
    busy: list[tuple[str, float, float]] = []  # (node or switch, from, to)
    doomed: dict[int, float] = {}  # job index -> when a job-killing fault hits it
    span = workload.t_end - workload.t0
    # Job-killing kinds first, so a fault that needs a running job (a straggler, say) is not put
    # on a job that another fault is going to kill before it shows.
    ordered = sorted(KINDS.items(), key=lambda item: not item[1].kills_job)
    for kind_name, kind in ordered:  # fixed order: determinism
        candidates = _candidates(topology, kind.root)
        if counts.get(kind_name, 0) and not candidates:
            raise FaultSpecError(f"{kind_name} needs a {kind.root}; the {topology.name} topology has none")
        for _ in range(counts.get(kind_name, 0)):
            for _attempt in range(200):
                index = int(rng.integers(0, len(candidates)))
                root = candidates[index]
                duration = float(rng.uniform(*kind.duration_s))
                onset = workload.t0 + float(rng.uniform(min(600.0, span * 0.1), max(span * 0.1 + 1, span - 900.0)))
                end = min(onset + duration, workload.t_end + duration)
                precursor = onset - float(rng.uniform(*PRECURSOR_S)) if kind.precursor else None
                places = _places(topology, kind.root, root)[:1] if overlap else _places(topology, kind.root, root)
                # Symptom windows (not precursors, which are quiet) stay apart on shared places.
                window = (onset - SEPARATION_S, end + SEPARATION_S)
                if any(p == q and a < window[1] and window[0] < b for q, a, b in busy for p in places):
                    continue
                if any(r == root for r in (f.root for f in faults)):
                    continue
                if _needs_a_job(kind_name) and not _runs_job(topology, workload, kind.root, root, onset, end, doomed):
                    continue
                if not overlap and _in_maintenance(topology, workload, kind.root, root, window):
                    continue
                break
            else:
                raise FaultSpecError(f"no free place for another {kind_name} on this cluster in this time")
            fault = Fault(
                fault_id=f"f{len(faults):04d}-{kind_name}",
                kind=kind_name,
                root=root,
                root_index=topology.ids[_bucket(kind.root)].index(root),
                onset=round(onset, 3),
                end=round(end, 3),
                precursor_start=None if precursor is None else round(precursor, 3),
                severity=float(rng.uniform(*severity)),
                params={"u": float(rng.uniform(0, 1)), "v": float(rng.uniform(0, 1))},
            )
            busy += [(p, window[0], window[1]) for p in places]
            faults.append(fault)
            if kind.kills_job:
                for j, hit in _jobs_touched(topology, workload, kind.root, root, onset, end):
                    doomed[j] = min(hit, doomed.get(j, hit))
    faults.sort(key=lambda f: (f.onset, f.fault_id))
    return faults


def _bucket(kind: str) -> str:
    return "switch" if kind in ("leaf", "spine") else kind


def _places(topology: Topology, root_kind: str, root: str) -> list[str]:
    """The node or switch (and rack) a fault occupies, for keeping faults apart."""
    if root_kind in ("leaf", "spine"):
        return [root]
    if root_kind == "cooling":
        rack = str(topology.attrs[root]["rack"])
        rack_index = topology.ids["rack"].index(rack)
        nodes = np.flatnonzero(topology.node_rack == rack_index)
        return [rack, *(topology.ids["node"][n] for n in nodes.tolist())]
    node = root if root_kind == "node" else str(topology.attrs[root]["node"])
    places = [node]
    if root_kind in ("nic", "optic"):
        nic = root if root_kind == "nic" else str(topology.attrs[root]["nic"])
        n = topology.ids["nic"].index(nic)
        if topology.nic_switch[n] >= 0:
            places.append(topology.switches[int(topology.nic_switch[n])])
    return places


def _needs_a_job(kind: str) -> bool:
    return registry.KINDS[kind].under_load


def _node_of(topology: Topology, root_kind: str, root: str) -> int | None:
    if root_kind == "node":
        return topology.ids["node"].index(root)
    if root_kind in ("gpu", "nic", "optic", "psu"):
        return topology.ids["node"].index(str(topology.attrs[root]["node"]))
    return None


def _runs_job(
    topology: Topology, workload: Workload, root_kind: str, root: str, t: float, end: float, doomed: dict[int, float]
) -> bool:
    """The root's node runs a multi-node job from t until the fault ends, which no other fault
    kills first."""
    node = _node_of(topology, root_kind, root)
    if node is None:
        return True
    # a GPU's own job (jobs may share a node); anything else of a node: the node's job
    j = int(workload.gpu_job(t)[topology.ids["gpu"].index(root)] if root_kind == "gpu" else workload.node_job(t)[node])
    return j >= 0 and workload.jobs[j].end > end and len(workload.jobs[j].nodes) >= 2 and doomed.get(j, end) >= end


def _jobs_touched(
    topology: Topology, workload: Workload, root_kind: str, root: str, onset: float, end: float
) -> list[tuple[int, float]]:
    """Jobs a job-killing fault will kill, and when: those on its nodes at onset, and those the
    scheduler starts there while it lasts (the node is broken, so they die too)."""
    if root_kind == "leaf":
        nodes = np.unique(topology.nic_node[topology.nic_switch == topology.switches.index(root)])
    else:
        node = _node_of(topology, root_kind, root)
        nodes = np.array([] if node is None else [node], dtype=np.int64)
    return [
        (j, max(onset, job.start))
        for j, job in enumerate(workload.jobs)
        if job.start < end and job.end > onset and np.isin(job.nodes, nodes).any()
    ]


def _in_maintenance(
    topology: Topology, workload: Workload, root_kind: str, root: str, window: tuple[float, float]
) -> bool:
    node = _node_of(topology, root_kind, root)
    if node is None:
        return False
    return any(node in m.nodes and m.start < window[1] and window[0] < m.end for m in workload.maintenance)
