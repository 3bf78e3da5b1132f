"""A hang from collective progress: every rank of a job stopped advancing its collective sequence
for longer than the job's own pauses explain.

Per job and communicator, each rank's last collective sequence number (NCCL Inspector's coll_sn,
the same count on every rank) and the event time it last advanced (dump_timestamp_us). The job
progresses while any rank's sequence (or point-to-point count) advances; the stall is the event
time since the last advance. A checkpoint or evaluation stops collectives on every rank at once,
after every rank finished the same collective; a hang typically leaves one rank behind (it never
entered the collective the others wait in). So two limits (HangRules says where each comes from):

- ranks disagree (some rank's sequence below the others'): the stall must outlast
  max(lag_floor_s, pause_factor x the longest healthy pause the job resumed from while its ranks
  disagreed); the culprit is the lowest rank;
- every rank at the same sequence: a pause or a deadlock; the stall must outlast
  max(pause_floor_s, pause_factor x the longest healthy pause the job has shown), or cold_floor_s
  while it has shown none yet. Nothing in the sequences names a rank: the job's own (a deadlock in
  its code or library), unless flight-recorder dumps name one.

A pause is healthy when the job resumed from it without having been judged hung; a stall that was
judged and then resumed teaches nothing. A pause longer than any seen before raises the limit for
the job from then on (never lowers it): a late false page costs more than a later detection, and
PyTorch's watchdog still ends a real hang at its own timeout.

Event-driven, not a frame scorer (detectors.base): a hang is the absence of events, judged at a
clock (`check(now_ns)`, the daemon's event-time watermark), and the join is by sequence number
across ranks, not by series at a tick. State is per job: per communicator and rank a sequence, a
time and where the rank ran; plain slotted classes that pickle (the daemon checkpoints them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from detectors.jobs.findings import Hang, HangCause, RankRef
from detectors.jobs.flight import Position, judge_group, positions_of
from ingest.jobs.records import Collective, FlightDump

NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class HangRules:
    # Issue 68: a hang found within 1-2 minutes of the last progress. A rank left behind is not a
    # pause (pauses end with every rank at the same collective), so one minute of every rank still
    # is enough, well past NCCL Inspector's dump interval and a shipper's delay.
    lag_floor_s: float = 60.0
    # Every rank at one sequence looks like a pause for as long as the job's pauses last: the
    # issue's 2 minutes is the floor once the job has shown its pauses.
    pause_floor_s: float = 120.0
    # Before the job has shown a pause it may be in its first checkpoint: large jobs' blocking
    # checkpoints run for minutes (an assumption about the field, not measured here). Half of
    # PyTorch's NCCL watchdog default (TORCH_NCCL's ProcessGroupNCCL timeout, 600 s), so it still
    # comes before the watchdog ends the job.
    cold_floor_s: float = 300.0
    # Headroom over the longest healthy pause: the recording's two checkpoint pauses were 8.03 and
    # 8.04 s (train-steps.csv), but a shared filesystem under load makes the same save slower; 2x
    # is a guess at that spread, to be tuned on the generator's held-out seeds.
    pause_factor: float = 2.0
    # A gap this long is a pause (the recording's checkpoint: 8 s; its steps: 0.19 s).
    pause_min_s: float = 5.0


@dataclass(slots=True)
class _Rank:
    seq: int
    advanced_ns: int
    node: str
    pid: int | None
    cuda_device: int | None


@dataclass(slots=True)
class _Comm:
    name: str | None
    n_ranks: int
    ranks: dict[int, _Rank] = field(default_factory=dict)

    def spread(self) -> tuple[int, int]:
        seqs = [r.seq for r in self.ranks.values()]
        return min(seqs), max(seqs)


@dataclass(slots=True)
class _Group:
    """A process group as the flight-recorder dumps of its ranks saw it."""

    desc: str
    members: set[int] = field(default_factory=set)
    positions: dict[int, Position] = field(default_factory=dict)


@dataclass(slots=True)
class _Job:
    comms: dict[str, _Comm] = field(default_factory=dict)
    p2p: dict[tuple[str, int, int | None], int] = field(default_factory=dict)  # (comm, rank, peer) -> p2p_sn
    last_advance_ns: int = 0
    longest_pause_ns: int = 0
    longest_lagged_pause_ns: int = 0
    reported: HangCause | None = None  # the stall since last_advance_ns was judged a hang
    groups: dict[str, _Group] = field(default_factory=dict)
    nodes: dict[int, str | None] = field(default_factory=dict)  # global rank -> host, from the dumps


class HangDetector:
    def __init__(self, rules: HangRules | None = None) -> None:
        self.rules = rules or HangRules()
        self._jobs: dict[str, _Job] = {}

    def observe(self, c: Collective) -> None:
        job = self._jobs.setdefault(c.job or "", _Job())
        if c.p2p:
            key = (c.comm, c.rank, c.peer)
            if c.seq > job.p2p.get(key, -1):
                self._advance(job, c.time_ns)
                job.p2p[key] = c.seq
            return
        comm = job.comms.get(c.comm)
        if comm is None:
            comm = job.comms[c.comm] = _Comm(c.comm_name, c.n_ranks)
        held = comm.ranks.get(c.rank)
        if held is None or c.seq > held.seq:
            self._advance(job, c.time_ns)
            comm.ranks[c.rank] = _Rank(c.seq, c.time_ns, c.node, c.pid, c.cuda_device)

    def observe_flight(self, dump: FlightDump) -> None:
        """A rank's flight-recorder dump: it names the culprit of a hang the sequences cannot (a
        later dump of the rank replaces its positions)."""
        job = self._jobs.setdefault(dump.job or "", _Job())
        job.nodes[dump.rank] = dump.node
        for name, (desc, ranks) in dump.groups.items():
            job.groups.setdefault(name, _Group(desc)).members.update(ranks)
        for name, (desc, position) in positions_of(dump).items():
            job.groups.setdefault(name, _Group(desc)).positions[dump.rank] = position

    def check(self, now_ns: int) -> list[Hang]:
        """Hangs judged at event time `now_ns`: each once, and again if flight-recorder dumps later
        name a culprit the sequences did not."""
        found = []
        for key, job in self._jobs.items():
            if not job.comms or job.reported == "flight_recorder":
                continue
            hang = self._judge(key, job, now_ns)
            if hang is not None and hang.cause != job.reported:
                job.reported = hang.cause
                found.append(hang)
        return found

    def forget(self, job: str | None) -> None:
        """The job ended: its state goes."""
        self._jobs.pop(job or "", None)

    def limits_s(self, job: str | None) -> tuple[float, float]:
        """The stall a job must outlast (ranks disagreeing, ranks at one sequence), seconds."""
        held = self._jobs.get(job or "", _Job())
        r = self.rules
        lagged = max(r.lag_floor_s, r.pause_factor * held.longest_lagged_pause_ns / NS)
        if held.longest_pause_ns < r.pause_min_s * NS:
            return lagged, r.cold_floor_s
        return lagged, max(r.pause_floor_s, r.pause_factor * held.longest_pause_ns / NS)

    def _advance(self, job: _Job, t_ns: int) -> None:
        if t_ns <= job.last_advance_ns:
            return
        gap = t_ns - job.last_advance_ns
        if job.last_advance_ns and job.reported is None:
            job.longest_pause_ns = max(job.longest_pause_ns, gap)
            # only a gap that could raise the limit is worth the walk over every rank
            worth = max(job.longest_lagged_pause_ns, int(self.rules.lag_floor_s / self.rules.pause_factor * NS))
            if gap > worth and _lagging(job):
                job.longest_lagged_pause_ns = gap
        job.last_advance_ns = t_ns
        job.reported = None

    def _judge(self, key: str, job: _Job, now_ns: int) -> Hang | None:
        stall_s = (now_ns - job.last_advance_ns) / NS
        lag_limit, pause_limit = self.limits_s(key)
        behind = _lagging(job)
        limit = lag_limit if behind else pause_limit
        if stall_s <= limit:
            return None
        job_id = key or None
        pauses = (
            f"stopped {stall_s:.0f} s; longest healthy pause {job.longest_pause_ns / NS:.0f} s "
            f"({job.longest_lagged_pause_ns / NS:.0f} s with ranks apart); limit {limit:.0f} s"
        )
        flight = _flight_hang(job, job_id, now_ns, limit, pauses)
        if flight is not None:
            return flight
        if behind:
            name, comm = max(behind, key=lambda nc: nc[1].spread()[1] - nc[1].spread()[0])
            low, high = comm.spread()
            culprits = tuple(
                RankRef(name, rank, r.node, r.pid, r.cuda_device)
                for rank, r in sorted(comm.ranks.items())
                if r.seq == low
            )
            evidence = f"ranks {', '.join(str(c.rank) for c in culprits)} at {low}, others at {high}; {pauses}"
            return Hang(
                job_id, name, comm.name, culprits, high, job.last_advance_ns, now_ns, limit, "rank_behind", evidence
            )
        name, comm = max(job.comms.items(), key=lambda nc: max(r.advanced_ns for r in nc[1].ranks.values()))
        seq = comm.spread()[1]
        missing = comm.n_ranks - len(comm.ranks)
        silent = f" ({missing} of {comm.n_ranks} ranks never seen)" if missing else ""
        evidence = f"every rank at {seq}{silent}, no rank behind: the job's own; {pauses}"
        return Hang(job_id, name, comm.name, (), seq, job.last_advance_ns, now_ns, limit, "job", evidence)


def _lagging(job: _Job) -> list[tuple[str, _Comm]]:
    """The job's communicators whose ranks disagree on their last collective."""
    out = []
    for name, comm in job.comms.items():
        low, high = comm.spread()
        if low < high:
            out.append((name, comm))
    return out


def _flight_hang(job: _Job, job_id: str | None, now_ns: int, limit: float, pauses: str) -> Hang | None:
    for name, group in sorted(job.groups.items()):
        verdict = judge_group(name, group.desc, group.positions, group.members)
        if verdict is None or not verdict.culprits:
            continue
        culprits = tuple(RankRef(name, rank, job.nodes.get(rank)) for rank, _ in verdict.culprits)
        why = "; ".join(f"rank {rank}: {reason}" for rank, reason in verdict.culprits)
        evidence = f"flight recorder, group {name} ({group.desc}) stuck at {verdict.stuck_seq}: {why}; {pauses}"
        return Hang(
            job_id,
            name,
            group.desc,
            culprits,
            verdict.stuck_seq,
            job.last_advance_ns,
            now_ns,
            limit,
            "flight_recorder",
            evidence,
        )
    return None
