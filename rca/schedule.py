"""What the scheduler says: which jobs run on which nodes when, and announced maintenance.

Built from the events log (job_start / job_running / job_end / maintenance), which a real
deployment takes from Slurm or Kubernetes. Used for cohorts (a job's members), blast radius
(the jobs and GPUs an incident hits) and silences (drained nodes are not incidents).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Job:
    job: str
    nodes: tuple[str, ...]
    gpus: int
    start: float
    end: float = math.inf


@dataclass
class Schedule:
    jobs: dict[str, Job] = field(default_factory=dict)
    by_node: dict[str, list[str]] = field(default_factory=dict)  # node -> job ids, ever
    maintenance: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # node -> windows

    @staticmethod
    def from_events(events: Iterable[dict[str, Any]]) -> Schedule:
        s = Schedule()
        for e in events:
            s.add(e)
        return s

    def add(self, e: dict[str, Any]) -> None:
        """One scheduler event; unknown types are ignored (the log carries other news too)."""
        kind = e.get("type")
        if kind in ("job_start", "job_running"):
            nodes = tuple(str(n) for n in e.get("nodes", ()))
            start = float(e.get("started", e["time"]))
            job = Job(str(e["job"]), nodes, int(e.get("gpus", 8 * len(nodes))), start)
            self.jobs[job.job] = job
            for n in nodes:
                self.by_node.setdefault(n, []).append(job.job)
        elif kind == "job_end" and str(e.get("job")) in self.jobs:
            self.jobs[str(e["job"])].end = float(e["time"])
        elif kind == "maintenance":
            for n in e.get("nodes", ()):
                self.maintenance.setdefault(str(n), []).append((float(e["start"]), float(e["end"])))

    def jobs_on(self, nodes: Iterable[str], t: float, ended_within_s: float = 600.0) -> list[Job]:
        """Jobs running on these nodes at t, and those that ended just before (a fault that kills
        a job ends it before anyone can look)."""
        found: dict[str, Job] = {}
        for n in nodes:
            for j in self.by_node.get(n, ()):
                job = self.jobs[j]
                if job.start <= t < job.end + ended_within_s:
                    found[j] = job
        return sorted(found.values(), key=lambda j: j.job)

    def in_maintenance(self, node: str, t: float) -> bool:
        return any(start <= t < end for start, end in self.maintenance.get(node, ()))


__all__ = ["Job", "Schedule"]
