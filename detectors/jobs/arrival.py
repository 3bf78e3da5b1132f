"""The rank the others wait for, from collective timings.

In synchronous training a collective completes on every rank at about the same time, once the last
rank has arrived; a rank's execution time (coll_exec_time_us) runs from its own arrival. So per
collective sequence the rank with the shortest execution time arrived last, and the others' times
include waiting for it. One collective says little (arrival order jitters); a rank that is the
last in most of the recent collectives of a communicator is the one slowing it.

Point-to-point operations are left out: their counts differ per rank, and pipeline bubbles make
some ranks wait by design. A collective is judged once every rank of the communicator reported
it; one that some rank never reports is dropped when `pending` newer ones are waiting.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from statistics import median

from detectors.jobs.findings import RankRef, RankShare
from ingest.jobs.records import Collective


@dataclass(frozen=True, slots=True)
class ArrivalRules:
    window: int = 64  # the collectives per communicator a share is taken over
    min_sequences: int = 16  # fewer collectives judged than this name nobody
    # The share a rank must hold: a majority, and three times what chance gives one of n ranks
    # (for 2 ranks, chance is already 0.5). A design choice, to be checked on the generator's seeds.
    min_share: float = 0.5
    chance_factor: float = 3.0
    max_share: float = 0.9  # the bar never rises past this, however few the ranks
    pending: int = 32  # collectives of a communicator awaiting their last rank


@dataclass(slots=True)
class _Comm:
    n_ranks: int
    pending: dict[int, dict[int, float]] = field(default_factory=dict)  # seq -> rank -> exec_time_us
    last: deque[tuple[int, float]] = field(default_factory=deque)  # (the last rank, the wait it caused)
    where: dict[int, tuple[str, int | None, int | None]] = field(default_factory=dict)  # rank -> node, pid, device


class ArrivalTracker:
    def __init__(self, rules: ArrivalRules | None = None) -> None:
        self.rules = rules or ArrivalRules()
        self._comms: dict[tuple[str, str], _Comm] = {}

    def observe(self, c: Collective) -> None:
        if c.p2p or c.n_ranks < 2:
            return
        comm = self._comms.get((c.job or "", c.comm))
        if comm is None:
            comm = self._comms[(c.job or "", c.comm)] = _Comm(c.n_ranks, last=deque(maxlen=self.rules.window))
        comm.where[c.rank] = (c.node, c.pid, c.cuda_device)
        times = comm.pending.setdefault(c.seq, {})
        times[c.rank] = c.exec_time_us
        if len(times) >= comm.n_ranks:
            del comm.pending[c.seq]
            rank = min(times, key=lambda r: (times[r], r))
            others = [t for r, t in times.items() if r != rank]
            comm.last.append((rank, median(others) - times[rank]))
        while len(comm.pending) > self.rules.pending:
            del comm.pending[min(comm.pending)]

    def slow_ranks(self, job: str | None) -> list[RankShare]:
        """Per communicator of the job, the rank last in most recent collectives, where it holds
        the share the rules ask; best first."""
        out = []
        for (key, name), comm in self._comms.items():
            if key != (job or "") or len(comm.last) < self.rules.min_sequences:
                continue
            counts: dict[int, list[float]] = {}
            for rank, wait in comm.last:
                counts.setdefault(rank, []).append(wait)
            rank, waits = max(counts.items(), key=lambda kv: (len(kv[1]), -kv[0]))
            share = len(waits) / len(comm.last)
            bar = min(self.rules.max_share, max(self.rules.min_share, self.rules.chance_factor / comm.n_ranks))
            if share >= bar:
                node, pid, device = comm.where[rank]
                out.append(RankShare(RankRef(name, rank, node, pid, device), share, len(comm.last), median(waits)))
        return sorted(out, key=lambda s: -s.share)

    def forget(self, job: str | None) -> None:
        for key in [k for k in self._comms if k[0] == (job or "")]:
            del self._comms[key]
