"""When acting on a prediction pays: the probability above which draining a node at its job's next
checkpoint costs less, on average, than waiting for the failure, under the cost model of
`aiops bench goodput` (benchmarks/goodput/cost.py, docs/acting.md; stated, not measured). A
prediction's probability is calibrated, so acting pays when p x saved > (1 - p) x wasted, i.e.
p > wasted / (wasted + saved).

For a failure that kills its job:
- a right drain (right after a checkpoint, before the onset) saves the steps the job would have
  lost: the work since its last checkpoint on each of its GPUs, half the checkpoint period on
  average (the generator's jobs checkpoint every 15-30 min: 11.25 min); the job restarts either way;
- a wrong drain costs the job a restart it would not have taken (600 s on each of its GPUs) and
  keeps the node's GPUs out until it comes back: for its health check (5 min) where the
  remediation loop checks and returns it, or until the warning lapses (the 12-hour horizon) where
  nothing does.
With the remediation loop that is 0.57 for an 8-GPU job and 0.47 for a 1,024-GPU one: a policy for
jobs of every size takes the smallest job's. Without it, 0.98 and 0.58.

A failure that does not stop its job (a thermal slowdown, a cooling loop drifting) is saved nothing
by a restart, nor by taking an idle node out, that this cost model counts: 1.0, a drain on its
prediction never pays here; its warning is watched (a site that prices a slowed job can still act
on it, with `when: job_end`, so that no job restarts for it).
"""

from __future__ import annotations

from vocab import registry

RESTART_S = 600.0  # a job's restart from its checkpoint (the goodput bench's --restart-s)
CHECK_S = 300.0  # a health check (dcgmi diag -r 2 and an NCCL all-reduce): the bench's CHECK_S
# how long a warning lasts when nothing returns the node sooner: the default predictor's horizon
# (detectors/predict/model.py HORIZON_S; a test holds the two equal, act does not import detectors)
WARNING_HORIZON_S = 12 * 3600.0
MEAN_SINCE_CHECKPOINT_S = (15 * 60.0 + 30 * 60.0) / 4  # half of a 15-30 min checkpoint period
NODE_GPUS = 8


def drain_break_even(
    kind: str,
    job_gpus: int,
    *,
    node_out_s: float = CHECK_S,
    restart_s: float = RESTART_S,
    mean_since_checkpoint_s: float = MEAN_SINCE_CHECKPOINT_S,
    node_gpus: int = NODE_GPUS,
) -> float:
    """The probability of a predicted `kind` above which a drain at the job's next checkpoint pays;
    1.0 for a kind that does not kill its job. `node_out_s`: how long a wrongly drained node is out
    (a health check with the remediation loop; WARNING_HORIZON_S without it)."""
    known = registry.KINDS.get(kind)
    if known is None or not known.kills_job:
        return 1.0
    wasted = job_gpus * restart_s + node_gpus * node_out_s
    saved = max(job_gpus, 1) * mean_since_checkpoint_s
    return wasted / (wasted + saved)


def onset_before(remaining_s: float, horizon_s: float = WARNING_HORIZON_S) -> float:
    """Of the failures a warning announces within its horizon, the share that comes within
    `remaining_s`. The warning says "within the horizon", not when: taken as even over it. Measured
    leads are shorter (a median near 3 h of the 12: docs/prediction.md), so this says a failure
    comes later than it does, and the rule below waits for a job's end more often than it should,
    never less: waiting costs what acting on the failure alone costs, no more."""
    return min(max(remaining_s, 0.0) / horizon_s, 1.0) if horizon_s > 0 else 1.0


def checkpoint_drain_pays(
    probability: float,
    jobs: dict[str, int],
    remaining_s: dict[str, float],
    *,
    restart_s: float = RESTART_S,
    mean_since_checkpoint_s: float = MEAN_SINCE_CHECKPOINT_S,
    horizon_s: float = WARNING_HORIZON_S,
) -> bool:
    """Whether a drain at the jobs' next checkpoint pays against waiting for them to end (the node
    cordoned meanwhile, then drained), for a predicted failure of a kind that kills its job.
    `jobs`: the GPUs each job on the node holds; `remaining_s`: how long each has left until the
    scheduler ends it at the latest (its time limit); a job not in it may run on past the horizon.

    A drain at the checkpoint restarts every job on the node (its GPUs x the restart); waiting
    loses, for a job the failure strikes before it ends (probability p x onset_before(its time
    left)), its GPUs x (the steps since its checkpoint + the restart), and nothing for a job that
    ends first. The node is drained and checked either way, so its time out counts on neither
    side. A job that may outlive the horizon gives the plain break-even, restart / (restart +
    steps): 0.47."""
    restart, waiting = 0.0, 0.0
    for job, gpus in jobs.items():
        left = remaining_s.get(job)
        struck = probability * (onset_before(left, horizon_s) if left is not None else 1.0)
        restart += gpus * restart_s
        waiting += struck * gpus * (mean_since_checkpoint_s + restart_s)
    return waiting > restart


__all__ = [
    "CHECK_S",
    "RESTART_S",
    "WARNING_HORIZON_S",
    "checkpoint_drain_pays",
    "drain_break_even",
    "onset_before",
]
