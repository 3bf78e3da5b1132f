"""When each job checkpoints, read from its telemetry: a synchronous training job stops computing
on every rank at once to write its state (the step blocks on the save, or on the barrier after
it), so the whole job's GPU utilisation falls together for the length of the write and comes back
together. That dip, seen on the job's mean utilisation, is its checkpoint; their spacing is its
cadence (typically 15 to 60 minutes for large jobs: Llama 3's training checkpointed on that order,
and the guidance for 10k-GPU jobs is to checkpoint at least every hour).

A drain right after a checkpoint costs the job only its restart; one mid-interval also loses the
steps since the last checkpoint. So a predicted failure hours away waits for the job's next dip,
unless no dip comes within the deadline (a job that never checkpoints, or too slowly).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vocab.thresholds import WORKING_UTIL_PCT

DIP_BELOW = 0.5  # mean utilisation under half the job's own busy level: the job stopped computing
RECOVERED_AT = 0.8  # and back over 80 % of it: the write is over
BASELINE_ALPHA = 0.05  # the busy level's EWMA weight per tick, outside dips
CADENCE_OF = 5  # checkpoints the cadence is the median spacing of


@dataclass(slots=True)
class _Job:
    baseline: float | None = None
    in_dip: bool = False
    dip_started: float | None = None
    ends: list[float] = field(default_factory=list)  # when its recent checkpoints ended

    def cadence(self) -> float | None:
        if len(self.ends) < 2:
            return None
        gaps = sorted(b - a for a, b in zip(self.ends, self.ends[1:], strict=False))
        return gaps[len(gaps) // 2]


class CheckpointClock:
    def __init__(self) -> None:
        self.jobs: dict[str, _Job] = {}

    def observe(self, t: float, utilisation: dict[str, float]) -> list[str]:
        """A tick's mean GPU utilisation (%) per job; the jobs whose checkpoint ended at t."""
        ended = []
        for name, util in utilisation.items():
            job = self.jobs.setdefault(name, _Job())
            if job.baseline is None:
                job.baseline = util if util >= WORKING_UTIL_PCT else None  # below: not steady enough to read dips
                continue
            if not job.in_dip and util < DIP_BELOW * job.baseline:
                job.in_dip, job.dip_started = True, t
            elif job.in_dip and util >= RECOVERED_AT * job.baseline:
                job.in_dip = False
                job.ends = [*job.ends[-(CADENCE_OF - 1) :], t]
                ended.append(name)
            if not job.in_dip:
                job.baseline += BASELINE_ALPHA * (util - job.baseline)
        for gone in set(self.jobs) - set(utilisation):  # ended or left: nothing more to wait for
            del self.jobs[gone]
        return ended

    def last_checkpoint(self, job: str) -> float | None:
        j = self.jobs.get(job)
        return j.ends[-1] if j is not None and j.ends else None

    def cadence(self, job: str) -> float | None:
        j = self.jobs.get(job)
        return j.cadence() if j is not None else None

    def known(self, job: str) -> bool:
        return job in self.jobs


__all__ = ["CheckpointClock"]
