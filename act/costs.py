"""When acting on a prediction pays: the probability above which draining a node at its job's next
checkpoint costs less, on average, than waiting for the failure, under the cost model of
`aiops bench goodput` (benchmarks/goodput.py, docs/acting.md; stated, not measured). A
prediction's probability is calibrated, so acting pays when p x saved > (1 - p) x wasted, i.e.
p > wasted / (wasted + saved).

For a failure that kills its job:
- a right drain (right after a checkpoint, before the onset) saves the steps the job would have
  lost: the work since its last checkpoint on each of its GPUs, half the checkpoint period on
  average (the generator's jobs checkpoint every 15-30 min: 11.25 min); the job restarts either way;
- a wrong drain costs the job a restart it would not have taken (600 s on each of its GPUs) and
  keeps the node's GPUs out until it comes back: for its health check (5 min) where the
  remediation loop checks and returns it, or until the warning lapses (the 6-hour horizon) where
  nothing does.
With the remediation loop that is 0.57 for an 8-GPU job and 0.47 for a 1,024-GPU one: a policy for
jobs of every size takes the smallest job's. Without it, 0.97 and 0.53.

A failure that does not stop its job (a thermal slowdown, a cooling loop drifting) is saved nothing
by a restart, nor by taking an idle node out, that this cost model counts: 1.0, a drain on its
prediction never pays here; its warning is watched (a site that prices a slowed job can still act
on it, with `when: job_end`, so that no job restarts for it).
"""

from __future__ import annotations

from vocab import registry

RESTART_S = 600.0  # a job's restart from its checkpoint (the goodput bench's --restart-s)
CHECK_S = 300.0  # a health check (dcgmi diag -r 2 and an NCCL all-reduce): the bench's CHECK_S
WARNING_HORIZON_S = 6 * 3600.0  # how long a warning lasts when nothing returns the node sooner
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


__all__ = ["CHECK_S", "RESTART_S", "WARNING_HORIZON_S", "drain_break_even"]
