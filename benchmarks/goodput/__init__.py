"""`aiops bench goodput`: what acting is worth, in GPU-hours, on generated histories.

Each history (a generated cluster at the published Llama 3 fault rate, with precursors) is
replayed once through the pipeline with two acting loops side by side, each with its own audit
log and an executor that records what it was asked to do (the replay's telemetry does not react
to a drain: the generator's scheduler keeps placing jobs; the cost model, in `cost`, accounts for it):

- none: no action (today: a person drains a failed node by hand, `--human-s` after the failure);
- failures: drain a node once its incident opens (what a per-node system does);
- predictions: that, and drain a node predicted to fail right after its job's next checkpoint;
- validation: that, with the remediation machine (the ladder, health checks that pass as the
  generator's truth says), and parts that degrade without stopping the job and that a reset or
  reboot puts right remediated once their node's jobs end (`when: job_end`).

Split along the data flow: `histories` (each generated history replayed once, on a tape),
`runner` (every acting mode over a tape), `cost` (the cost model: what each mode's actions cost
the fleet and a large job), `report` (summed over the seeds, the table and the JSON figures).
"""

from benchmarks.goodput.cost import (
    LLAMA3_RATE,
    ModeCost,
    Outcome,
    big_job_ettr,
    cost_of,
    fleet_ettr,
    outcomes,
)

# a tape cached by `--cache` before the split names its classes `benchmarks.goodput.Tape` and
# `benchmarks.goodput.JobTimes`: importable from here, so those tapes still load
from benchmarks.goodput.histories import JobTimes, Tape, record
from benchmarks.goodput.report import bench_goodput
from benchmarks.goodput.runner import CHECK_S, MODES, REBOOT_S, RESET_S, TruthCheck, policies, run_modes

__all__ = [
    "CHECK_S",
    "LLAMA3_RATE",
    "MODES",
    "REBOOT_S",
    "RESET_S",
    "JobTimes",
    "ModeCost",
    "Outcome",
    "Tape",
    "TruthCheck",
    "bench_goodput",
    "big_job_ettr",
    "cost_of",
    "fleet_ettr",
    "outcomes",
    "policies",
    "record",
    "run_modes",
]
