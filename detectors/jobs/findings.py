"""What the job detectors say: a hang and a fail-slow, each naming ranks as the job's records name
them. Mapping a rank to its node, GPU and NIC is the scheduler's and the topology's (later code);
a finding carries what the records said about where the rank ran (host, pid, CUDA ordinal)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# How a hang's culprit was found:
# - "rank_behind": NCCL Inspector's sequence numbers; the culprit's last collective is lower than
#   the others' (it never entered the collective they wait in);
# - "flight_recorder": the ranks' flight-recorder dumps; the culprit's entry for the stuck
#   collective is missing, or still `scheduled` where the others' are `started`;
# - "job": every rank stopped at the same sequence and nothing names one: a deadlock of the job's
#   own (its code, its library), not a node's, until hardware evidence says otherwise.
HangCause = Literal["rank_behind", "flight_recorder", "job"]


@dataclass(frozen=True, slots=True)
class RankRef:
    """A rank as one communicator (NCCL Inspector: the comm's hash, rank within it) or process
    group (flight recorder: the group's name, the global rank) knows it, and where it ran."""

    comm: str
    rank: int
    node: str | None
    pid: int | None = None
    cuda_device: int | None = None


@dataclass(frozen=True, slots=True)
class Hang:
    job: str | None
    comm: str  # the communicator (or process group) the culprit was found in; the latest to move for "job"
    comm_name: str | None
    culprits: tuple[RankRef, ...]  # empty where cause is "job"
    waiting_at: int  # the sequence the other ranks reached (collective_seq_id from a flight dump)
    since_ns: int  # the job's last progress: the last time any rank's sequence advanced
    detected_ns: int  # the event time the stall was judged at
    threshold_s: float  # the stall it had to outlast (HangRules says why)
    cause: HangCause
    evidence: str  # one line a person reads: the ranks' sequences, the pauses the job has shown


@dataclass(frozen=True, slots=True)
class RankShare:
    """A rank the others waited for: in `share` of the last `sequences` collectives of `comm` it had
    the shortest execution time (it arrived last; the others' time includes waiting for it)."""

    rank: RankRef
    share: float
    sequences: int
    median_wait_us: float  # the others' median exec time minus its own, over the collectives it was last in


@dataclass(frozen=True, slots=True)
class FailSlow:
    job: str | None
    since_ns: int  # the earliest step of the judged window over the limit
    detected_ns: int  # the end of the step that tipped the window
    step: int
    recent_median_s: float
    baseline_median_s: float
    limit_s: float
    slowdown: float  # recent / baseline - 1
    slow_ranks: tuple[RankShare, ...]  # from collective timings (the rank the others wait for), best first
    longest_ranks: tuple[tuple[int | None, float], ...]  # (rank, share of the window's slow steps it was longest in)
