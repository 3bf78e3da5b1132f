"""`aiops bench goodput`: what acting is worth, in GPU-hours, on generated histories.

Each history (a generated cluster at the published Llama 3 fault rate, with precursors) is
replayed once through the pipeline with two acting loops side by side, each with its own audit
log and an executor that records what it was asked to do (the replay's telemetry does not react
to a drain: the generator's scheduler keeps placing jobs; the cost model below accounts for it):

- none: no action (today: a person drains a failed node by hand, `--human-s` after the failure);
- failures: drain a node once its incident opens (what a per-node system does);
- predictions: that, and drain a node predicted to fail right after its job's next checkpoint;
- validation: that, with the remediation machine (the ladder, health checks that pass as the
  generator's truth says), and parts that degrade without stopping the job and that a reset or
  reboot puts right remediated once their node's jobs end (`when: job_end`).

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
- a node put back in service with a job-killing fault that no step put right (its incident
  resolved or its warning lapsed, and nothing checked it) fails the next job that lands on it:
  a restart of that job's GPUs (TruthCheck's truth: a fault lasts until a step that fixes its
  kind, or for good);
- faults rooted outside a node (a switch, a link, cooling) cost the same in every mode here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import pickle
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from rich.console import Console
from rich.table import Table

from act.audit import RemediationRecord, Row
from act.costs import drain_break_even
from act.executors import Executor
from act.policy import ActConfig, parse
from act.remediation import CheckResult
from aiops.acting import act_loop
from aiops.progress_bar import Progress
from vocab import registry

MODES = ("none", "failures", "predictions", "validation")
# failures that kill their job and sit in a node (a drain is the remedy; a leaf is routed around)
IN_A_NODE = {"gpu", "node", "psu", "nic", "optic", "nvswitch"}
FAILURE_KINDS = sorted(k for k, v in registry.KINDS.items() if v.kills_job and v.root in IN_A_NODE)


# the shipped policy's (config/actions.yml): a larger job is not killed on a prediction; its node
# is cordoned and the drain waits for a person (act.planner), so the job's next restart leaves it out
PREDICTED_MAX_JOB_GPUS = 1024
# the predicted kinds a drain can pay for (those that kill their job: act/costs.py), and the
# smallest job's break-even with the remediation loop (a wrong drain's node out for a check)
PREDICTED_KILLING = sorted(k for k, v in registry.KINDS.items() if v.precursor and drain_break_even(k, 8) < 1.0)
DRAIN_AT = round(drain_break_even(PREDICTED_KILLING[0], 8), 2)


def policies(mode: str, max_nodes: int, max_fraction: float) -> ActConfig:
    rules: list[dict[str, Any]] = [
        {
            "name": "drain-failed",
            "match": {"source": "incident", "kinds": FAILURE_KINDS},
            "action": {"type": "drain"},
            "execute": True,
        }
    ]
    if mode in ("predictions", "validation"):
        # the threshold follows the cost model (act/costs.py): a kind that kills its job is worth
        # a drain at the next checkpoint above the break-even of the smallest job (8 GPUs: 0.57); one
        # that does not (a thermal slowdown, a cooling loop) saves nothing the model counts by a
        # drain, so its warnings are watched, not acted on
        rules.append(
            {
                "name": "drain-predicted",
                "match": {"source": "prediction", "kinds": PREDICTED_KILLING, "min_probability": DRAIN_AT},
                "action": {"type": "drain", "when": "checkpoint", "max_job_gpus": PREDICTED_MAX_JOB_GPUS},
                "execute": True,
            }
        )
    if mode == "validation":
        rules.append(
            {
                "name": "remediate-degraded",
                # parts that degrade without stopping the job and that a reset or reboot puts right:
                # cordoned now, remediated once the node's jobs end (no restart for them)
                "match": {"source": "incident", "kinds": DEGRADED_FIXABLE},
                "action": {"type": "drain", "when": "job_end", "max_wait_s": 24 * 3600.0},
                "execute": True,
            }
        )
    config: dict[str, Any] = {
        "dry_run": False,
        "breaker": {"max_nodes": max_nodes, "max_fraction": max_fraction},
        "policies": rules,
    }
    if mode == "validation":  # the checks are the generator's truth (TruthCheck), set in run_modes
        config["remediation"] = {"execute": True, "checks": [["truth"]], "reboot_wait_s": REBOOT_S}
    return parse(config)


# What each step of the remediation ladder takes, for the clocks (stated operational figures,
# not measured here): a reboot of an HGX node 10 min (POST, BMC, driver, fabric manager; the
# machine waits `reboot_wait_s` for it), a GPU reset 1 min (nvidia-smi -r once the GPU is idle),
# a health check 5 min (dcgmi diag -r 2, "medium", minutes on 8 GPUs, then an NCCL all-reduce)
REBOOT_S, RESET_S, CHECK_S = 600.0, 60.0, 300.0
# What puts each kind right, as the generator's truth stands for it (a health check fails from
# the fault's precursor, or its onset, until it is put right): read from NVIDIA's Xid catalog's
# immediate action for the Xid each kind shows (vocab/xid_catalog.tsv): Xid 48/64 (HBM) and 74
# (NVLink), 119 (GSP) RESET_GPU; Xid 79 (off the bus) RESTART_BM; Xid 45 (fabric manager) a
# restart of the fabric manager, which a reboot does. A reboot also does what a reset does.
# Anything else (a PSU, an optic, a cable, a thermal interface) is hardware: a person.
RESET_FIXES = frozenset({"gpu_hbm_ecc", "gpu_row_remap_pending", "gpu_nvlink", "gpu_nvlink_down", "gpu_fault"})
REBOOT_FIXES = RESET_FIXES | {"gpu_fell_off_bus", "gpu_lost", "nvswitch_fabric_manager"}
DEGRADED_FIXABLE = sorted(
    k for k in REBOOT_FIXES if not registry.KINDS[k].kills_job and registry.KINDS[k].root in IN_A_NODE
)


class TruthCheck:
    """A health check that passes or fails as the generator's truth says: a node fails from the
    start (precursor or onset) of a fault in it until a step that fixes the fault's kind was done
    on it after that start, or, for a kind no step fixes, for good."""

    def __init__(self, faults: list[dict[str, Any]], node_of: Callable[[str], str | None]) -> None:
        self.faults: dict[str, list[dict[str, Any]]] = {}
        for f in faults:
            node = node_of(f["root"])
            if node is not None:
                self.faults.setdefault(node, []).append(f)
        self.done: dict[str, list[tuple[float, str]]] = {}  # node -> (when, step)
        self.now = 0.0

    @staticmethod
    def start(f: dict[str, Any]) -> float:
        pre = f.get("precursor_start")
        return float(pre) if pre is not None else float(f["onset"])

    @classmethod
    def fixed(cls, f: dict[str, Any], steps: Sequence[tuple[float, str]], by: float) -> bool:
        """Whether a reset or reboot done on the fault's node after its start, by `by`, fixes its kind."""
        return any(
            cls.start(f) <= at <= by and f["kind"] in (RESET_FIXES if step == "reset_gpu" else REBOOT_FIXES)
            for at, step in steps
            if step in ("reset_gpu", "reboot")
        )

    def step(self, node: str, action: str) -> None:
        self.done.setdefault(node, []).append((self.now, action))

    def __call__(self, node: str) -> CheckResult:
        for f in self.faults.get(node, []):
            if self.start(f) > self.now:
                continue
            fixed = self.fixed(f, self.done.get(node, []), self.now)
            if not fixed:
                return CheckResult(False, f"{f['kind']} on {f['root']}")
        return CheckResult(True, "healthy")


class _Recorder:
    """Does nothing but tell the truth's health check which steps were done on which node."""

    def __init__(self, check: TruthCheck | None = None) -> None:
        self.check = check

    def run(self, row: Row) -> str:
        if self.check is not None and row.node is not None:
            self.check.step(row.node, row.action)
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
    returned_broken: int = 0  # nodes put back with a job-killing fault unfixed, that a job then met


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
    records: Sequence[RemediationRecord] = (),
) -> ModeCost:
    """What a mode's actions cost the fleet (the module's cost model). `records`: the remediation
    machine's, whose steps' own time (a check, a reset) a wrongly drained node is also out for."""
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
            back += sum(_steps_s(rec) for rec in records if rec.node == r.target and rec.drained_at == at)
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
    _returned_broken(cost, rows, faults_by_node, jobs, restart_s, t_end)
    return cost


def _returned_broken(
    cost: ModeCost,
    rows: list[Row],
    faults_by_node: dict[str, list[dict[str, Any]]],
    jobs: list[JobTimes],
    restart_s: float,
    t_end: float,
) -> None:
    """A node put back in service with a job-killing fault in it that no step put right (its
    incident resolved, its warning lapsed; nothing checked it) fails the next job that lands on
    it, at that job's start: its GPUs x the restart, once (then it is drained again, and a person
    sees a node that failed twice). The same truth as TruthCheck's: a fault lasts from its start
    until a reset or reboot that fixes its kind, or for good. Meta's "lemon nodes" (Kokolis et
    al., 2024) are this: nodes returned unfixed that fail job after job."""
    steps: dict[str, list[tuple[float, str]]] = {}
    for r in rows:
        if r.action in ("reset_gpu", "reboot") and r.state == "done" and r.node is not None:
            steps.setdefault(r.node, []).append((r.acted_at if r.acted_at is not None else r.event_time, r.action))
    drained: dict[str, list[float]] = {}
    for r in rows:
        if r.action == "drain" and r.state == "done":
            drained.setdefault(r.target, []).append(r.acted_at if r.acted_at is not None else r.event_time)
    charged: set[int] = set()
    for r in rows:
        if r.action != "resume" or r.state != "done":
            continue
        back = r.acted_at if r.acted_at is not None else r.event_time
        broken = [
            f
            for f in faults_by_node.get(r.target, [])
            if registry.KINDS[f["kind"]].kills_job
            and TruthCheck.start(f) <= back
            and not TruthCheck.fixed(f, steps.get(r.target, []), back)
        ]
        # the next job to land on it before it is drained again (a job is charged once)
        again = min((at for at in drained.get(r.target, []) if at > back), default=t_end)
        landing = sorted(
            (j.start, i) for i, j in enumerate(jobs) if r.target in j.nodes and back <= j.start < min(again, t_end)
        )
        if broken and landing and landing[0][1] not in charged:
            charged.add(landing[0][1])
            cost.gpu_s += jobs[landing[0][1]].gpus * restart_s
            cost.interruptions += 1
            cost.returned_broken += 1


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


def run_modes(tape: Tape, args: argparse.Namespace, work: Path) -> dict[str, tuple[list[Row], list[RemediationRecord]]]:
    """Every acting mode over one tape, each with its own audit log; what each planned and did."""
    from rca.graph import TopologyGraph

    graph = TopologyGraph.from_json(tape.topology)

    def node_of(entity: str) -> str | None:
        return graph.node_of(entity) if entity in graph else None

    def jobs_on(node: str, t: float) -> dict[str, int]:
        return {
            i: j.gpus for i, j in zip(tape.job_ids, tape.jobs, strict=True) if node in j.nodes and j.start <= t < j.end
        }

    def job_ends(node: str, t: float) -> dict[str, float]:
        return {
            i: j.limit_end
            for i, j in zip(tape.job_ids, tape.jobs, strict=True)
            if node in j.nodes and j.start <= t < j.end and math.isfinite(j.limit_end)
        }

    out: dict[str, tuple[list[Row], list[RemediationRecord]]] = {"none": ([], [])}
    for mode in MODES[1:]:
        check = TruthCheck(tape.truth, node_of)
        recorder = _Recorder(check)
        executors: dict[str, Executor] = dict.fromkeys(("drain", "resume", "reset_gpu", "reboot", "ticket"), recorder)
        config = policies(mode, args.max_nodes, args.max_fraction)
        path = work / f"{mode}-{tape.seed}.sqlite"
        path.unlink(missing_ok=True)
        loop = act_loop(config, graph, path, lambda message, subject: None, executors, jobs_on, job_ends=job_ends)
        if loop.remediation is not None:
            loop.remediation.checks = [check]
        for what, t, payload in tape.calls:
            check.now = t
            if what == "tick":
                loop.tick(t, payload)
            else:
                loop.offer(payload, t)
        out[mode] = (loop.audit.rows(), loop.audit.remediation_all())
        loop.audit.close()
    return out


@dataclass
class Outcome:
    """One fault in a node, as one mode handled it."""

    kind: str
    kills_job: bool
    ahead: bool  # out of service (or put right) before its onset: the job never met it
    job_back_s: float | None  # onset -> the job running again (with spares), when it was interrupted
    node_back_s: float | None  # onset -> the node back in service, checked
    person_s: float | None  # onset -> a person paged (escalated, or never seen by the service)
    healed: bool  # put right and returned with no person
    big_job_loss_s: float  # what it cost the large job, in the job's wall-clock seconds
    # onset - the first prediction a drain policy acted on for its node (a drain planned, or
    # waiting for a person with the node cordoned), when there was one within the horizon
    warned_s: float | None = None


def _steps_s(rec: RemediationRecord) -> float:
    """The time a remediation's checks and resets take, which the replay's ticks do not pass (a
    reboot's is: the machine waits `reboot_wait_s` for it in event time)."""
    steps = [h.get("step") for h in rec.history]
    return steps.count("check") * CHECK_S + steps.count("reset_gpu") * RESET_S


def _big_ckpt(t: float, t0: float, period: float) -> float:
    return t0 + math.floor((t - t0) / period) * period


def outcomes(
    mode: str,
    truth: list[dict[str, Any]],
    rows: list[Row],
    records: list[RemediationRecord],
    node_of: Callable[[str], str | None],
    t0: float,
    args: argparse.Namespace,
) -> list[Outcome]:
    """Each fault in a node: whether the job met it, when the job ran again and the node came back
    (or a person was called), and what it cost a large synchronous job on the cluster, which
    restarts on spare nodes as soon as the faulty one is out (a 10k-GPU job keeps spares; without
    them it waits for the node's return). The large job checkpoints every `--big-ckpt-s` from
    the history's start and restarts in `--restart-s`."""
    drains: dict[str, list[float]] = {}
    resumes: dict[str, list[float]] = {}
    for r in rows:
        at = r.acted_at if r.acted_at is not None else r.event_time
        if r.state == "done" and r.action == "drain":
            drains.setdefault(r.target, []).append(at)
        elif r.state == "done" and r.action == "resume":
            resumes.setdefault(r.target, []).append(at)
    warned: dict[str, list[float]] = {}
    for r in rows:
        if r.action == "drain" and r.policy == "drain-predicted" and r.decision not in ("blocked", "excluded"):
            warned.setdefault(r.target, []).append(r.event_time)
    out = []
    for f in truth:
        node = node_of(f["root"])
        if node is None:
            continue
        kind, onset, start = f["kind"], float(f["onset"]), TruthCheck.start(f)
        first_warning = min(
            (t for t in warned.get(node, []) if onset - args.horizon_h * 3600 <= t <= onset), default=None
        )
        kills = registry.KINDS[kind].kills_job
        out_before = any(
            d <= onset and not any(d < r <= onset for r in resumes.get(node, [])) for d in drains.get(node, [])
        )
        # the node's round for this fault: drained while it showed, or later for this fault's own
        # kind (a degraded part drained once its job ended, after its symptom quieted)
        mine = [
            rec
            for rec in records
            if rec.node == node
            and rec.drained_at is not None
            and start - 6 * 3600 <= rec.drained_at
            and (rec.drained_at <= float(f["end"]) or rec.kind == kind)
        ]
        rec = mine[0] if mine else None
        extra = _steps_s(rec) if rec is not None else 0.0  # the steps' own time, which the ticks do not pass
        returned = rec is not None and rec.state == "returned" and rec.closed_at is not None
        healed = returned and rec is not None and rec.closed_at is not None and rec.closed_at >= start
        averted = healed and rec is not None and rec.closed_at is not None and rec.closed_at + extra <= onset
        ahead = out_before or averted
        after = [d for d in drains.get(node, []) if d > onset] if mode != "none" else []
        out_at = after[0] if after else onset + args.human_s
        node_back = (rec.closed_at + extra - onset) if healed and rec is not None and rec.closed_at else None
        person = None
        if not healed:
            escalated = rec is not None and rec.state == "escalated" and rec.closed_at is not None
            person = (
                (rec.closed_at + extra - onset)
                if escalated and rec is not None and rec.closed_at
                else (out_at - onset if after else args.human_s)
            )
        if not kills or ahead:
            job_back, loss = None, 0.0  # a drain ahead cost the job its restart: counted with the drains
        else:
            job_back = out_at - onset + args.restart_s
            loss = onset - _big_ckpt(onset, t0, args.big_ckpt_s) + job_back
        out.append(
            Outcome(
                kind,
                kills,
                ahead,
                job_back,
                max(node_back, 0.0) if node_back is not None else None,
                max(person, 0.0) if person is not None else None,
                healed,
                loss,
                onset - first_warning if first_warning is not None else None,
            )
        )
    return out


LLAMA3_RATE = 419 / (54 * 16_384) * 1000  # interruptions per 1,000 GPU-days (Dubey et al. 2024, Table 5)


def big_job_ettr(
    faults: list[Outcome],
    wrong_drains: int,
    gpu_days: float,
    args: argparse.Namespace,
    met: list[Outcome] | None = None,
) -> float:
    """The ETTR of a `--big-gpus` job at the Llama 3 rate: its interruptions per day are the rate
    times its GPUs; each costs the mean loss of the job-killing faults measured, weighted by the
    kinds' Llama 3 shares (registry priors), so that a history's one-of-each mix counts as the
    field's. Checkpoint writes are left out (the same in every mode).

    How a prediction acts on it follows the policy. A job within the prediction policy's
    `max_job_gpus` is drained at a checkpoint: each drain costs a restart, the wrong ones at the
    rate measured per GPU-day here. A larger job (10,000 GPUs against the shipped 1,024) is not
    killed on a prediction: the node is cordoned, and the job's next restart (for any other fault,
    which comes at the same rate) leaves it out at no cost of its own. A fault warned of `w`
    seconds ahead is then missed only if no restart came in between, exp(-w * rate), and costs
    what it costs when met (`met`: the same faults as the mode acting on failures alone met them);
    a wrong prediction costs the job nothing (the node, out after a restart it took anyway, is the
    fleet's loss, in the fleet column)."""
    per_day = LLAMA3_RATE / 1000 * args.big_gpus
    lazy = args.big_gpus > PREDICTED_MAX_JOB_GPUS
    by_kind: dict[str, list[float]] = {}
    for i, f in enumerate(faults):
        if not f.kills_job:
            continue
        if not lazy:
            loss = f.big_job_loss_s + (args.restart_s if f.ahead else 0.0)
        elif f.warned_s is None:
            loss = f.big_job_loss_s
        else:  # the replay's small jobs may have drained it ahead: what the large job meets is `met`'s
            loss = (met[i] if met is not None else f).big_job_loss_s * math.exp(-f.warned_s * per_day / 86_400.0)
        by_kind.setdefault(f.kind, []).append(loss)
    if not by_kind:
        return float("nan")
    weights = {k: registry.PRIOR[k] for k in by_kind}
    mean_loss = sum(weights[k] * sum(v) / len(v) for k, v in by_kind.items()) / sum(weights.values())
    wrong_per_day = wrong_drains / gpu_days * args.big_gpus if gpu_days and not lazy else 0.0
    lost = per_day * mean_loss + wrong_per_day * args.restart_s
    return float(1.0 - lost / 86_400.0)


def fleet_ettr(lost_gpu_s: float, gpu_days: float) -> float:
    """The fleet's ETTR: 1 - the GPU-time the cost model says faults cost (interrupted jobs' lost
    steps and restarts, nodes idle after a wrong drain) / the fleet's GPU-time (every GPU's wall
    time, whether a job held it or not)."""
    return 1.0 - lost_gpu_s / (gpu_days * 86_400.0) if gpu_days > 0 else float("nan")


def bench_goodput(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    totals = {m: ModeCost() for m in MODES}
    per_mode: dict[str, list[Outcome]] = {m: [] for m in MODES}
    wrong: dict[str, int] = dict.fromkeys(MODES, 0)
    seed_ettr: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}  # (large job, fleet), per seed
    gpu_days = 0.0
    faults = 0
    report: dict[str, Any] = {"seeds": list(args.seeds), "gpus": args.gpus, "hours": args.hours, "modes": {}}
    with (
        tempfile.TemporaryDirectory(prefix="aiops-goodput-") as work,
        Progress(
            len(args.seeds) * round(args.hours * 3600 / args.interval), "aiops bench goodput", "ticks"
        ) as progress,
    ):
        for seed in args.seeds:
            tape = record(seed, args, progress.advance)
            from rca.graph import TopologyGraph

            graph = TopologyGraph.from_json(tape.topology)

            def node_of(entity: str, graph: TopologyGraph = graph) -> str | None:
                return graph.node_of(entity) if entity in graph else None

            acted = run_modes(tape, args, Path(work))
            seed_met: list[Outcome] = []
            t0 = min((t for _, t, _ in tape.calls), default=0.0)
            faults += len(tape.truth)
            for mode in MODES:
                rows, records = acted[mode]
                c = cost_of(
                    mode if mode != "validation" else "predictions",
                    tape.truth,
                    rows,
                    tape.jobs,
                    node_of,
                    args.restart_s,
                    args.human_s,
                    args.horizon_h * 3600,
                    tape.write_s,
                    tape.per_node,
                    tape.t_end,
                    records,
                )
                t = totals[mode]
                t.gpu_s += c.gpu_s
                t.interruptions += c.interruptions
                t.nodes_out |= {f"{seed}:{node}" for node in c.nodes_out}
                t.drains += c.drains
                t.wrong += c.wrong
                t.wrong_gpu_s += c.wrong_gpu_s
                t.blocked += c.blocked
                t.returned_broken += c.returned_broken
                wrong[mode] += c.wrong
                seed_outs = outcomes(mode, tape.truth, rows, records, node_of, t0, args)
                if mode == "failures":  # the faults as a job meets them (MODES puts it before predictions)
                    seed_met = seed_outs
                per_mode[mode] += seed_outs
                report.setdefault("per_seed", {}).setdefault(str(seed), {})[mode] = c.gpu_s / 3600
                seed_days = args.gpus * args.hours / 24
                seed_ettr[mode].append(
                    (
                        big_job_ettr(seed_outs, c.wrong, seed_days, args, met=seed_met),
                        fleet_ettr(c.gpu_s, seed_days),
                    )
                )
            gpu_days += args.gpus * args.hours / 24
    per = 1000.0 / gpu_days
    table = Table(
        title=f"aiops bench goodput: {len(args.seeds)} histories of {args.gpus:,} GPUs × {args.hours:g} h "
        f"at {args.interval:g} s (seeds {', '.join(map(str, args.seeds))}), {faults} faults "
        f"({args.faults or 'the Llama 3 rate'}), {gpu_days:,.0f} GPU-days",
        caption=(
            f"fleet: GPU-hours lost per 1,000 GPU-days, each interrupted job's GPUs × (time since its last checkpoint"
            f" + {args.restart_s:g} s restart); none: a person drains a failed node {args.human_s:g} s after. "
            "Returned broken: nodes put back with a job-killing fault no step fixed, the next job on each failing "
            "at its start (a restart). "
            f"ETTR: one {args.big_gpus:,}-GPU job, checkpoint every {args.big_ckpt_s / 60:g} min, restart "
            f"{args.restart_s / 60:g} min, spares, at the Llama 3 rate ({LLAMA3_RATE:.2f} per 1,000 GPU-days); "
            "per seed, in seed order. Fleet ETTR: 1 - GPU-time lost / the fleet's GPU-time (every GPU, busy or not). "
            f"Self-heal: faults in a node put right and returned with no person (all; of kinds a reset or reboot "
            "fixes). MTTR: median onset -> the job running again; -> the node back, checked, with no person; "
            "faults that went to a person (a drained node waits for one without remediation), and the median time"
            " until then"
        ),
    )
    for col in (
        "mode",
        "fleet GPU-h lost /1k GPU-days",
        "saved",
        "wrong drains",
        "wrong GPU-h",
        "returned broken",
        f"ETTR {args.big_gpus // 1000}k job",
        "per seed",
        "fleet ETTR",
        "per seed ",
        "self-healed",
        "of fixable",
        "MTTR job",
        "MTTR node back",
        "to a person",
    ):
        table.add_column(col, justify="right")
    base = totals["none"].gpu_s

    def median(values: list[float]) -> float | None:
        v = sorted(values)
        return v[len(v) // 2] if v else None

    def minutes(v: float | None) -> str:
        return f"{v / 60:.1f} min" if v is not None else "-"

    for mode in MODES:
        t, outs = totals[mode], per_mode[mode]
        saved = 1 - t.gpu_s / base if base else 0.0
        ettr = big_job_ettr(outs, wrong[mode], gpu_days, args, met=per_mode["failures"])
        fleet = fleet_ettr(t.gpu_s, gpu_days)
        big_seeds, fleet_seeds = [b for b, _ in seed_ettr[mode]], [f for _, f in seed_ettr[mode]]
        fixable = [o for o in outs if o.kind in REBOOT_FIXES]
        healed = sum(o.healed for o in outs)
        healed_fixable = sum(o.healed for o in fixable)
        job = median([o.job_back_s for o in outs if o.job_back_s is not None])
        node = median([o.node_back_s for o in outs if o.node_back_s is not None])
        person = median([o.person_s for o in outs if o.person_s is not None])
        kinds: dict[str, Any] = {}
        for o in outs:
            k = kinds.setdefault(
                o.kind, {"faults": 0, "healed": 0, "ahead": 0, "job_back_s": [], "node_or_person_s": []}
            )
            k["faults"] += 1
            k["healed"] += int(o.healed)
            k["ahead"] += int(o.ahead)
            if o.job_back_s is not None:
                k["job_back_s"].append(round(o.job_back_s))
            k["node_or_person_s"].append(round(o.node_back_s if o.node_back_s is not None else (o.person_s or 0.0)))
        table.add_row(
            mode,
            f"{t.gpu_s / 3600 * per:,.1f}",
            f"{saved:.0%}" if mode != "none" else "",
            f"{t.wrong}",
            f"{t.wrong_gpu_s / 3600 * per:,.1f}",
            f"{t.returned_broken}",
            f"{ettr:.2%}",
            " / ".join(f"{v:.1%}" for v in big_seeds),
            f"{fleet:.2%}",
            " / ".join(f"{v:.2%}" for v in fleet_seeds),
            f"{healed}/{len(outs)}",
            f"{healed_fixable}/{len(fixable)}",
            minutes(job),
            minutes(node),
            f"{sum(o.person_s is not None for o in outs)}, {minutes(person)}",
        )
        report["modes"][mode] = {
            "gpu_hours_per_1k_gpu_days": t.gpu_s / 3600 * per,
            "saved": saved,
            "interruptions": t.interruptions,
            "nodes_drained": len(t.nodes_out),
            "wrong_drains": t.wrong,
            "returned_broken": t.returned_broken,
            "blocked": t.blocked,
            "ettr_big_job": ettr,
            "ettr_big_job_per_seed": big_seeds,
            "ettr_fleet": fleet,
            "ettr_fleet_per_seed": fleet_seeds,
            "self_healed": healed,
            "faults_in_nodes": len(outs),
            "self_healed_fixable": healed_fixable,
            "fixable": len(fixable),
            "mttr_job_s": job,
            "mttr_node_back_s": node,
            "to_a_person": sum(o.person_s is not None for o in outs),
            "to_a_person_s": person,
            "per_kind": kinds,
        }
    console.print(table)
    report["gpu_days"], report["faults"] = gpu_days, faults
    return report


__all__ = [
    "Outcome",
    "TruthCheck",
    "bench_goodput",
    "big_job_ettr",
    "cost_of",
    "fleet_ettr",
    "outcomes",
    "policies",
    "record",
]
