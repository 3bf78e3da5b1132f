"""What the scheduler says: which jobs hold which GPUs when, nodes taken out of service, and
announced maintenance.

Built from the scheduler's events (job_start / job_running / job_end / node_state / maintenance),
which `context.scheduler` reads from Slurm or Kubernetes (or a recorded file). A job holds GPUs,
not nodes: `gpus_by_node` names the GPU indices it holds on each node; without it the scheduler
named only the nodes. Used for cohorts (a job's members), blast radius (the jobs and GPUs an
incident hits) and silences (drained nodes and maintenance windows are not incidents).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from vocab.bounds import MAX_GPUS_PER_NODE, MAX_HOSTS
from vocab.ids import gpu_id, job_refusal, node_refusal, shown

IDLE = "idle"  # the job of a GPU no job holds
SHARED = ""  # the job of a GPU on a node several jobs hold without saying which GPUs: unknown
NODE_STATES = ("drain", "down", "ok")
# What one event may name is bounded as every importer's input is (vocab/bounds.py: MAX_HOSTS
# nodes, MAX_GPUS_PER_NODE GPUs on each): a job on more nodes than the largest cluster has, or a
# GPU index past what a node holds, is a forged or broken event, refused before a Schedule builds
# one entry per node or GPU from it.


@dataclass(slots=True)
class Job:
    job: str
    nodes: tuple[str, ...]
    gpus: int
    start: float
    end: float = math.inf
    # GPU indices held per node; None: the scheduler named only the nodes
    gpus_by_node: dict[str, tuple[int, ...]] | None = None
    # when the scheduler ends the job at the latest (Slurm's end_time of a running job: its start
    # plus its time limit); inf: no limit said
    expected_end: float = math.inf

    def __setstate__(self, state: Any) -> None:
        """A job pickled in a checkpoint from before jobs said their limits has no `expected_end`:
        no limit said."""
        self.expected_end = math.inf
        own, slots = state if isinstance(state, tuple) else (state, None)
        for key, value in {**(own or {}), **(slots or {})}.items():
            setattr(self, key, value)

    def holds(self, node: str, index: int | None) -> bool:
        """Does the job hold this GPU (index None: anything on the node)."""
        if node not in self.nodes:
            return False
        if self.gpus_by_node is None or index is None:
            return True
        return index in self.gpus_by_node.get(node, ())


# An event's times are Unix seconds from the epoch to the last second an int64 of nanoseconds
# holds (2262-04-11): the line protocol's and InfluxDB's timestamps, which no job outlives. A
# `-1e308` or `1e308` would otherwise pass as finite and order every job before or after all time.
LATEST_EPOCH_S = (2**63 - 1) // 1_000_000_000


def _number(e: dict[str, Any], key: str) -> str | None:
    v = e.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return f"{key} must be a number of epoch seconds, got {v!r}"[:200]
    if not 0 <= v <= LATEST_EPOCH_S:
        return f"{key} must be epoch seconds from 0 to {LATEST_EPOCH_S} (2262-04-11), got {v!r}"[:200]
    return None


def _nodes(e: dict[str, Any]) -> str | None:
    """Every node an event names passes the node grammar (a host list `n[0-15]` is not a node)."""
    nodes = e.get("nodes")
    if not isinstance(nodes, list):
        return f"nodes must be a list of node ids, got {str(nodes)[:120]}"[:200]
    if len(nodes) > MAX_HOSTS:
        return f"nodes: {len(nodes):,} nodes, over the {MAX_HOSTS:,} one event may name [bound hosts]"
    for i, n in enumerate(nodes):
        if not isinstance(n, str):
            return f"nodes[{i}] must be a node id, got {str(n)[:80]}"[:200]
        if (problem := node_refusal(n)) is not None:
            return f"nodes[{i}]: {shown(n)} refused: {problem}"[:300]
    return None


def _job(e: dict[str, Any], kind: str) -> str | None:
    job = e.get("job")
    if not isinstance(job, str) or not job:
        return f"{kind} without a job id"
    if (problem := job_refusal(job)) is not None:
        return f"job: {shown(job)} refused: {problem}"[:300]
    return None


def _gpus_by_node(e: dict[str, Any]) -> str | None:
    held = e.get("gpus_by_node")
    if held is None:
        return None
    if not isinstance(held, dict):
        return f"gpus_by_node must map node ids to GPU indices, got {held!r}"[:200]
    for node, indices in held.items():
        if node not in e["nodes"]:
            return f"gpus_by_node names {node!r}, which is not one of the job's nodes"[:200]
        if not isinstance(indices, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < MAX_GPUS_PER_NODE for i in indices
        ):
            return (
                f"gpus_by_node[{shown(str(node))}] must be a list of GPU indices 0..{MAX_GPUS_PER_NODE - 1}, "
                f"got {str(indices)[:80]} [bound gpu_index]"
            )[:300]
        if len(indices) > MAX_GPUS_PER_NODE:
            return (
                f"gpus_by_node[{shown(str(node))}] names {len(indices):,} GPUs, over {MAX_GPUS_PER_NODE} [bound gpus]"
            )
    return None


def event_problem(e: object) -> str | None:
    """Why a scheduler event cannot be used, or None. Types this service does not read pass
    (the log carries other news too); the ones it reads must carry what it reads."""
    if not isinstance(e, dict):
        return f"an event is a JSON object, got {type(e).__name__}"
    kind = e.get("type")
    if kind in ("job_start", "job_running"):
        if problem := _job(e, kind):
            return problem
        if "gpus" in e and (isinstance(e["gpus"], bool) or not isinstance(e["gpus"], int) or e["gpus"] < 0):
            return f"gpus must be a count, got {str(e['gpus'])[:40]}"[:200]
        if problem := _nodes(e):
            return problem
        if "gpus" in e and e["gpus"] > MAX_GPUS_PER_NODE * max(1, len(e["nodes"])):
            return (
                f"gpus {e['gpus']:,} is over {MAX_GPUS_PER_NODE} for each of the job's {len(e['nodes'])} nodes "
                "[bound gpus]"
            )
        return (
            _gpus_by_node(e)
            or _number(e, "started" if "started" in e else "time")
            or (_number(e, "expected_end") if "expected_end" in e else None)
        )
    if kind == "job_end":
        return _job(e, kind) or _number(e, "time")
    if kind == "node_state":
        if e.get("state") not in NODE_STATES:
            return f"node_state must be one of {', '.join(NODE_STATES)}, got {e.get('state')!r}"[:200]
        return _nodes(e) or _number(e, "time")
    if kind == "maintenance":
        problem = _nodes(e) or _number(e, "start") or _number(e, "end")
        if problem is None and float(e["end"]) < float(e["start"]):
            return "maintenance ends before it starts"
        return problem
    return None


def maintenance_window(e: Mapping[str, Any]) -> tuple[str, float, float]:
    """A maintenance event's key and window. The window counts from its announcement at the
    earliest: a window announced after it began silences nothing before the announcement, so a
    daemon that hears of it late and a replay of the whole log agree."""
    start, end = float(e["start"]), float(e["end"])
    key = f"maintenance:{e['name']}" if e.get("name") else f"maintenance:{start}:{end}"
    announced = e.get("time")
    if isinstance(announced, int | float) and not isinstance(announced, bool):
        start = min(max(start, float(announced)), end)
    return key, start, end


def event_time(e: Mapping[str, Any]) -> float:
    """When an event takes effect in event time: a job's start, an announcement's moment."""
    return float(e.get("time", e.get("start", 0.0)))


@dataclass
class Schedule:
    jobs: dict[str, Job] = field(default_factory=dict)
    by_node: dict[str, list[str]] = field(default_factory=dict)  # node -> job ids, ever
    # node -> windows out of service: announced maintenance, and drains (open until resumed),
    # each under a key so a later event can move or close it
    windows: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    down: dict[str, list[tuple[float, str]]] = field(default_factory=dict)  # node -> (since, reason)

    @staticmethod
    def from_events(events: Iterable[dict[str, Any]]) -> Schedule:
        s = Schedule()
        for e in events:
            s.add(e)
        return s

    @property
    def maintenance(self) -> dict[str, dict[str, tuple[float, float]]]:
        return self.windows

    def add(self, e: dict[str, Any]) -> None:
        """One scheduler event that passed `event_problem`; unknown types are ignored (the log
        carries other news too)."""
        kind = e.get("type")
        if kind in ("job_start", "job_running"):
            nodes = tuple(str(n) for n in e.get("nodes", ()))
            start = float(e.get("started", e["time"]))
            held = e.get("gpus_by_node")
            by_node = None if held is None else {str(n): tuple(int(i) for i in ix) for n, ix in held.items()}
            gpus = int(e["gpus"]) if "gpus" in e else (sum(map(len, by_node.values())) if by_node else 8 * len(nodes))
            limit = float(e["expected_end"]) if "expected_end" in e else math.inf
            job = Job(str(e["job"]), nodes, gpus, start, gpus_by_node=by_node, expected_end=max(limit, start))
            known = self.jobs.get(job.job)
            if known is not None and not (math.isfinite(known.end) and job.start >= known.end):
                return  # said again (a follower replaying): the first word stands
            # new, or a name come back after its job ended (a recreated pod): the latest is kept
            self.jobs[job.job] = job
            for n in nodes:
                held = self.by_node.setdefault(n, [])
                if job.job not in held:
                    held.append(job.job)
        elif kind == "job_end" and str(e.get("job")) in self.jobs:
            self.jobs[str(e["job"])].end = float(e["time"])
        elif kind == "maintenance":
            key, start, end = maintenance_window(e)
            for n in e.get("nodes", ()):
                self.windows.setdefault(str(n), {})[key] = (start, end)
        elif kind == "node_state":
            at = float(e["time"])
            for n in map(str, e.get("nodes", ())):
                held = self.windows.setdefault(n, {})
                open_drain = held.get("drain")
                if e["state"] == "drain" and (open_drain is None or open_drain[1] <= at):
                    if open_drain is not None:  # an earlier drain, closed: keep it under its start
                        held[f"drain:{open_drain[0]}"] = open_drain
                    held["drain"] = (at, math.inf)
                elif e["state"] != "drain" and open_drain is not None and open_drain[1] > at:
                    held["drain"] = (open_drain[0], at)
                if e["state"] == "down":
                    self.down.setdefault(n, []).append((at, str(e.get("reason", ""))))

    def jobs_on(self, nodes: Iterable[str], t: float, ended_within_s: float = 600.0) -> list[Job]:
        """Jobs running on these nodes at t, and those that ended just before (a fault that kills
        a job ends it before anyone can look)."""
        return self.jobs_holding([(n, None) for n in nodes], t, ended_within_s)

    def jobs_holding(
        self, gpus: Iterable[tuple[str, int | None]], t: float, ended_within_s: float = 600.0
    ) -> list[Job]:
        """Jobs holding these GPUs ((node, index); index None: any GPU of the node) at t, and those
        that ended just before."""
        found: dict[str, Job] = {}
        for node, index in gpus:
            for j in self.by_node.get(node, ()):
                job = self.jobs[j]
                if job.start <= t < job.end + ended_within_s and job.holds(node, index):
                    found[j] = job
        return sorted(found.values(), key=lambda j: j.job)

    def in_maintenance(self, node: str, t: float) -> bool:
        return any(start <= t < end for start, end in self.windows.get(node, {}).values())


class NodeJobs:
    """Which job holds each GPU, advanced through event time: the GPU cohorts when the telemetry
    carries no `job` tag (a stock dcgm-exporter sends none). Events may arrive while it runs (a
    scheduler followed live); one whose time has passed takes effect at the next lookup.

    A GPU the scheduler says a job holds is the job's; a GPU of a node the job holds without
    indices is the job's too (the scheduler named only the node); any other GPU is idle. Lookups
    are per distinct node, plus one dictionary read per GPU where jobs hold GPU indices."""

    def __init__(self, schedule: Schedule | None = None) -> None:
        self._changes: list[tuple[float, int, str]] = []  # (time, 1 start / 0 end, job key), sorted
        self._jobs: dict[str, Job] = {}  # by incarnation ("<job>@<start>")
        self._latest: dict[str, str] = {}  # job name -> its latest incarnation
        self._next = 0
        self._t = -math.inf
        self.whole: dict[str, list[str]] = {}  # node -> jobs holding it without GPU indices
        self.by_gpu: dict[str, str] = {}  # GPU entity ("<node>-gpu<i>") -> job holding it
        for job in (schedule or Schedule()).jobs.values():
            self._add_job(Job(job.job, job.nodes, job.gpus, job.start, job.end, job.gpus_by_node, job.expected_end))
            if math.isfinite(job.end):
                self._insert((job.end, 0, self._latest[job.job]))

    def __bool__(self) -> bool:
        return bool(self._changes)

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "_latest" not in state:  # a checkpoint from before jobs held GPUs: the events say it again
            self.__init__()  # type: ignore[misc]
            return
        self.__dict__.update(state)

    def add(self, e: Mapping[str, Any]) -> None:
        """One event (passed `event_problem`), live."""
        kind = e.get("type")
        if kind in ("job_start", "job_running"):
            one = Schedule()
            one.add(dict(e))
            for job in one.jobs.values():
                known = self.job(job.job)
                if known is None or (math.isfinite(known.end) and job.start >= known.end):
                    self._add_job(job)  # new, or its name come back after it ended
        elif kind == "job_end" and str(e.get("job")) in self._latest:
            key = self._latest[str(e["job"])]
            if not math.isfinite(self._jobs[key].end):  # said twice: the first end stands
                self._jobs[key].end = float(e["time"])
                self._insert((float(e["time"]), 0, key))

    def _add_job(self, job: Job) -> None:
        key = f"{job.job}@{job.start!r}"  # one incarnation of the name
        self._jobs[key] = job
        self._latest[job.job] = key
        self._insert((job.start, 1, key))

    def _insert(self, change: tuple[float, int, str]) -> None:
        at = bisect.bisect(self._changes, change)
        self._changes.insert(at, change)
        if at < self._next:  # its time has passed: take it now
            self._apply(change)
            self._next += 1

    def _apply(self, change: tuple[float, int, str]) -> None:
        _, starts, key = change
        job = self._jobs[key]
        name = job.job
        for node in job.nodes:
            indices = None if job.gpus_by_node is None else job.gpus_by_node.get(node, ())
            if indices is None:
                holders = self.whole.setdefault(node, [])
                if starts and name not in holders:
                    holders.append(name)
                elif not starts and name in holders:
                    holders.remove(name)
                    if not holders:
                        del self.whole[node]
                continue
            for i in indices:
                gpu = gpu_id(node, i)
                if starts:
                    self.by_gpu[gpu] = name
                elif self.by_gpu.get(gpu) == name:
                    del self.by_gpu[gpu]

    def advance(self, t: float) -> None:
        if t < self._t:  # time went back (a replay): start again
            self._next, self.whole, self.by_gpu = 0, {}, {}
        self._t = t
        changes = self._changes
        while self._next < len(changes) and changes[self._next][0] <= t:
            self._apply(changes[self._next])
            self._next += 1

    def job(self, name: str) -> Job | None:
        """The latest incarnation of the job of that name."""
        key = self._latest.get(name)
        return None if key is None else self._jobs[key]

    def at(self, t: float, nodes: NDArray[np.object_], gpus: NDArray[np.object_] | None = None) -> NDArray[np.object_]:
        """The job of each GPU row at t ("idle" when none holds it), from its node and its GPU
        entity id."""
        self.advance(t)
        codes, uniques = pd.factorize(nodes)
        if not len(uniques):
            return np.zeros(0, dtype=object)
        # a node held without indices: its job; held so by two jobs, nobody can say which GPU is
        # whose, and its GPUs are in no cohort (SHARED)
        default = np.array([_holder(self.whole.get(str(n))) for n in uniques], dtype=object)
        out = default[codes]
        if self.by_gpu and gpus is not None:
            held = pd.Series(gpus, dtype=object).map(self.by_gpu)
            known = held.notna().to_numpy()
            out[known] = held.to_numpy(dtype=object)[known]
        return out

    def shared(self) -> dict[str, tuple[str, ...]]:
        """Nodes that several jobs hold without GPU indices, and those jobs."""
        return {n: tuple(jobs) for n, jobs in self.whole.items() if len(jobs) > 1}

    def nodes_only(self, name: str) -> bool:
        """Did the scheduler name only the nodes of this job (no GPU indices)?"""
        job = self.job(name)
        return job is not None and job.gpus_by_node is None


def _holder(jobs: list[str] | None) -> str:
    if not jobs:
        return IDLE
    return jobs[0] if len(jobs) == 1 else SHARED


__all__ = [
    "IDLE",
    "SHARED",
    "Job",
    "NodeJobs",
    "Schedule",
    "event_problem",
    "event_time",
    "maintenance_window",
]
