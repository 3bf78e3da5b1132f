"""The scheduler's view: jobs placed on nodes, checkpoints, maintenance drains, and the events
log a real deployment would get from Slurm or Kubernetes.

Synchronous training: a job moves at the pace of its slowest member, so the job, not the GPU,
carries the speed; every member shows it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from telemetry_gen.topology import GPUS_PER_NODE

HOUR = 3600.0
CHECKPOINT_S = 60.0
MAINTENANCE_NOTICE_S = 1800.0  # announced half an hour ahead
MAINTENANCE_S = 2 * HOUR
JOB_NODE_SIZES = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256])
JOB_SIZE_WEIGHTS = np.array([8, 8, 7, 6, 5, 4, 3, 2, 1], dtype=np.float64)
# jobs of any GPU count (job_shapes="gpus"): debugging and inference jobs of a few GPUs share
# nodes, and training jobs need not fill their last node (28 GPUs on four 8-GPU nodes). Shares
# loosely after Philly (Jeon et al., ATC'19, fig. 2: most jobs ask for 1 GPU, few for >8) and
# Acme (Hu et al., NSDI'24: most GPU time goes to jobs of 8+ GPUs), weighted here by count
JOB_GPU_SIZES = np.array([1, 2, 4, 6, 8, 12, 16, 28, 32, 60, 64, 120, 128, 256, 512])
JOB_GPU_WEIGHTS = np.array([6, 5, 4, 2, 6, 2, 5, 2, 4, 1, 3, 1, 2, 1, 1], dtype=np.float64)
JOB_SHAPES = ("nodes", "gpus")
FAILED_JOB_TIMEOUT_S = 300.0  # a hung collective times out and the job dies


@dataclass(slots=True)
class Job:
    id: str
    nodes: NDArray[np.int64]
    start: float
    end: float
    checkpoint_period: float
    checkpoint_phase: float
    intensity: float  # how hard the model drives the GPUs (power), 0.8-1.0
    end_reason: str = "completed"
    # the GPUs it holds (global indices, node-major); None: every GPU of its nodes
    gpus: NDArray[np.int64] | None = None
    # when the scheduler ends it at the latest: its start plus the time it asked for (Slurm's
    # end_time of a running job); inf: asked for no limit
    limit_end: float = math.inf

    def gpu_indices(self) -> NDArray[np.int64]:
        if self.gpus is not None:
            return self.gpus
        return (self.nodes[:, None] * GPUS_PER_NODE + np.arange(GPUS_PER_NODE)).ravel()

    def held_by_node(self, node_ids: list[str]) -> dict[str, list[int]]:
        """The GPU indices it holds on each of its nodes, as a scheduler names them."""
        out: dict[str, list[int]] = {}
        for g in self.gpu_indices().tolist():
            out.setdefault(node_ids[g // GPUS_PER_NODE], []).append(g % GPUS_PER_NODE)
        return out


@dataclass(slots=True)
class Maintenance:
    nodes: NDArray[np.int64]
    announced: float
    start: float
    end: float


@dataclass(slots=True)
class Workload:
    """Jobs and drains over the whole run, decided up front from the seed, then updated only by
    faults (a job hit by a hard fault fails)."""

    nodes: int
    t0: float
    t_end: float
    rng: np.random.Generator
    node_ids: list[str]
    jobs: list[Job] = field(default_factory=list)
    maintenance: list[Maintenance] = field(default_factory=list)
    _next_job: int = 0
    # "nodes": every job holds whole nodes; "gpus": jobs of any GPU count, several on one node
    job_shapes: str = "nodes"
    _held: list[NDArray[np.int64]] = field(default_factory=list)  # each job's GPUs

    def plan(self, maintenance_per_day: float = 2.0) -> None:
        if self.job_shapes not in JOB_SHAPES:
            raise ValueError(f"job shapes must be one of {', '.join(JOB_SHAPES)}, got {self.job_shapes!r}")
        self._plan_maintenance(maintenance_per_day)
        by_gpu = self.job_shapes == "gpus"
        free_at = np.full(self.nodes * GPUS_PER_NODE if by_gpu else self.nodes, self.t0)
        # Fill the cluster to ~90% at start (jobs already running), then keep refilling.
        t = self.t0
        while t < self.t_end:
            if by_gpu:
                self._fill_gpus(free_at, t, first=t == self.t0)
            else:
                self._fill(free_at, t, first=t == self.t0)
            t += 600.0

    def _plan_maintenance(self, per_day: float) -> None:
        days = (self.t_end - self.t0) / (24 * HOUR)
        count = self.rng.poisson(per_day * days) if self.nodes >= 4 else 0
        for _ in range(int(count)):
            # the whole window inside the run when the run is long enough
            latest = max(self.t0 + HOUR / 2, self.t_end - MAINTENANCE_S)
            start = float(self.rng.uniform(self.t0 + HOUR / 2, latest + 1))
            size = int(self.rng.integers(1, 3))
            first = int(self.rng.integers(0, self.nodes - size + 1))
            self.maintenance.append(
                Maintenance(np.arange(first, first + size), start - MAINTENANCE_NOTICE_S, start, start + MAINTENANCE_S)
            )

    def _drained(self, node: int, start: float, end: float) -> float | None:
        """The start of the first drain on `node` that overlaps [start, end), if any."""
        hits = [m.start for m in self.maintenance if node in m.nodes and m.start < end and m.end > start]
        return min(hits) if hits else None

    def _fill(self, free_at: NDArray[np.float64], t: float, first: bool) -> None:
        """Jobs of whole nodes, `free_at` per node: contiguous free nodes if there are enough in
        a row (locality), else the first free ones."""

        def pick(free: NDArray[np.bool_]) -> tuple[NDArray[np.int64], NDArray[np.int64], None]:
            idle = np.flatnonzero(free)
            size = int(self.rng.choice(JOB_NODE_SIZES, p=JOB_SIZE_WEIGHTS / JOB_SIZE_WEIGHTS.sum()))
            size = min(size, len(idle))
            runs = np.split(idle, np.flatnonzero(np.diff(idle) != 1) + 1)
            block = next((r[:size] for r in runs if len(r) >= size), idle[:size])
            return block, block, None

        self._fill_with(free_at, t, first, pick)

    def _fill_gpus(self, free_at: NDArray[np.float64], t: float, first: bool) -> None:
        """Jobs of any GPU count, `free_at` per GPU: whole free nodes for a job's full nodes, and
        its remainder on the node with the fewest free GPUs that still fits it (best fit, as
        Slurm's cons_tres packs), so small jobs share nodes and big ones leave part of their last
        node free."""

        def pick(free: NDArray[np.bool_]) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
            size = int(self.rng.choice(JOB_GPU_SIZES, p=JOB_GPU_WEIGHTS / JOB_GPU_WEIGHTS.sum()))
            gpus = self._place(free.reshape(-1, GPUS_PER_NODE), min(size, int(free.sum())))
            return gpus, np.unique(gpus // GPUS_PER_NODE), gpus

        self._fill_with(free_at, t, first, pick)

    def _fill_with(
        self,
        free_at: NDArray[np.float64],
        t: float,
        first: bool,
        pick: Callable[[NDArray[np.bool_]], tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64] | None]],
    ) -> None:
        """Jobs until the cluster is ~90% busy at start (jobs already running) or ~85% after;
        `pick` chooses a job's size and place among the free cells of `free_at` (nodes or GPUs):
        the cells it takes, its nodes, and its GPUs (None: all of its nodes')."""
        total = len(free_at)
        target = int(total * (0.9 if first else 0.85))
        while True:
            free = free_at <= t
            if total - int(free.sum()) >= target or not free.any():
                return
            cells, nodes, gpus = pick(free)
            start = t - float(self.rng.uniform(0, 6 * HOUR)) if first else t + float(self.rng.uniform(0, 600))
            duration = float(np.clip(self.rng.exponential(6 * HOUR), 0.5 * HOUR, 24 * HOUR))
            end = start + duration
            if first and end <= t:
                end = t + float(self.rng.uniform(600, 6 * HOUR))
            # the time it asks for (sbatch --time): its planned run rounded up to whole hours; real users
            # ask for more still (a limit far off only makes the acting side wait less for a job's
            # end, as without a limit)
            limit_end = start + math.ceil((end - start) / HOUR) * HOUR
            reason = "completed"
            drains = [d for n in nodes.tolist() if (d := self._drained(n, start, end)) is not None]
            if drains:
                end, reason = min(drains), "maintenance drain"
                if end <= start:
                    free_at[cells] = end + MAINTENANCE_S
                    continue
            self.jobs.append(
                Job(
                    id=f"job-{self._next_job:05d}",
                    nodes=nodes.astype(np.int64),
                    start=start,
                    end=end,
                    checkpoint_period=float(self.rng.uniform(900, 1800)),
                    checkpoint_phase=float(self.rng.uniform(0, 1800)),
                    intensity=float(self.rng.uniform(0.8, 1.0)),
                    end_reason=reason,
                    gpus=None if gpus is None else gpus.astype(np.int64),
                    limit_end=limit_end,
                )
            )
            self._next_job += 1
            free_at[cells] = end + float(self.rng.uniform(120, 900))

    @staticmethod
    def _place(free: NDArray[np.bool_], size: int) -> NDArray[np.int64]:
        """`size` free GPUs (global indices): whole free nodes first, then best fit."""
        per_node = free.sum(axis=1)
        chosen: list[int] = []
        whole = np.flatnonzero(per_node == GPUS_PER_NODE)
        full_nodes = min(size // GPUS_PER_NODE, len(whole))
        for n in whole[:full_nodes].tolist():
            chosen += range(n * GPUS_PER_NODE, (n + 1) * GPUS_PER_NODE)
        used = set(whole[:full_nodes].tolist())
        while len(chosen) < size:
            need = size - len(chosen)
            order = [n for n in np.argsort(per_node, kind="stable").tolist() if per_node[n] and n not in used]
            fits = [n for n in order if per_node[n] >= need]
            n = fits[0] if fits else order[-1]
            slots = np.flatnonzero(free[n])[:need]
            chosen += (n * GPUS_PER_NODE + slots).tolist()
            used.add(n)
        return np.asarray(sorted(chosen), dtype=np.int64)

    def gpu_job(self, t: float) -> NDArray[np.int64]:
        """Index into `jobs` of the job each GPU runs at t, -1 when idle."""
        if len(self._held) != len(self.jobs):  # planned once; only ends move afterwards
            self._held = [job.gpu_indices() for job in self.jobs]
        out = np.full(self.nodes * GPUS_PER_NODE, -1, dtype=np.int64)
        for j, job in enumerate(self.jobs):
            if job.start <= t < job.end:
                out[self._held[j]] = j
        return out

    def fail_job(self, job: Job, at: float) -> None:
        """A hard fault kills the job after the collective times out."""
        end = at + FAILED_JOB_TIMEOUT_S
        if end < job.end:
            job.end = end
            job.end_reason = "failed"

    def node_job(self, t: float) -> NDArray[np.int64]:
        """Index into `jobs` of the job each node runs at t, -1 when idle."""
        out = np.full(self.nodes, -1, dtype=np.int64)
        for j, job in enumerate(self.jobs):
            if job.start <= t < job.end:
                out[job.nodes] = j
        return out

    def in_checkpoint(self, t: float) -> NDArray[np.bool_]:
        """Per job: is it writing a checkpoint (a one-minute pause) at t."""
        return np.array(
            [((t - j.start - j.checkpoint_phase) % j.checkpoint_period) < CHECKPOINT_S for j in self.jobs],
            dtype=np.bool_,
        )

    def powered_off(self, t: float) -> NDArray[np.bool_]:
        off = np.zeros(self.nodes, dtype=np.bool_)
        for m in self.maintenance:
            if m.start <= t < m.end:
                off[m.nodes] = True
        return off

    def events(self, gpu_indices: bool = True) -> list[dict[str, object]]:
        """The scheduler's log, time-ordered: job starts and ends, maintenance announcements.
        Jobs that hold part of a node name the GPU indices they hold, as Slurm's gres_detail
        does, unless `gpu_indices` is False (a scheduler that names only nodes)."""
        out: list[dict[str, object]] = []
        for job in self.jobs:
            nodes = [self.node_ids[n] for n in job.nodes.tolist()]
            held: dict[str, object] = {}
            if job.gpus is not None and gpu_indices:
                held = {"gpus_by_node": job.held_by_node(self.node_ids)}
            gpus = len(job.gpu_indices())
            if math.isfinite(job.limit_end):
                held["expected_end"] = job.limit_end
            if job.start >= self.t0:
                out.append(
                    {"time": job.start, "type": "job_start", "job": job.id, "nodes": nodes, "gpus": gpus, **held}
                )
            else:  # already running when the record begins: say so at t0
                out.append(
                    {
                        "time": self.t0,
                        "type": "job_running",
                        "job": job.id,
                        "nodes": nodes,
                        "gpus": gpus,
                        "started": job.start,
                        **held,
                    }
                )
            if job.end < self.t_end:
                out.append({"time": job.end, "type": "job_end", "job": job.id, "reason": job.end_reason})
        for m in self.maintenance:
            nodes = [self.node_ids[n] for n in m.nodes.tolist()]
            out.append(
                {
                    "time": max(m.announced, self.t0),
                    "type": "maintenance",
                    "nodes": nodes,
                    "start": m.start,
                    "end": m.end,
                }
            )
        out.sort(key=lambda e: (float(e["time"]), str(e["type"]), str(e.get("job", ""))))  # type: ignore[arg-type]
        return [e for e in out if float(e["time"]) < self.t_end]  # type: ignore[arg-type]
