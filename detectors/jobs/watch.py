"""One job watcher over the three: every job record in, hangs and fail-slows out, a fail-slow
carrying the rank the collectives say the others waited for."""

from __future__ import annotations

import dataclasses

from detectors.jobs.arrival import ArrivalRules, ArrivalTracker
from detectors.jobs.findings import FailSlow, Hang
from detectors.jobs.hang import HangDetector, HangRules
from detectors.jobs.steps import StepRules, StepTimeDetector
from ingest.jobs.records import Collective, FlightDump, Step


class JobWatch:
    def __init__(
        self, hang: HangRules | None = None, steps: StepRules | None = None, arrival: ArrivalRules | None = None
    ) -> None:
        self.hangs = HangDetector(hang)
        self.steps = StepTimeDetector(steps)
        self.arrivals = ArrivalTracker(arrival)

    def observe(self, record: Collective | Step | FlightDump) -> list[FailSlow]:
        """Take a record in; a fail-slow the step settles, named from the collectives so far."""
        if isinstance(record, Collective):
            self.hangs.observe(record)
            self.arrivals.observe(record)
            return []
        if isinstance(record, FlightDump):
            self.hangs.observe_flight(record)
            return []
        found = self.steps.observe(record)
        return [dataclasses.replace(f, slow_ranks=tuple(self.arrivals.slow_ranks(f.job))) for f in found]

    def check(self, now_ns: int) -> list[Hang]:
        """The hangs at event time `now_ns` (the daemon's watermark)."""
        return self.hangs.check(now_ns)

    def forget(self, job: str | None) -> None:
        """The job ended (the scheduler says so): its state goes."""
        self.hangs.forget(job)
        self.steps.forget(job)
        self.arrivals.forget(job)
