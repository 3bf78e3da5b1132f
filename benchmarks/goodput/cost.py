"""What acting is worth, in GPU-hours: the cost model, over what each mode planned and did.

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
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from act.audit import RemediationRecord, Row
from benchmarks.goodput.histories import JobTimes
from benchmarks.goodput.runner import CHECK_S, PREDICTED_MAX_JOB_GPUS, RESET_S, TruthCheck
from vocab import registry


@dataclass
class ModeCost:
    """What one mode's actions cost the fleet over a history (summed: over every history)."""

    gpu_s: float = 0.0
    interruptions: int = 0
    nodes_out: set[str] = field(default_factory=set)
    drains: int = 0
    wrong: int = 0
    wrong_gpu_s: float = 0.0
    blocked: int = 0
    returned_broken: int = 0  # nodes put back with a job-killing fault unfixed, that a job then met

    def add(self, other: ModeCost, seed: int) -> None:
        """Another history's cost summed in (its nodes named by seed: each history is a cluster)."""
        self.gpu_s += other.gpu_s
        self.interruptions += other.interruptions
        self.nodes_out |= {f"{seed}:{node}" for node in other.nodes_out}
        self.drains += other.drains
        self.wrong += other.wrong
        self.wrong_gpu_s += other.wrong_gpu_s
        self.blocked += other.blocked
        self.returned_broken += other.returned_broken


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


__all__ = ["LLAMA3_RATE", "ModeCost", "Outcome", "big_job_ettr", "cost_of", "fleet_ettr", "outcomes"]
