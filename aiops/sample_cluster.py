"""A flat, fault-free cluster tick for benchmarks and the shipped sample.

Every entity of a rail-optimised node (8 GPUs, 4 NVSwitches, 8 NICs with optics, 2 PSUs), its
leaf and spine switches and rack cooling, with plausible levels and noise and counters that grow.
It stands in until the telemetry generator exists; it knows nothing of jobs or faults.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from aiops.catalog import MEASUREMENTS, FieldType, MetricKind
from ingest.frames import Column, Frame

PER_NODE = {"gpu": 8, "nvswitch": 4, "nic": 8, "optic": 8, "node": 1, "psu": 2}
NODES_PER_RACK = 4
NODES_PER_LEAF = 32  # one leaf per rail per 32-node pod

_LEVEL = {
    "°C": 45.0,
    "W": 350.0,
    "MHz": 1800.0,
    "%": 80.0,
    "ratio": 0.6,
    "MiB": 60000.0,
    "dBm": -2.0,
    "mA": 8.0,
    "V": 230.0,
    "rpm": 9000.0,
    "l/min": 30.0,
    "ports": 64.0,
}


def node_ids(gpus: int) -> list[str]:
    return [f"n{i:05d}" for i in range(max(1, gpus // 8))]


def entity_tags(name: str, nodes: list[str]) -> list[dict[str, str]]:
    """Tag sets of every entity of one measurement."""
    racks = [f"rack{i // NODES_PER_RACK:04d}" for i in range(len(nodes))]
    pods = max(1, -(-len(nodes) // NODES_PER_LEAF))
    leaves = [f"leaf-p{p}-r{r}" for p in range(pods) for r in range(8)]
    spines = [f"spine-{s}" for s in range(max(1, len(leaves) // 4))]
    rows: list[dict[str, str]] = []
    if name in PER_NODE:
        for node, rack in zip(nodes, racks, strict=True):
            for i in range(PER_NODE[name]):
                tags = {"node": node}
                if name == "gpu":
                    tags |= {"gpu": f"{node}-gpu{i}", "job": "job-0001"}
                elif name == "nvswitch":
                    tags |= {"nvswitch": f"{node}-nvsw{i}"}
                elif name == "nic":
                    tags |= {"nic": f"{node}-nic{i}", "rail": str(i)}
                elif name == "optic":
                    tags |= {"optic": f"{node}-nic{i}-optic", "nic": f"{node}-nic{i}"}
                elif name == "node":
                    tags |= {"rack": rack}
                elif name == "psu":
                    tags |= {"psu": f"{node}-psu{i}"}
                rows.append(tags)
    elif name == "switch":
        rows = [{"switch": s, "role": s.split("-")[0]} for s in leaves + spines]
    elif name == "switch_port":
        rows = [
            {"port": f"{leaf}:p{p}", "switch": leaf, "peer": f"{nodes[p % len(nodes)]}-nic{leaf[-1]}"}
            for leaf in leaves
            for p in range(min(NODES_PER_LEAF, len(nodes)))
        ]
    elif name == "cooling":
        rows = [{"cooling": f"{rack}-cdu", "rack": rack} for rack in dict.fromkeys(racks)]
    return rows


class FlatCluster:
    """Ticks of a healthy cluster: same entities every tick, deterministic for a seed."""

    def __init__(self, gpus: int, seed: int = 0) -> None:
        nodes = node_ids(gpus)
        self._rng = np.random.default_rng(seed)
        self._tags = {m.name: entity_tags(m.name, nodes) for m in MEASUREMENTS}
        self._tag_arrays = {
            m.name: {k: np.array([r.get(k, "") for r in self._tags[m.name]], dtype=object) for k in m.tag_keys}
            for m in MEASUREMENTS
        }
        self._tick = 0

    @property
    def entity_count(self) -> int:
        return sum(len(v) for v in self._tags.values())

    def tick(self, time_ns: int) -> list[Frame]:
        self._tick += 1
        frames: list[Frame] = []
        for m in MEASUREMENTS:
            n = len(self._tags[m.name])
            if n == 0:
                continue
            fields: dict[str, Column] = {}
            for metric in m.metrics:
                values: NDArray[np.float64]
                if metric.kind is MetricKind.COUNTER:
                    values = np.full(n, 1000.0 * self._tick) + np.arange(n)
                elif metric.kind is MetricKind.STATE:
                    values = np.ones(n) if metric.name in ("link_state", "status") else np.zeros(n)
                else:
                    level = _LEVEL.get(metric.unit, 10.0)
                    values = level + self._rng.normal(0, abs(level) * 0.02, n)
                if metric.type is FieldType.FLOAT:
                    fields[metric.name] = Column.of(FieldType.FLOAT, np.round(values, 3))
                else:
                    fields[metric.name] = Column.of(metric.type, values.astype(np.int64))
            frames.append(Frame(m.name, np.full(n, time_ns, dtype=np.int64), dict(self._tag_arrays[m.name]), fields))
        return frames
