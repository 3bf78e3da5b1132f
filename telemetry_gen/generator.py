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

from telemetry_gen.effects import affected_entities, jobs_at
from telemetry_gen.faults import Fault, default_counts, parse_spec, schedule
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


def write_jsonl(path: Path, records: list[dict[str, object]]) -> None:
    with path.open("w") as f:
        for r in records:
            f.write(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n")
