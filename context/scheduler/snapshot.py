"""What a scheduler says at one moment (jobs and the GPUs they hold, nodes out of service,
reservations), and the events that turn one moment into the next.

Every source (slurmrestd, the Slurm CLI, Kubernetes) reads its scheduler into a `Snapshot`; the
`Tracker` compares each snapshot with what it has already said and gives the project's events
(`vocab.schedule`): `job_start`, `job_end`, `node_state`, `maintenance`. Each event carries an `id`
that names the job or node and the state it reached, so a follower that restarts and replays what
it published says nothing twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class JobSeen:
    job: str
    nodes: tuple[str, ...]
    gpus: int  # GPUs the job holds, over all its nodes
    # the GPU indices the job holds on each node; None when the scheduler names only the nodes
    gpus_by_node: Mapping[str, tuple[int, ...]] | None
    start: float
    end: float | None = None  # None: still running
    end_reason: str = ""
    # a running job's end by its time limit (Slurm's end_time while it runs); None: not said
    expected_end: float | None = None


@dataclass(frozen=True, slots=True)
class NodeSeen:
    node: str
    drained: bool  # out of service by someone's decision: drained, cordoned, tainted
    down: bool  # the scheduler lost it (not responding, failed): a symptom, not maintenance
    reason: str = ""
    since: float | None = None  # when the reason was set, if the scheduler says

    @property
    def state(self) -> str:
        return "down" if self.down else "drain" if self.drained else "ok"


@dataclass(frozen=True, slots=True)
class ReservationSeen:
    name: str
    nodes: tuple[str, ...]
    start: float
    end: float
    maintenance: bool  # flagged as maintenance (Slurm's MAINT): announced maintenance


@dataclass(slots=True)
class Snapshot:
    """One reading of the scheduler at `time`. `parts` says what the reading covered: a reading
    of jobs alone says nothing about nodes (a node absent from it is not back in service)."""

    time: float
    jobs: dict[str, JobSeen] = field(default_factory=dict)
    nodes: dict[str, NodeSeen] = field(default_factory=dict)
    reservations: dict[str, ReservationSeen] = field(default_factory=dict)
    parts: set[str] = field(default_factory=set)  # of "jobs", "nodes", "reservations"

    def merge(self, other: Snapshot) -> Snapshot:
        """Readings of different parts taken together (jobs from one call, nodes from another)."""
        return Snapshot(
            max(self.time, other.time),
            {**self.jobs, **other.jobs},
            {**self.nodes, **other.nodes},
            {**self.reservations, **other.reservations},
            self.parts | other.parts,
        )


def _digest(*parts: object) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:12]


def job_start_event(job: JobSeen, source: str) -> dict[str, Any]:
    event: dict[str, Any] = {
        "id": f"job_start:{job.job}:{job.start:.0f}",
        "time": job.start,
        "type": "job_start",
        "job": job.job,
        "nodes": list(job.nodes),
        "gpus": job.gpus,
        "source": source,
    }
    if job.gpus_by_node is not None:
        event["gpus_by_node"] = {n: list(ix) for n, ix in job.gpus_by_node.items()}
    if job.expected_end is not None:
        event["expected_end"] = job.expected_end
    return event


def job_end_event(job: str, start: float, at: float, reason: str, source: str) -> dict[str, Any]:
    """The end of the job that started at `start` (a name can come back: a pod recreated by its
    StatefulSet, a Slurm job id reused after the controller's state was reset)."""
    return {
        "id": f"job_end:{job}:{start:.0f}",
        "time": at,
        "type": "job_end",
        "job": job,
        "reason": reason,
        "source": source,
    }


class Tracker:
    """What a follower has said so far, and the events a new snapshot adds to it.

    Jobs are keyed by id, nodes by name and state, reservations by name and window: the same
    snapshot twice gives nothing the second time, and `replay` of the published events (read back
    from the topic after a restart) makes the tracker say nothing it said before."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.said: set[str] = set()  # event ids published
        self.started: dict[str, float] = {}  # job -> start, for the jobs begun and not ended
        self.node_state: dict[str, str] = {}  # node -> last state said ("ok" is not kept)
        self.windows: dict[str, tuple[float, float, tuple[str, ...]]] = {}  # reservation -> window said

    def replay(self, events: Iterable[Mapping[str, Any]]) -> None:
        """The events a previous run published, oldest first."""
        for e in events:
            if e.get("source") not in (None, self.source):
                continue
            self._note(e)

    def _note(self, e: Mapping[str, Any]) -> None:
        if "id" in e:
            self.said.add(str(e["id"]))
        kind = e.get("type")
        if kind == "job_start":
            self.started[str(e["job"])] = float(e["time"])
        elif kind == "job_end":
            self.started.pop(str(e["job"]), None)
        elif kind == "node_state":
            for n in e.get("nodes", ()):
                if e.get("state") == "ok":
                    self.node_state.pop(str(n), None)
                else:
                    self.node_state[str(n)] = str(e.get("state"))
        elif kind == "maintenance" and e.get("name"):
            self.windows[str(e["name"])] = (float(e["start"]), float(e["end"]), tuple(e.get("nodes", ())))

    def note(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Events now safely published (or written): said."""
        for e in events:
            self._note(e)

    def update(self, snap: Snapshot, note: bool = True) -> list[dict[str, Any]]:
        """The events `snap` adds, in event-time order; noted as said (unless `note` is False:
        the caller notes them once they are safely published, and a failed publish says them
        again with the next snapshot)."""
        out: list[dict[str, Any]] = []
        if "jobs" in snap.parts:
            out += self._jobs(snap)
        if "nodes" in snap.parts:
            out += self._nodes(snap)
        if "reservations" in snap.parts:
            out += self._reservations(snap)
        fresh = [e for e in out if e["id"] not in self.said]
        if note:
            self.note(fresh)
        fresh.sort(key=lambda e: (float(e["time"]), str(e["type"]), str(e.get("job", ""))))
        return fresh

    def _jobs(self, snap: Snapshot) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for job in snap.jobs.values():
            if job.job not in self.started and f"job_end:{job.job}:{job.start:.0f}" not in self.said:
                out.append(job_start_event(job, self.source))
            if job.end is not None:
                out.append(job_end_event(job.job, job.start, job.end, job.end_reason or "completed", self.source))
        # a job that left the scheduler's list without an end we saw ended by the time we looked
        for gone in sorted(set(self.started) - set(snap.jobs)):
            out.append(job_end_event(gone, self.started[gone], snap.time, "gone", self.source))
        return out

    def _nodes(self, snap: Snapshot) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for name in sorted(set(self.node_state) | {n for n, s in snap.nodes.items() if s.state != "ok"}):
            seen = snap.nodes.get(name)
            state = seen.state if seen is not None else "ok"
            if state == self.node_state.get(name, "ok"):
                continue
            at = seen.since if seen is not None and seen.since and state != "ok" else snap.time
            event: dict[str, Any] = {
                "id": f"node_state:{name}:{state}:{at:.0f}",
                "time": at,
                "type": "node_state",
                "nodes": [name],
                "state": state,
                # a node gone from the scheduler's list (scaled down, replaced) is no longer drained
                "reason": seen.reason if seen is not None else "no longer listed by the scheduler",
                "source": self.source,
            }
            out.append(event)
        return out

    def _reservations(self, snap: Snapshot) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for r in snap.reservations.values():
            if not r.maintenance or (r.end <= snap.time and r.name not in self.windows):
                continue
            if self.windows.get(r.name) == (r.start, r.end, r.nodes):
                continue
            out.append(self._window(r.name, r.nodes, r.start, r.end, snap.time, f"reservation {r.name}"))
        # a maintenance reservation deleted before its end: the window closes now
        for name, (start, end, nodes) in sorted(self.windows.items()):
            if name not in snap.reservations and end > snap.time:
                out.append(self._window(name, nodes, start, max(start, snap.time), snap.time, "reservation deleted"))
        return out

    def _window(
        self, name: str, nodes: tuple[str, ...], start: float, end: float, now: float, reason: str
    ) -> dict[str, Any]:
        return {
            "id": f"maintenance:{name}:{_digest(start, end, nodes)}",
            "time": now,
            "type": "maintenance",
            "name": name,
            "nodes": list(nodes),
            "start": start,
            "end": end,
            "reason": reason,
            "source": self.source,
        }


__all__ = ["JobSeen", "NodeSeen", "ReservationSeen", "Snapshot", "Tracker", "job_end_event", "job_start_event"]
