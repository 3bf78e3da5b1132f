"""`aiops bench goodput`: what acting is worth, in GPU-hours, on generated histories.

Each history (a generated cluster at the published Llama 3 fault rate, with precursors) is
replayed once through the pipeline with two acting loops side by side, each with its own audit
log and an executor that records what it was asked to do (the replay's telemetry does not react
to a drain: the generator's scheduler keeps placing jobs; the cost model below accounts for it):

- none: no action (today: a person drains a failed node by hand, `--human-s` after the failure);
- failures: drain a node once its incident opens (what a per-node system does);
- predictions: that, and drain a node predicted to fail right after its job's next checkpoint.

The cost model (stated, not measured; the constants are arguments):
- a job interrupted at time τ loses its GPUs × (τ − its last completed checkpoint + the restart,
  `--restart-s`); the checkpoint times are the generator's own (truth side), not the detector's;
- a failure that kills its job (the registry's kills_job) interrupts the jobs on the node at
  onset, unless the node was drained before; while the failed node stays in service, a restarted
  job that lands back on it fails again after its restart: one more restart per `--restart-s`
  until the node is drained (by the service, or by a person after `--human-s` in "none");
- a drain interrupts the jobs on the node at the time it is done (at a checkpoint: the restart
  only); a drain with no fault on the node within `--horizon-h` after it is wrong, and counted,
  and its node's GPUs are lost capacity until it is resumed (its warning resolving) or the
  history ends;
- faults rooted outside a node (a switch, a link, cooling) cost the same in every mode here.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from act.audit import AuditLog, Row
from act.executors import Executor
from act.policy import ActConfig, parse
from aiops.acting import act_loop
from aiops.progress import Progress
from vocab import registry

MODES = ("none", "failures", "predictions")
# failures that kill their job and sit in a node (a drain is the remedy; a leaf is routed around)
IN_A_NODE = {"gpu", "node", "psu", "nic", "optic", "nvswitch"}
FAILURE_KINDS = sorted(k for k, v in registry.KINDS.items() if v.kills_job and v.root in IN_A_NODE)


def policies(mode: str, max_nodes: int, max_fraction: float) -> ActConfig:
    rules: list[dict[str, Any]] = [
        {
            "name": "drain-failed",
            "match": {"source": "incident", "kinds": FAILURE_KINDS},
            "action": {"type": "drain"},
            "execute": True,
        }
    ]
    if mode == "predictions":
        rules.append(
            {
                "name": "drain-predicted",
                # the shipped policy file's (config/actions.yml), set before any goodput was measured
                "match": {"source": "prediction", "min_probability": 0.7},
                "action": {"type": "drain", "when": "checkpoint", "max_job_gpus": 1024},
                "execute": True,
            }
        )
    return parse(
        {"dry_run": False, "breaker": {"max_nodes": max_nodes, "max_fraction": max_fraction}, "policies": rules}
    )


class _Recorder:
    def run(self, row: Row) -> str:
        return "recorded"

    def confirmed(self, row: Row) -> bool | None:
        return True


@dataclass
class ModeCost:
    gpu_s: float = 0.0
    interruptions: int = 0
    nodes_out: set[str] = field(default_factory=set)
    drains: int = 0
    wrong: int = 0
    wrong_gpu_s: float = 0.0
    blocked: int = 0


@dataclass
class JobTimes:
    """A job of the generated workload, as the cost model reads it."""

    nodes: frozenset[str]
    gpus: int
    start: float
    end: float
    period: float
    phase: float

    def last_checkpoint(self, t: float, write_s: float) -> float:
        """When the job's last checkpoint before t completed (its start, if none did)."""
        k = math.floor((t - self.start - self.phase - write_s) / self.period)
        return self.start + self.phase + k * self.period + write_s if k >= 0 else self.start


def _jobs(workload: Any, node_ids: list[str], gpus_per_node: int) -> list[JobTimes]:
    out = []
    for j in workload.jobs:
        nodes = frozenset(node_ids[int(n)] for n in j.nodes)
        gpus = len(j.gpus) if j.gpus is not None else gpus_per_node * len(nodes)
        out.append(JobTimes(nodes, gpus, j.start, j.end, j.checkpoint_period, j.checkpoint_phase))
    return out


def _on(jobs: list[JobTimes], node: str, t: float) -> list[JobTimes]:
    return [j for j in jobs if node in j.nodes and j.start <= t < j.end]


def cost_of(
    mode: str,
    truth: list[dict[str, Any]],
    rows: list[Row],
    jobs: list[JobTimes],
    node_of: Callable[[str], str | None],
    restart_s: float,
    human_s: float,
    horizon_s: float,
    write_s: float,
    gpus_per_node: int = 8,
    t_end: float = math.inf,
) -> ModeCost:
    cost = ModeCost()
    resumed = sorted((r.acted_at or r.event_time, r.target) for r in rows if r.action == "resume" and r.state == "done")
    done = sorted((r for r in rows if r.action == "drain" and r.state == "done"), key=lambda r: r.acted_at or 0.0)
    cost.blocked = sum(1 for r in rows if r.decision == "blocked")

    def interrupt(t: float, on: list[JobTimes]) -> None:
        for j in on:
            cost.gpu_s += j.gpus * (t - j.last_checkpoint(t, write_s) + restart_s)
            cost.interruptions += 1

    faults_by_node: dict[str, list[dict[str, Any]]] = {}
    for f in truth:
        node = node_of(f["root"])
        if node is not None:
            faults_by_node.setdefault(node, []).append(f)
    drained_at: dict[str, list[float]] = {}
    for r in done:
        at = r.acted_at if r.acted_at is not None else r.event_time
        drained_at.setdefault(r.target, []).append(at)
        cost.drains += 1
        cost.nodes_out.add(r.target)
        failed = [
            f
            for f in faults_by_node.get(r.target, [])
            if registry.KINDS[f["kind"]].kills_job and f["onset"] <= at <= f["end"]
        ]
        if not failed:  # after a failure its jobs are dead already: draining interrupts nothing more
            interrupt(at, _on(jobs, r.target, at))
        upcoming = [f for f in faults_by_node.get(r.target, []) if at - 6 * 3600 <= f["onset"] <= at + horizon_s]
        if not upcoming:
            # wrong: the jobs it interrupted, and the node's GPUs out of service for nothing until
            # it is resumed (the warning's horizon passing resolves it) or the history ends
            back = next((t for t, node in resumed if node == r.target and t >= at), t_end)
            interrupted = sum(
                j.gpus * (at - j.last_checkpoint(at, write_s) + restart_s) for j in _on(jobs, r.target, at)
            )
            idle = gpus_per_node * (min(back, t_end) - at)
            cost.wrong += 1
            cost.wrong_gpu_s += interrupted + idle
            cost.gpu_s += idle
    for f in truth:
        if not registry.KINDS[f["kind"]].kills_job:
            continue
        onset, node = float(f["onset"]), node_of(f["root"])
        on = _on(jobs, node, onset) if node is not None else []
        if node is None:  # a switch, a link, cooling: no node drain helps; the same in every mode
            continue
        before = [t for t in drained_at.get(node, []) if onset - 24 * 3600 <= t <= onset]
        if before:
            continue  # drained in time: no job was on it when it failed
        interrupt(onset, on)
        after = [t for t in drained_at.get(node, []) if t > onset]
        out_at = after[0] if after and mode != "none" else onset + human_s
        retries = math.floor(max(out_at - onset - restart_s, 0.0) / restart_s) if on else 0
        cost.gpu_s += retries * sum(j.gpus for j in on) * restart_s
        cost.interruptions += retries * len(on)
    return cost


def _history(
    seed: int, args: argparse.Namespace, work: Path, on_tick: Callable[[], None]
) -> tuple[dict[str, ModeCost], int]:
    """One generated history through the pipeline, frames in memory (the line protocol adds
    nothing here and a week of it would not fit on disk), with both acting loops; its cost per
    mode. The scheduler's news comes as it would live: jobs start as planned, and end when they
    end (a fault that kills a job ends it early)."""
    from aiops.default_model import load_or_train_default
    from aiops.runner import Pipeline
    from detectors.predict.online import OnlinePredictor
    from detectors.runner import DetectLoop
    from rca.graph import TopologyGraph
    from telemetry_gen.generator import GenConfig, Generation
    from telemetry_gen.workload import CHECKPOINT_S

    gen = Generation(GenConfig(gpus=args.gpus, hours=args.hours, interval=args.interval, seed=seed))
    graph = TopologyGraph.from_json(gen.topology.to_json())
    node_ids = list(gen.topology.ids["node"])
    told: set[str] = set()
    events = [e for e in gen.events() if e["type"] != "job_end"]
    pipeline = Pipeline(graph, args.interval, events, OnlinePredictor(load_or_train_default()))
    audits = {m: work / f"{m}-{seed}.sqlite" for m in MODES[1:]}
    for mode in MODES[1:]:
        recorder = _Recorder()
        executors: dict[str, Executor] = {"drain": recorder, "resume": recorder}
        config = policies(mode, args.max_nodes, args.max_fraction)
        pipeline.act_on(act_loop(config, graph, audits[mode], pipeline.page, executors, pipeline.jobs_on))
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
    jobs = _jobs(gen.workload, node_ids, per_node)
    t_end = gen.workload.t_end
    truth: list[dict[str, Any]] = [dict(f) for f in gen.truth()]

    def node_of(entity: str) -> str | None:
        return graph.node_of(entity) if entity in graph else None

    costs = {}
    for mode in MODES:
        rows = AuditLog(audits[mode]).rows() if mode in audits else []
        horizon = args.horizon_h * 3600
        costs[mode] = cost_of(
            mode, truth, rows, jobs, node_of, args.restart_s, args.human_s, horizon, CHECKPOINT_S, per_node, t_end
        )
    return costs, len(truth)


def bench_goodput(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    totals = {m: ModeCost() for m in MODES}
    gpu_days = 0.0
    faults = 0
    with (
        tempfile.TemporaryDirectory(prefix="aiops-goodput-") as work,
        Progress(
            len(args.seeds) * round(args.hours * 3600 / args.interval), "aiops bench goodput", "ticks"
        ) as progress,
    ):
        for seed in args.seeds:
            costs, n = _history(seed, args, Path(work), progress.advance)
            faults += n
            for mode, c in costs.items():
                t = totals[mode]
                t.gpu_s += c.gpu_s
                t.interruptions += c.interruptions
                t.nodes_out |= {f"{seed}:{node}" for node in c.nodes_out}
                t.drains += c.drains
                t.wrong += c.wrong
                t.wrong_gpu_s += c.wrong_gpu_s
                t.blocked += c.blocked
            gpu_days += args.gpus * args.hours / 24
    per = 1000.0 / gpu_days
    table = Table(
        title=f"aiops bench goodput: {len(args.seeds)} histories of {args.gpus:,} GPUs × {args.hours:g} h "
        f"at {args.interval:g} s, {faults} faults at the Llama 3 rate ({gpu_days:,.0f} GPU-days)",
        caption=(
            f"GPU-hours lost per 1,000 GPU-days: each interrupted job's GPUs × (time since its last checkpoint + "
            f"{args.restart_s:g} s restart); none: a person drains a failed node {args.human_s:g} s after; "
            f"breaker {args.max_nodes} nodes / {args.max_fraction:.0%} per hour"
        ),
    )
    for col in (
        "mode",
        "GPU-h lost /1k GPU-days",
        "saved",
        "jobs interrupted /1k GPU-days",
        "nodes drained",
        "wrong drains",
        "wrong GPU-h",
        "blocked by breaker",
    ):
        table.add_column(col, justify="right")
    base = totals["none"].gpu_s
    report: dict[str, Any] = {"gpu_days": gpu_days, "faults": faults, "modes": {}}
    for mode in MODES:
        t = totals[mode]
        saved = 1 - t.gpu_s / base if base else 0.0
        table.add_row(
            mode,
            f"{t.gpu_s / 3600 * per:,.1f}",
            f"{saved:.0%}" if mode != "none" else "",
            f"{t.interruptions * per:,.1f}",
            f"{len(t.nodes_out)}",
            f"{t.wrong}",
            f"{t.wrong_gpu_s / 3600 * per:,.1f}",
            f"{t.blocked}",
        )
        report["modes"][mode] = {
            "gpu_hours_per_1k_gpu_days": t.gpu_s / 3600 * per,
            "saved": saved,
            "interruptions": t.interruptions,
            "nodes_drained": len(t.nodes_out),
            "wrong_drains": t.wrong,
            "blocked": t.blocked,
        }
    console.print(table)
    return report


__all__ = ["bench_goodput", "cost_of", "policies"]
