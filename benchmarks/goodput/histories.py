"""The histories the goodput bench acts on: each generated history replayed once through the
pipeline, with what the acting loops were told recorded on a tape (`Tape`), and what the cost
model reads from the generator (its truth, its jobs and their checkpoints)."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast


@dataclass
class JobTimes:
    """A job of the generated workload, as the cost model reads it."""

    nodes: frozenset[str]
    gpus: int
    start: float
    end: float
    period: float
    phase: float
    limit_end: float = math.inf  # when the scheduler ends it at the latest (its time limit)

    def last_checkpoint(self, t: float, write_s: float) -> float:
        """When the job's last checkpoint before t completed (its start, if none did)."""
        k = math.floor((t - self.start - self.phase - write_s) / self.period)
        return self.start + self.phase + k * self.period + write_s if k >= 0 else self.start


def _jobs(workload: Any, node_ids: list[str], gpus_per_node: int) -> list[JobTimes]:
    out = []
    for j in workload.jobs:
        nodes = frozenset(node_ids[int(n)] for n in j.nodes)
        gpus = len(j.gpus) if j.gpus is not None else gpus_per_node * len(nodes)
        out.append(JobTimes(nodes, gpus, j.start, j.end, j.checkpoint_period, j.checkpoint_phase, j.limit_end))
    return out


@dataclass
class Tape:
    """What the pipeline told the acting loops over one generated history, in order (each tick's
    job utilisation, then its incident states), with what the cost model reads from the
    generator: the acting loops' inputs do not depend on what they do (the replay's telemetry
    does not react to a drain), so every mode is run on the same tape, one after the other."""

    seed: int
    calls: list[tuple[str, float, Any]]
    truth: list[dict[str, Any]]
    jobs: list[JobTimes]
    job_ids: list[str]
    t_end: float
    per_node: int
    topology: dict[str, Any]
    write_s: float


class _Recording:
    """Stands where an acting loop would (Pipeline.act_on) and writes down what it is told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, Any]] = []

    def restore(self, t: float) -> None:
        pass

    def tick(self, t: float, utilisation: dict[str, float]) -> None:
        self.calls.append(("tick", t, dict(utilisation)))

    def offer(self, states: list[bytes] | list[dict[str, Any]], t: float) -> None:
        if states:
            self.calls.append(("offer", t, [json.loads(s) if isinstance(s, bytes | str) else s for s in states]))


EMISSION_FIELDS = ("threshold", "thresholds", "persist_rounds", "emit_within_s", "every_ticks", "warmup_s", "raise_by")


def _predictor_tag() -> str:
    """The default model and its emission settings, in the tape's name: the tape holds the
    predictions they made, so another model or setting records again (it reused a stale tape)."""
    from dataclasses import fields

    from aiops.default_model import DEFAULT_TRAINING
    from detectors.predict.model import fingerprint
    from detectors.predict.online import OnlinePredictor

    online = OnlinePredictor(cast(Any, None))
    settings = {f.name: getattr(online, f.name) for f in fields(online) if f.name in EMISSION_FIELDS}
    raw = json.dumps({"model": fingerprint(**DEFAULT_TRAINING), **settings}, sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:10]


def record(seed: int, args: argparse.Namespace, on_tick: Callable[[], None]) -> Tape:
    """One generated history through the pipeline, frames in memory (the line protocol adds
    nothing here and a week of it would not fit on disk). The scheduler's news comes as it would
    live: jobs start as planned, and end when they end (a fault that kills a job ends it early).
    Kept under `--cache` (a pickle of this module's own records) so that a change to the acting
    side reruns in seconds."""
    name = f"tape-{seed}-{args.gpus}-{args.hours:g}-{args.interval:g}-{args.faults or 'rate'}-{_predictor_tag()}"
    cache = Path(args.cache) / f"{name}.pickle" if args.cache else None
    if cache is not None and cache.exists():
        with cache.open("rb") as f:
            tape: Tape = pickle.load(f)  # written by this function, in the user's cache
        if tape.jobs and "limit_end" not in vars(tape.jobs[0]):  # recorded before jobs said their limits
            _add_limits(tape, seed, args)
        return tape
    from aiops.default_model import load_or_train_default
    from aiops.pipeline import Pipeline
    from detectors.detect_loop import DetectLoop
    from detectors.predict.online import OnlinePredictor
    from rca.graph import TopologyGraph
    from telemetry_gen.generator import GenConfig, Generation
    from telemetry_gen.workload import CHECKPOINT_S

    gen = Generation(GenConfig(gpus=args.gpus, hours=args.hours, interval=args.interval, seed=seed, faults=args.faults))
    graph = TopologyGraph.from_json(gen.topology.to_json())
    node_ids = list(gen.topology.ids["node"])
    told: set[str] = set()
    events = [e for e in gen.events() if e["type"] != "job_end"]
    pipeline = Pipeline(graph, args.interval, events, OnlinePredictor(load_or_train_default()))
    recording = _Recording()
    pipeline.act_on(cast(Any, recording))
    detect = pipeline.detect
    assert isinstance(detect, DetectLoop)  # the pipeline detects here
    for tick in gen.ticks():
        t = tick.time_ns / 1e9
        ended = [j for j in gen.workload.jobs if j.end <= t and j.id not in told]
        if ended:
            told |= {j.id for j in ended}
            pipeline.add_events(
                [{"time": j.end, "type": "job_end", "job": j.id, "reason": j.end_reason} for j in ended]
            )
        detect.analyse(t, {f.measurement: f for f in tick.frames})
        on_tick()
    pipeline.take()
    per_node = gen.topology.gpus // max(len(node_ids), 1)
    tape = Tape(
        seed,
        recording.calls,
        [dict(f) for f in gen.truth()],
        _jobs(gen.workload, node_ids, per_node),
        [str(j.id) for j in gen.workload.jobs],
        gen.workload.t_end,
        per_node,
        json.loads(json.dumps(gen.topology.to_json())),
        CHECKPOINT_S,
    )
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        with cache.with_suffix(".tmp").open("wb") as out:
            pickle.dump(tape, out)
        cache.with_suffix(".tmp").replace(cache)
    return tape


def _add_limits(tape: Tape, seed: int, args: argparse.Namespace) -> None:
    """The time limits of a tape's jobs, from the same history planned again (the workload is
    planned before anything runs; only ends move while it runs)."""
    from telemetry_gen.generator import GenConfig, Generation

    gen = Generation(GenConfig(gpus=args.gpus, hours=args.hours, interval=args.interval, seed=seed, faults=args.faults))
    limits = {str(j.id): j.limit_end for j in gen.workload.jobs}
    for job_id, job in zip(tape.job_ids, tape.jobs, strict=True):
        job.limit_end = limits[job_id]


__all__ = ["JobTimes", "Tape", "record"]
