"""Detection from the job's own signals (issue 68): a hang from collective progress, fail-slow
from the step time, the rank the others wait for from collective timings.

Event-driven, not frame scorers of the detector protocol (detectors.base): a frame is every series
at one tick, scored row by row; these signals are events keyed by a sequence or step number that
must be joined across ranks (the same collective on every rank, the same step), arrive at each
rank's own pace, and a hang is their absence, judged against a clock (`check(now_ns)`). What they
keep of the protocol: findings are decisions made from stated rules (HangRules, StepRules,
ArrivalRules, each threshold with its source), baselines learn only what was not flagged (a
slow window never enters the step baseline, a stall judged a hang never becomes a healthy pause),
and the state is small (per job: a sequence, time and place per communicator rank; a few hundred
step times) in plain slotted classes that pickle, for the daemons' checkpoints.

Not yet wired: the daemons feed the records and a watermark, and map a finding's ranks to node,
GPU and NIC through the scheduler's allocation.
"""

from detectors.jobs.arrival import ArrivalRules, ArrivalTracker
from detectors.jobs.findings import FailSlow, Hang, HangCause, RankRef, RankShare
from detectors.jobs.flight import FlightVerdict, Position, flight_verdicts
from detectors.jobs.hang import HangDetector, HangRules
from detectors.jobs.steps import StepRules, StepTimeDetector
from detectors.jobs.watch import JobWatch

__all__ = [
    "ArrivalRules",
    "ArrivalTracker",
    "FailSlow",
    "FlightVerdict",
    "Hang",
    "HangCause",
    "HangDetector",
    "HangRules",
    "JobWatch",
    "Position",
    "RankRef",
    "RankShare",
    "StepRules",
    "StepTimeDetector",
    "flight_verdicts",
]
