"""The blast radius an incident page states, from the record and the scheduler's events: the jobs
holding the affected GPUs when the incident began (for a switch, the jobs whose traffic crosses
it), and apart from them the jobs that started on those GPUs while it was open, each counted as
its GPUs on the affected parts and its GPUs in all. A job that had ended before the onset was not
hit, and is not counted (it is named, so a reader who remembers it sees why it is missing).

The reading is the engine's own, `rca.blast.radius`, which rca/incidents.py `_blast` uses for the
record's `jobs`, `job_gpus` and `gpus_hit`: the page and the engine count the same jobs by the
same rule. The page reads it again rather than taking the record's numbers because it says more
than the record holds (when each job was hit, its GPUs on the affected parts, the job that ended
just before onset), from the same onset and the same scheduler events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rca.blast import ENDED_BEFORE_S, Blast, JobHit, affected_gpus, nodes_under, onset, radius
from rca.graph import TopologyGraph
from vocab.schedule import Schedule


def onset_of(record: Mapping[str, Any]) -> float:
    """The earliest the engine saw it: opened, its first evidence, or the warning it took over."""
    times = [float(e["at"]) for e in record.get("evidence", []) if isinstance(e.get("at"), int | float)]
    warned = record.get("warned")
    return onset(float(record["opened"]), times, float(warned) if isinstance(warned, int | float) else None)


def blast_radius(record: Mapping[str, Any], g: TopologyGraph, schedule: Schedule) -> Blast:
    start = onset_of(record)
    until = float(record.get("resolved") or record.get("updated") or start)
    return radius(g, schedule, str(record["root_cause"]["entity"]), record.get("affected", []), start, until)


__all__ = [
    "ENDED_BEFORE_S",
    "Blast",
    "JobHit",
    "affected_gpus",
    "blast_radius",
    "nodes_under",
    "onset_of",
]
