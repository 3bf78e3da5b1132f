"""The blast radius of an incident: the jobs holding the affected GPUs when it began, and apart
from them the jobs that started on those GPUs while it was open, each counted as its GPUs on the
affected parts and its GPUs in all. A job that had ended before the onset was not hit and is not
counted (it is named, so a reader who remembers it sees why it is missing).

One reading for the engine (rca/incidents.py `_blast`: `jobs`, `job_gpus`, `gpus_hit` count the
jobs at onset) and for the pages (show/blast.py, from the record and the scheduler's events).

The onset is the earliest the engine saw the incident: its first piece of evidence, the warning
it took over, or its opening time. The affected GPUs: the GPUs among the affected entities (that
GPU only); a node's other parts among them (its NIC, its PSU) and the nodes whose work passes
through the root (a leaf's hosts, a PSU's node, a rack's nodes): every GPU of the node.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from rca.graph import TopologyGraph
from vocab.schedule import Job, Schedule

GPU_INDEX = re.compile(r"-gpu(\d+)$")  # "<node>-gpu<index>" (vocab/entities.py)
# a job that ended this long before the onset is named as "ended before" (and not counted); an
# older one is not mentioned at all (an operational choice: the schedule's own look-back,
# vocab/schedule.py `jobs_holding` ended_within_s)
ENDED_BEFORE_S = 600.0
AT_ONSET, STARTED_WHILE_OPEN, ENDED_BEFORE = "at onset", "started while open", "ended before onset"
WHEN_ORDER = (AT_ONSET, STARTED_WHILE_OPEN, ENDED_BEFORE)


@dataclass(frozen=True)
class JobHit:
    job: str
    when: str  # AT_ONSET | STARTED_WHILE_OPEN | ENDED_BEFORE
    gpus_affected: int  # its GPUs on the affected parts
    gpus_total: int
    start: float
    end: float | None


@dataclass(frozen=True)
class Blast:
    onset: float
    until: float
    jobs: list[JobHit]

    def counted(self, when: str) -> list[JobHit]:
        return [j for j in self.jobs if j.when == when]

    def total(self, when: str, field: str) -> int:
        return sum(int(getattr(j, field)) for j in self.counted(when))


def onset(opened: float, evidence_times: Iterable[float], warned: float | None) -> float:
    """The earliest the engine saw it: opened, its first evidence, or the warning it took over
    (a precursor's warning is the same fault seen early)."""
    times = [float(opened), *map(float, evidence_times)]
    if warned is not None:
        times.append(float(warned))
    return min(times)


def nodes_under(g: TopologyGraph, entity: str) -> frozenset[str]:
    """The nodes whose work passes through `entity`: a switch's hosts through its cables (a
    spine's through its leaves), anything else's dependents' nodes."""
    if entity not in g:
        return frozenset()
    if g.kind(entity) in ("leaf", "spine"):
        ends = [far for _, far in g.cables(entity) if far is not None]
        if not any(g.kind(e) == "nic" for e in ends):
            far_switches = {g.parent(e) for e in ends if g.kind(e) == "port"}
            ends += [f for s in far_switches if s is not None for _, f in g.cables(s) if f is not None]
        return frozenset(n for e in ends if g.kind(e) == "nic" and (n := g.node_of(e)) is not None)
    return frozenset(n for d in g.dependents(entity) if (n := g.node_of(d)) is not None)


def affected_gpus(
    g: TopologyGraph, root: str, affected: Iterable[str], under: frozenset[str] | None = None
) -> dict[str, set[int] | None]:
    """node -> the affected GPU indices on it (None: every GPU of the node). `under`: the nodes
    under the root, when the caller has them already (`nodes_under`)."""
    held: dict[str, set[int] | None] = dict.fromkeys(nodes_under(g, root) if under is None else under)
    for e in [root, *affected]:
        if e not in g or (node := g.node_of(e)) is None:
            continue
        index = GPU_INDEX.search(e) if g.kind(e) == "gpu" else None
        if index is None:
            held[node] = None
        elif node not in held or held[node] is not None:
            indices = held.get(node) or set()
            indices.add(int(index.group(1)))
            held[node] = indices
    return held


def gpus_on(job: Job, node: str, indices: set[int] | None) -> int:
    """The job's GPUs on this node among `indices` (None: all of the node's)."""
    if node not in job.nodes:
        return 0
    mine = job.gpus_by_node.get(node) if job.gpus_by_node is not None else None
    if mine is None:  # the scheduler named only nodes: its GPUs spread evenly over them
        per_node = job.gpus // max(len(job.nodes), 1)
        return per_node if indices is None else min(len(indices), per_node)
    return len(mine) if indices is None else len(set(mine) & indices)


def jobs_hit(schedule: Schedule, held: dict[str, set[int] | None], start: float, until: float) -> Blast:
    """The jobs on the `held` GPUs (`affected_gpus`) at `start` (the onset), those that started
    on them up to `until`, and those that ended up to ENDED_BEFORE_S before the onset."""
    hits: list[JobHit] = []
    seen: set[str] = set()
    for node in sorted(held):
        for name in schedule.by_node.get(node, ()):
            if name in seen:
                continue
            job = schedule.jobs[name]
            on = sum(gpus_on(job, n, held[n]) for n in job.nodes if n in held)
            if not on:
                continue
            if job.start <= start < job.end:
                when = AT_ONSET
            elif start < job.start <= until:
                when = STARTED_WHILE_OPEN
            elif start - ENDED_BEFORE_S <= job.end <= start:
                when = ENDED_BEFORE
            else:
                continue
            seen.add(name)
            end = None if math.isinf(job.end) else job.end
            hits.append(JobHit(name, when, on, job.gpus, job.start, end))
    hits.sort(key=lambda j: (WHEN_ORDER.index(j.when), -j.gpus_total, j.job))
    return Blast(start, until, hits)


__all__ = [
    "AT_ONSET",
    "ENDED_BEFORE",
    "ENDED_BEFORE_S",
    "STARTED_WHILE_OPEN",
    "Blast",
    "JobHit",
    "affected_gpus",
    "gpus_on",
    "jobs_hit",
    "nodes_under",
    "onset",
]
