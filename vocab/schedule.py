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

import numpy as np
import pandas as pd
from numpy.typing import NDArray


@dataclass(slots=True)
class Job:
    job: str
    nodes: tuple[str, ...]
    gpus: int
    start: float
    end: float = math.inf


def _number(e: dict[str, Any], key: str) -> str | None:
    v = e.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return f"{key} must be a number of epoch seconds, got {v!r}"[:200]
    return None


def _nodes(e: dict[str, Any]) -> str | None:
    nodes = e.get("nodes")
    if not isinstance(nodes, list) or not all(isinstance(n, str) and n for n in nodes):
        return f"nodes must be a list of node ids, got {nodes!r}"[:200]
    return None


def event_problem(e: object) -> str | None:
    """Why a scheduler event cannot be used, or None. Types this service does not read pass
    (the log carries other news too); the ones it reads must carry what it reads."""
    if not isinstance(e, dict):
        return f"an event is a JSON object, got {type(e).__name__}"
    kind = e.get("type")
    if kind in ("job_start", "job_running"):
        if not isinstance(e.get("job"), str) or not e["job"]:
            return f"{kind} without a job id"
        if "gpus" in e and (isinstance(e["gpus"], bool) or not isinstance(e["gpus"], int) or e["gpus"] < 0):
            return f"gpus must be a count, got {e['gpus']!r}"[:200]
        return _nodes(e) or _number(e, "started" if "started" in e else "time")
    if kind == "job_end":
        if not isinstance(e.get("job"), str):
            return "job_end without a job id"
        return _number(e, "time")
    if kind == "maintenance":
        problem = _nodes(e) or _number(e, "start") or _number(e, "end")
        if problem is None and float(e["end"]) < float(e["start"]):
            return "maintenance ends before it starts"
        return problem
    return None


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
        """One scheduler event that passed `event_problem`; unknown types are ignored (the log
        carries other news too)."""
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


class NodeJobs:
    """Which job each node runs, advanced through event time: the GPU cohorts when the telemetry
    carries no `job` tag (a stock dcgm-exporter sends none). Lookups are per distinct node, so a
    tick of 100k GPUs costs a dictionary read per node, not per GPU."""

    def __init__(self, schedule: Schedule) -> None:
        changes: list[tuple[float, int, str, str]] = []
        for job in schedule.jobs.values():
            for node in job.nodes:
                changes.append((job.start, 1, node, job.job))
                if math.isfinite(job.end):
                    changes.append((job.end, 0, node, job.job))  # an end sorts before a start at one time
        changes.sort()
        self._changes = changes
        self._next = 0
        self._t = -math.inf
        self.current: dict[str, str] = {}

    def __bool__(self) -> bool:
        return bool(self._changes)

    def at(self, t: float, nodes: NDArray[np.object_]) -> NDArray[np.object_]:
        """The job of each node at t ("idle" when it runs none)."""
        if t < self._t:  # time went back (a replay): start again
            self._next, self.current = 0, {}
        self._t = t
        changes = self._changes
        while self._next < len(changes) and changes[self._next][0] <= t:
            _, starts, node, job = changes[self._next]
            if starts:
                self.current[node] = job
            elif self.current.get(node) == job:
                del self.current[node]
            self._next += 1
        codes, uniques = pd.factorize(nodes)
        jobs = np.array([self.current.get(str(n), "idle") for n in uniques], dtype=object)
        return jobs[codes] if len(uniques) else np.zeros(0, dtype=object)


__all__ = ["Job", "NodeJobs", "Schedule"]
