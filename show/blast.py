"""The blast radius an incident page states: the jobs holding the affected GPUs when the incident
began, and apart from them the jobs that started on those GPUs while it was open, each counted as
its GPUs on the affected parts and its GPUs in all. A job that had ended before the onset was not
hit, and is not counted (it is named, so a reader who remembers it sees why it is missing).

The onset is the earliest the engine saw the incident: its first piece of evidence, the warning
it took over, or its opening time. The affected GPUs: the GPUs among the affected entities (that GPU only);
a node's other parts among them (its NIC, its PSU) and the nodes whose work passes through the
root (a leaf's hosts, a PSU's node, a rack's nodes): every GPU of the node, as the engine reads it
(rca/incidents.py `_blast`, `_nodes_under`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rca.graph import TopologyGraph
from vocab.schedule import Job, Schedule

GPU_INDEX = re.compile(r"-gpu(\d+)$")  # "<node>-gpu<index>" (vocab/entities.py)
# a job that ended this long before the onset is named as "ended before" (and not counted); an
# older one is not mentioned at all (an operational choice: the engine's own look-back,
# vocab/schedule.py `jobs_holding` ended_within_s)
ENDED_BEFORE_S = 600.0


@dataclass(frozen=True)
class JobHit:
    job: str
    when: str  # "at onset" | "started while open" | "ended before onset"
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


def onset_of(record: Mapping[str, Any]) -> float:
    """The earliest the engine saw it: opened, its first evidence, or the warning it took over
    (a precursor's warning is the same fault seen early)."""
    times = [float(e["at"]) for e in record.get("evidence", []) if isinstance(e.get("at"), int | float)]
    if isinstance(record.get("warned"), int | float):
        times.append(float(record["warned"]))
    return min([float(record["opened"]), *times])


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


def affected_gpus(g: TopologyGraph, root: str, affected: Iterable[str]) -> dict[str, set[int] | None]:
    """node -> the affected GPU indices on it (None: every GPU of the node)."""
    held: dict[str, set[int] | None] = dict.fromkeys(nodes_under(g, root))
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


def _on(job: Job, node: str, indices: set[int] | None) -> int:
    """The job's GPUs on this node among `indices` (None: all of the node's)."""
    if node not in job.nodes:
        return 0
    mine = job.gpus_by_node.get(node) if job.gpus_by_node is not None else None
    if mine is None:  # the scheduler named only nodes: its GPUs spread evenly over them
        per_node = job.gpus // max(len(job.nodes), 1)
        return per_node if indices is None else min(len(indices), per_node)
    return len(mine) if indices is None else len(set(mine) & indices)


def blast_radius(record: Mapping[str, Any], g: TopologyGraph, schedule: Schedule) -> Blast:
    onset = onset_of(record)
    until = float(record.get("resolved") or record.get("updated") or onset)
    held = affected_gpus(g, str(record["root_cause"]["entity"]), record.get("affected", []))
    hits: list[JobHit] = []
    seen: set[str] = set()
    for node in sorted(held):
        for name in schedule.by_node.get(node, ()):
            if name in seen:
                continue
            job = schedule.jobs[name]
            on = sum(_on(job, n, held[n]) for n in job.nodes if n in held)
            if not on:
                continue
            if job.start <= onset < job.end:
                when = "at onset"
            elif onset < job.start <= until:
                when = "started while open"
            elif onset - ENDED_BEFORE_S <= job.end <= onset:
                when = "ended before onset"
            else:
                continue
            seen.add(name)
            end = None if math.isinf(job.end) else job.end
            hits.append(JobHit(name, when, on, job.gpus, job.start, end))
    hits.sort(key=lambda j: (("at onset", "started while open", "ended before onset").index(j.when), -j.gpus_total))
    return Blast(onset, until, hits)


__all__ = ["Blast", "JobHit", "affected_gpus", "blast_radius", "nodes_under", "onset_of"]
