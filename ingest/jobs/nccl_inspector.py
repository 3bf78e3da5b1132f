"""NCCL Inspector's JSON lines (NVIDIA's profiler plugin, plugins/profiler/inspector, formerly
ext-profiler/inspector): one object per completed collective per communicator per rank.

The format, as NCCL writes it (inspector_json.cc at NVIDIA/nccl 5067397c, v2.30.7; inspector.cc at
v2.28.3-1, the first release tag that has the plugin; the README's two examples are tests/unit samples):

    {"header":   {"id": "0x7f8c496ae9f661", "comm_name": "DP Group 0", "rank": 2, "n_ranks": 8, "nnodes": 1},
     "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "", "rec_mechanism":
                  "nccl_profiler_interface", "dump_timestamp_us": 1748030377748202,
                  "hostname": "example-hostname", "pid": 1639453},
     "coll_perf": {"coll": "AllReduce", "coll_sn": 1407, "coll_msg_size_bytes": 17179869184,
                   "coll_exec_time_us": 61974, "coll_timing_source": "kernel_gpu",
                   "coll_algobw_gbs": 277.210914, "coll_busbw_gbs": 485.119099}}

- `header.id` is the communicator's hash, "0x%lx" cut to 16 characters (NCCL_COMM_HASH_LENGTH 17);
  `comm_name` is new in 2.30; `nnodes` is an unsigned count.
- 2.30 writes point-to-point operations as their own objects, `p2p_perf` in place of `coll_perf`
  (`p2p`, `p2p_sn`, `p2p_peer`, `p2p_msg_size_bytes`, `p2p_exec_time_us`, `p2p_timing_source`,
  `p2p_algobw_gbs`, `p2p_busbw_gbs`).
- With NCCL_INSPECTOR_DUMP_VERBOSE=1 the perf object also holds `event_trace_sn` and
  `event_trace_ts` (`coll_start_ts`, `coll_stop_ts`, `kernel_events`: per channel, at most 64,
  `channel_id`, `kernel_start_ts`, `kernel_stop_ts`, `kernel_record_ts`; Unix microseconds).
- A double that is NaN is written as the string "nan" (json.cc jsonDouble); the bandwidths are
  then None, counted.
- Files: `<NCCL_INSPECTOR_DUMP_DIR>/<hostname>-pid<pid>.log`, appended to for the life of the
  process (NCCL's README: 200-500 bytes a collective).

The version: every release so far writes "v4.0", and 2.30 added `comm_name` and `p2p_perf` without
changing it, so the string does not say which fields an object holds; the fields do. An object of
another version is read when the fields this reader needs are there and well-formed (counted as
`version:<v>`), and refused naming the field when they are not.

RefusedError, one dead letter per line with the reason: a line over MAX_LINE_BYTES (unread), not UTF-8,
not strict JSON (a duplicate key, NaN, nesting past vocab.bounds.MAX_JSON_DEPTH), a field missing
or of the wrong type, a host name outside the node grammar (vocab.ids), a communicator hash that is
no hash, a rank outside 0..n_ranks-1, counts, sizes and times outside the bounds below.
"""

from __future__ import annotations

import re
from typing import IO, Any

from ingest.jobs._common import (
    INT64_MAX,
    LATEST_NS,
    MAX_RANKS,
    Letters,
    Read,
    RefusedError,
    integer,
    lines,
    node,
    number,
    obj,
    strict_json,
    text,
    time_ns,
)
from ingest.jobs._common import job as checked_job
from ingest.jobs.records import Collective, Trace
from vocab.bounds import MAX_HOSTS

STAGE = "nccl_inspector"
# A verbose line of 64 channels is about 13 KB, a plain one 400 bytes; 64 KiB is room for both and
# the most a line may make this reader hold.
MAX_LINE_BYTES = 64 * 1024
# No rank's share of one collective is larger than a GPU's memory (141 GB H200, 192 GB B200,
# 288 GB B300): 1 TiB is room.
MAX_MESSAGE_BYTES = 1 << 40
# A collective that ran a week is a wrapped or forged count: NCCL's watchdog (10 minutes in
# PyTorch, 30-60 at large sites) ends any real one long before.
MAX_EXEC_TIME_US = 7 * 86_400 * 10**6
# Linux's pid_max is at most 2^22 (include/linux/threads.h PID_MAX_LIMIT).
MAX_PID = 1 << 22
# NCCL's channels (MAX_CHANNELS 64, inspector.h)
MAX_KERNEL_EVENTS = 64
# NCCL's bandwidths are bytes / time; no link moves a petabyte a second.
MAX_BANDWIDTH_GBS = 1e6

_COMM = re.compile(r"0x[0-9a-f]{1,16}")
# NCCL's ncclFuncToString names (AllGather, AllReduce, Broadcast, Recv, Reduce, ReduceScatter,
# SendRecv, Send, All2All, AllGatherV) and any later one of the same shape
_OP = re.compile(r"[A-Za-z][A-Za-z0-9]{0,31}")
_TIMING = re.compile(r"[a-z][a-z_]{0,31}")
_VERSION = re.compile(r"v\d{1,4}\.\d{1,4}")
# free text the framework chose (torch's "DP Group 0"): printable, and NCCL's own 2,047 at most
_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,2047}")
_KNOWN_VERSION = "v4.0"


def read_inspector(source: bytes | IO[bytes], *, job: str | None = None, start: int = 0) -> Read[Collective]:
    """The collectives of an Inspector JSON-lines file (its bytes, or a binary stream positioned
    at `start`). `job`: the scheduler's job the dump directory belongs to (the JSON names none).
    `counts["offset"]` is where to resume: a last line without its newline is still being
    written and is left for the next read."""
    out: Read[Collective] = Read()
    letters = Letters(STAGE, out)
    try:
        job = checked_job(job, "the dump's job")
    except RefusedError as exc:
        letters.add(str(exc), b"")
        letters.close()
        return out
    out.counts["offset"] = start
    for line in lines(source, MAX_LINE_BYTES, start):
        out.counts["offset"] = line.end
        if line.overlong:
            letters.add(
                f"line {line.number}: {line.overlong:,} bytes, over the {MAX_LINE_BYTES:,} a line may be", line.data
            )
            continue
        if not line.data.strip():
            continue
        out.counts["lines"] += 1
        try:
            record = collective(strict_json(line.data), job)
        except RefusedError as exc:
            letters.add(f"line {line.number}: {exc}", line.data)
            continue
        if record.version != _KNOWN_VERSION:
            out.counts[f"version:{record.version}"] += 1
        if record.algbw_gbs is None or record.busbw_gbs is None:
            out.counts["bandwidth_nan"] += 1
        out.records.append(record)
    letters.close()
    return out


def collective(value: Any, job: str | None = None) -> Collective:
    """One Inspector object as a record, or RefusedError naming the field and the rule."""
    top = obj(value, "the line")
    header = obj(top.get("header"), "header")
    meta = obj(top.get("metadata"), "metadata")
    if ("coll_perf" in top) == ("p2p_perf" in top):
        raise RefusedError("expected one of coll_perf (a collective) or p2p_perf (a send or receive)")
    p2p = "p2p_perf" in top
    prefix = "p2p" if p2p else "coll"
    perf = obj(top[f"{prefix}_perf"], f"{prefix}_perf")

    n_ranks = integer(header.get("n_ranks"), "header.n_ranks", 1, MAX_RANKS)
    rank = integer(header.get("rank"), "header.rank", 0, n_ranks - 1)
    n_nodes = integer(header.get("nnodes"), "header.nnodes", 1, min(MAX_HOSTS, n_ranks))
    comm = text(header.get("id"), "header.id", _COMM, "a communicator hash (0x and up to 16 hex digits)")
    name = header.get("comm_name")
    comm_name = None if name is None else text(name, "header.comm_name", _NAME, "printable text of at most 2,047")

    version = text(meta.get("inspector_output_format_version"), "metadata.inspector_output_format_version",
                   _VERSION, "a version (v<major>.<minor>)")  # fmt: skip
    dumped_us = integer(meta.get("dump_timestamp_us"), "metadata.dump_timestamp_us", 0, LATEST_NS // 1000)
    host = node(meta.get("hostname"), "metadata.hostname")
    pid = integer(meta.get("pid"), "metadata.pid", 1, MAX_PID)

    def field(key: str) -> Any:
        return perf.get(f"{prefix}_{key}")

    where = f"{prefix}_perf.{prefix}"
    timing = field("timing_source")
    peer = field("peer")
    return Collective(
        time_ns=time_ns(dumped_us * 1000, "metadata.dump_timestamp_us"),
        job=job,
        node=host,
        pid=pid,
        comm=comm,
        comm_name=comm_name,
        rank=rank,
        n_ranks=n_ranks,
        n_nodes=n_nodes,
        op=text(perf.get(prefix), where, _OP, "an NCCL operation name"),
        p2p=p2p,
        seq=integer(field("sn"), f"{where}_sn", 0, INT64_MAX),
        peer=None if not p2p else integer(peer, f"{where}_peer", 0, n_ranks - 1),
        size_bytes=integer(field("msg_size_bytes"), f"{where}_msg_size_bytes", 0, MAX_MESSAGE_BYTES),
        size_exact=True,
        exec_time_us=integer(field("exec_time_us"), f"{where}_exec_time_us", 0, MAX_EXEC_TIME_US),
        algbw_gbs=_bandwidth(field("algobw_gbs"), f"{where}_algobw_gbs"),
        busbw_gbs=_bandwidth(field("busbw_gbs"), f"{where}_busbw_gbs"),
        timing_source=None if timing is None else text(timing, f"{where}_timing_source", _TIMING, "a timing source"),
        cuda_device=None,
        trace=_trace(perf.get("event_trace_ts"), prefix),
        version=version,
    )


def _bandwidth(value: Any, where: str) -> float | None:
    if value == "nan":  # NCCL's spelling of a NaN double
        return None
    return number(value, where, 0.0, MAX_BANDWIDTH_GBS)


def _trace(value: Any, prefix: str) -> Trace | None:
    if value is None:
        return None
    ts = obj(value, f"{prefix}_perf.event_trace_ts")
    events = ts.get("kernel_events", [])
    if not isinstance(events, list) or len(events) > MAX_KERNEL_EVENTS:
        raise RefusedError(f"event_trace_ts.kernel_events: expected a list of at most {MAX_KERNEL_EVENTS} channels")
    starts, stops = [], []
    for i, event in enumerate(events):
        kernel = obj(event, f"event_trace_ts.kernel_events[{i}]")
        starts.append(_micros(kernel.get("kernel_start_ts"), f"event_trace_ts.kernel_events[{i}].kernel_start_ts"))
        stops.append(_micros(kernel.get("kernel_stop_ts"), f"event_trace_ts.kernel_events[{i}].kernel_stop_ts"))
    seen_starts = [t for t in starts if t is not None]
    seen_stops = [t for t in stops if t is not None]
    return Trace(
        issued_ns=_micros(ts.get(f"{prefix}_start_ts"), f"event_trace_ts.{prefix}_start_ts"),
        stopped_ns=_micros(ts.get(f"{prefix}_stop_ts"), f"event_trace_ts.{prefix}_stop_ts"),
        kernel_start_ns=min(seen_starts) if seen_starts else None,
        kernel_stop_ns=max(seen_stops) if seen_stops else None,
        channels=len(events),
    )


def _micros(value: Any, where: str) -> int | None:
    """A trace time (Unix microseconds) in ns; 0 or absent is an event NCCL did not see."""
    if value is None:
        return None
    micros = integer(value, where, 0, LATEST_NS // 1000)
    return None if micros == 0 else time_ns(micros * 1000, where)
