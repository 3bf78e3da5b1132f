"""Putting a synthetic cluster together: topology, workload, faults, metric models, the
collectors that encode it, and the outputs (topology.json, telemetry.lp, events.jsonl,
truth.jsonl, meta.json).

Everything random is drawn from generators seeded by (seed, purpose), so the same arguments and
seed give byte-identical outputs, and changing one purpose's draws does not shift another's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from telemetry_gen.collector import Collector, Encoded
from telemetry_gen.effects import affected_entities, jobs_at
from telemetry_gen.faults import Fault, default_counts, parse_spec, schedule
from telemetry_gen.realism import LEVELS, SCALE, collector_settings, rates_table
from telemetry_gen.simulate import T0, ClusterSim, Tick
from telemetry_gen.topology import Topology, build
from telemetry_gen.workload import HOUR, Workload

COLLECTOR_OPTIONS = ("clock_offset_s", "jitter_s", "truncate_s", "job_tags", "single_field")
_COLLECTOR_CLEAN: dict[str, float | bool] = {
    "clock_offset_s": 0.0,
    "jitter_s": 0.0,
    "truncate_s": False,
    "job_tags": True,
    "single_field": False,
}


@dataclass(frozen=True, slots=True)
class GenConfig:
    """What to simulate, and how the collectors encode it.

    `realism` is the healthy fleet's everyday noise (telemetry_gen/realism.py): "typical" (the
    default) and "harsh" add it, "clean" adds none and stays for unit tests of exact fault
    signatures. The last five fields model the collector, not the cluster
    (telemetry_gen/collector.py): they change only the line protocol that write_folder and the
    Kafka emitters send (timestamps, tags, line splitting), never the physics, faults, truth or
    events, nor the frames of `ticks()`. None takes the realism level's (clean: all off).
    """

    gpus: int = 1024
    topology: str = "fat-tree"
    hours: float = 6.0
    interval: float = 10.0
    seed: int = 0
    faults: str | None = None  # None: the default published rate; "" : none at all
    maintenance_per_day: float = 2.0
    realism: str = "typical"
    # "nodes": jobs hold whole nodes; "gpus": jobs of any GPU count, several sharing a node
    job_shapes: str = "nodes"
    # whether the events name the GPU indices such jobs hold (Slurm's gres_detail) or only their
    # nodes (a scheduler, or a history, that says no more)
    schedule_gpu_indices: bool = True
    # event time of the first tick: every run starts at T0 unless asked (a history that ends now,
    # for dashboards shown over "the last hours"); the physics is the same at any start
    start: float = T0
    # Each host's clock is off by a constant drawn uniformly from [0, clock_offset_s] seconds.
    clock_offset_s: float | None = None
    # Each host's samples of one tick are stamped up to jitter_s seconds late (uniform, per tick).
    jitter_s: float | None = None
    # Telegraf's precision = "1s": timestamps truncated to whole seconds.
    truncate_s: bool | None = None
    # False: gpu lines without the `job` tag, as a stock dcgm-exporter sends them.
    job_tags: bool | None = None
    # True: one line per sample (Telegraf's prometheus input, metric_version = 2).
    single_field: bool | None = None

    def collector(self) -> dict[str, float | bool]:
        """The collector options in force: the realism level's, overridden by those given."""
        base = {**_COLLECTOR_CLEAN, **collector_settings(self.realism)}
        given = {name: getattr(self, name) for name in COLLECTOR_OPTIONS if getattr(self, name) is not None}
        return {**base, **given}


class Generation:
    """One generated cluster history. Iterate `ticks()` once; truth and events are final after."""

    def __init__(self, config: GenConfig) -> None:
        if config.interval <= 0 or config.hours <= 0:
            raise ValueError("--interval and --hours must be positive")
        if config.realism not in LEVELS:
            raise ValueError(f"--realism must be one of {', '.join(LEVELS)}, got {config.realism!r}")
        self.config = config
        self.topology: Topology = build(config.topology, config.gpus)
        t_end = config.start + config.hours * HOUR
        self.workload = Workload(
            nodes=self.topology.count("node"),
            t0=config.start,
            t_end=t_end,
            rng=np.random.default_rng([config.seed, 1]),
            node_ids=self.topology.ids["node"],
            job_shapes=config.job_shapes,
        )
        self.workload.plan(config.maintenance_per_day)
        fault_rng = np.random.default_rng([config.seed, 4])
        counts = (
            default_counts(self.topology, config.hours, fault_rng)
            if config.faults is None
            else parse_spec(config.faults, self.topology)
        )
        self.faults: list[Fault] = schedule(
            counts, self.topology, self.workload, fault_rng, overlap=config.realism != "clean"
        )
        for fault in self.faults:
            fault.affected = affected_entities(fault, self.topology)
            fault.jobs = jobs_at(fault, self.topology, self.workload)
        self.sim = ClusterSim(
            self.topology, self.workload, self.faults, config.interval, config.seed, realism=config.realism
        )
        # (its options are checked here, so a bad one fails before any output is written)
        options = config.collector()
        self.collector = Collector(
            self.sim,
            config.seed,
            clock_offset_s=float(options["clock_offset_s"]),
            jitter_s=float(options["jitter_s"]),
            truncate_s=bool(options["truncate_s"]),
            job_tags=bool(options["job_tags"]),
            single_field=bool(options["single_field"]),
        )

    def ticks(self) -> Iterator[Tick]:
        """The cluster as simulated: clean frames, whatever the collector options."""
        return self.sim.ticks()

    def lines(self, tick: Tick) -> list[Encoded]:
        """A tick's line protocol as the configured collectors send it."""
        return self.collector.encode(tick)

    def meta(self) -> dict[str, object]:
        """meta.json: the run's settings. start and end are event time in Unix seconds, the
        simulated window [start, end) that the ticks cover; hosts' clocks stamp lines up to
        clock_offset_s + jitter_s later than their tick."""
        c = self.config
        start = self.workload.t0
        return {
            "interval_s": c.interval,
            "start": start,
            "end": start + self.sim.steps * c.interval,
            "ticks": self.sim.steps,
            "seed": c.seed,
            "gpus": c.gpus,
            "topology": c.topology,
            "hours": c.hours,
            "faults": c.faults,
            "maintenance_per_day": c.maintenance_per_day,
            "realism": c.realism,
            "job_shapes": c.job_shapes,
            "schedule_gpu_indices": c.schedule_gpu_indices,
            "realism_rates": {name: rate for name, rate, _ in rates_table()} if c.realism != "clean" else {},
            "realism_scale": SCALE[c.realism],
            "collector": c.collector(),
        }

    def truth(self) -> list[dict[str, object]]:
        return [f.truth() for f in self.faults]

    def events(self) -> list[dict[str, object]]:
        return self.workload.events(gpu_indices=self.config.schedule_gpu_indices)


def write_meta(path: Path, gen: Generation) -> None:
    path.write_text(json.dumps(gen.meta(), indent=2, sort_keys=True) + "\n")


def write_jsonl(path: Path, records: list[dict[str, object]]) -> None:
    with path.open("w") as f:
        for r in records:
            f.write(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n")
