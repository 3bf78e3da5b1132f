"""The typed records the job-signal doors produce: what the generator writes and the detectors read.

One record per collective per rank (`Collective`), whichever door it came through (NCCL
Inspector's JSON lines, or its per-collective Prometheus metrics of NCCL 2.29); a per-GPU summary
(`CollectiveSummary`) where NCCL 2.30's Prometheus mode aggregates the collectives and leaves
out the rank and sequence number; one record per training step per rank (`Step`); and a rank's
flight-recorder dump (`FlightDump`) with its last collectives and their state.

Times are event times in Unix nanoseconds. Ids passed the id grammar (vocab.ids) at the door; a
job, a rank's GPU or a host the format does not carry is None, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Trace:
    """NCCL Inspector's verbose event trace of one collective (NCCL_INSPECTOR_DUMP_VERBOSE=1):
    when the rank issued it and when its kernels ran, CPU clock (Unix ns; None where NCCL saw no
    event)."""

    issued_ns: int | None  # coll_start_ts: the rank entered the collective
    stopped_ns: int | None  # coll_stop_ts
    kernel_start_ns: int | None  # the earliest channel's kernel_start_ts
    kernel_stop_ns: int | None  # the latest channel's kernel_stop_ts
    channels: int


@dataclass(frozen=True, slots=True)
class Collective:
    time_ns: int  # when NCCL wrote it (dump_timestamp_us; the dump's time in Prometheus mode)
    job: str | None  # the scheduler's job (the dump directory's, or slurm_job_id)
    node: str  # the host the rank ran on (NCCL's gethostname)
    pid: int | None
    comm: str  # the communicator's hash, "0x..." (header.id, comm_id)
    comm_name: str | None  # the name the framework gave it (NCCL 2.30+), free text
    rank: int
    n_ranks: int
    n_nodes: int
    op: str  # NCCL's name: AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, Send, Recv, ...
    p2p: bool
    seq: int  # coll_sn (p2p_sn): the communicator's count of collectives, the same on every rank
    peer: int | None  # the other rank of a Send/Recv
    size_bytes: int  # the message, per rank (coll_msg_size_bytes)
    size_exact: bool  # False where only Prometheus's rounded label ("2.00GB") said it
    exec_time_us: float
    algbw_gbs: float | None  # None where NCCL wrote "nan"
    busbw_gbs: float | None
    timing_source: str | None  # kernel_gpu | kernel_cpu | collective_cpu
    cuda_device: int | None  # the process's CUDA ordinal ("GPU4"), not NVML's index
    trace: Trace | None
    version: str | None  # inspector_output_format_version


@dataclass(frozen=True, slots=True)
class CollectiveSummary:
    """NCCL 2.30+'s Prometheus mode: the collectives one GPU ran since the last dump, per
    communicator name, operation, size bucket and algorithm: the geometric mean of their bus
    bandwidth and the mean of their execution time. No rank, no communicator hash, no sequence."""

    time_ns: int
    job: str | None
    node: str
    cuda_device: int | None
    comm_name: str | None
    n_ranks: int
    n_nodes: int
    op: str
    p2p: bool
    size_bucket: str  # NCCL's label, "4-5GB"
    size_low_bytes: int  # the bucket's lower bound
    algo_proto: str | None  # "Ring_LL"
    busbw_gbs: float | None
    exec_time_us: float | None
    version: str | None


@dataclass(frozen=True, slots=True)
class Step:
    time_ns: int  # when the step ended: the job's progress
    job: str | None
    rank: int | None
    node: str | None
    gpu: str | None  # the GPU's entity id, <node>-gpu<i>, where the writer named its index
    step: int
    duration_s: float
    phase: str  # the loop's own word: train, eval, checkpoint...


@dataclass(frozen=True, slots=True)
class FlightEntry:
    record_id: int
    pg_id: int
    pg_name: str
    pg_desc: str
    collective_seq_id: int
    p2p_seq_id: int | None
    op_id: int | None
    op: str  # profiling_name, "nccl:all_reduce"
    is_p2p: bool
    state: str  # scheduled | started | completed
    created_ns: int
    started_ns: int | None  # when the watchdog saw it start (time_discovered_started_ns)
    completed_ns: int | None
    duration_ms: float | None
    timeout_ms: int | None
    retired: bool | None
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """pg_status: the group's last collective enqueued, started and completed (-1: none yet)."""

    last_enqueued: int
    last_started: int
    last_completed: int


@dataclass(frozen=True, slots=True)
class FlightDump:
    """One rank's flight-recorder dump."""

    job: str | None
    node: str | None
    rank: int
    version: str
    comm_lib_version: str | None
    groups: dict[str, tuple[str, tuple[int, ...]]]  # pg_config: name -> (desc, global ranks)
    status: dict[int, GroupStatus]  # pg_status by pg_id
    entries: tuple[FlightEntry, ...]  # in the order recorded

    def last_collectives(self) -> dict[int, FlightEntry]:
        """Per process group (pg_id), the rank's last collective (the highest collective_seq_id,
        then record_id) with its state: where a hung rank stopped."""
        last: dict[int, FlightEntry] = {}
        for entry in self.entries:
            if entry.is_p2p:
                continue
            held = last.get(entry.pg_id)
            if held is None or (entry.collective_seq_id, entry.record_id) > (held.collective_seq_id, held.record_id):
                last[entry.pg_id] = entry
        return last
