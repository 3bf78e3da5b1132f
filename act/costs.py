"""When acting on a prediction pays: the probability above which draining a node at its job's next
checkpoint costs less, on average, than waiting for the failure (the cost model of
`aiops bench goodput`, docs/acting.md).

For a failure that kills its job, with the job checkpointing every `checkpoint_s`:
- a right drain (at a checkpoint, before the onset) saves the steps the job would have lost: on
  average half a checkpoint interval on each of its GPUs (the onset falls anywhere in the
  interval); the job restarts either way;
- a wrong drain costs the job a restart it would not have taken (`restart_s` on each of its GPUs)
  and leaves the node out for its health check (`check_s` on each of the node's GPUs) before it
  comes back.
Drain when p * saved > (1 - p) * cost, i.e. p > cost / (cost + saved). With a 30-minute
checkpoint, a 10-minute restart and a 5-minute check, that is 0.50 for an 8-GPU job and 0.40 for
a 1,024-GPU one: a policy for every job size takes the smallest job's.

A failure that does not stop its job (a thermal slowdown, a cooling loop drifting) is saved nothing
by a restart, nor by taking an idle node out for a check, that this cost model counts: a drain on
its prediction never pays here, whatever the probability; its warning is watched (and a site that
prices a slowed job can still act on it, with `when: job_end` so that no job restarts for it).
"""

from __future__ import annotations

from vocab import registry


def drain_break_even(
    job_gpus: int,
    checkpoint_s: float = 1800.0,
    restart_s: float = 600.0,
    check_s: float = 300.0,
    node_gpus: int = 8,
) -> float:
    """The probability of a job-killing failure above which a drain at the next checkpoint pays."""
    saved = job_gpus * checkpoint_s / 2
    cost = job_gpus * restart_s + node_gpus * check_s
    return cost / (cost + saved)


def kills_its_job(kind: str) -> bool:
    """Whether a kind stops the job it hits (the registry's kills_job): only those are worth a restart."""
    known = registry.KINDS.get(kind)
    return bool(known and known.kills_job)


__all__ = ["drain_break_even", "kills_its_job"]
