"""PyTorch's NCCL flight recorder: one rank's last collectives with their state, in its JSON form.

Turned on by TORCH_NCCL_TRACE_BUFFER_SIZE=N (N > 0: a ring of N entries; TORCH_FR_BUFFER_SIZE in
newer releases); with TORCH_NCCL_DUMP_ON_TIMEOUT=1 every rank writes its ring when the watchdog
fires, to `<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>` (default `/tmp/nccl_trace_rank_<rank>`). That
file is a *pickle* (the tutorial, pytorch/tutorials prototype_source/flight_recorder_tutorial.rst:
"Flight Recorder files are dumped in pickle format"; FlightRecorderDetail.hpp `dump` ends in
`pickle_str`). Unpickling runs whatever code the bytes name, so this reader never does: a pickle is
refused by its first byte (protocol 2+ starts with 0x80, the PROTO opcode; protocol 0 and 1 with
an opcode letter), as is anything that is not a JSON object, with the reason and how to get JSON.

The JSON form is what `torch._C._distributed_c10d._dump_nccl_trace_json(includeCollectives,
onlyActive)` returns (torch 2.5+; `_dump_fr_trace_json` in 2.8+) and the control plane's
`dump_nccl_trace_json` handler serves (FlightRecorderDetail.hpp `dump_json`, version "2.10" at
pytorch/pytorch cb41e3a4; FlightRecorder.hpp's key constants):

    {"version": "2.10", "comm_lib_version": "2.27.5",
     "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
     "pg_status": {"0": {"last_enqueued_collective": "2", "last_started_collective": "-1",
                         "last_completed_collective": "2"}},
     "entries": [{"record_id": 0, "pg_id": 0, "process_group": ["0", "default_pg"],
                  "collective_seq_id": 1, "p2p_seq_id": 0, "op_id": 1,
                  "profiling_name": "nccl:all_reduce", "time_created_ns": 1724779239936775119,
                  "duration_ms": 0.43, "input_sizes": [[3, 4]], "input_dtypes": ["Float"],
                  "output_sizes": [[3, 4]], "output_dtypes": ["Float"], "state": "completed",
                  "time_discovered_started_ns": 0, "time_discovered_completed_ns": 1724779239975811724,
                  "retired": true, "timeout_ms": 600000, "is_p2p": false,
                  "thread_name": "pt_main_thread", "thread_id": "140245"}],
     "nccl_comm_state": {...}}

Version 2.7 named `comm_lib_version` `nccl_version` (FlightRecorder.hpp at 2.7): both are read.
pg_config's ranks and pg_status's counters are strings in JSON (ints in the pickle); a time the
watchdog did not see is 0 in JSON (None in the pickle); `entries` is absent when the ring is
empty. The dump names neither its rank nor its host: the rank is the file name's suffix, the
host and job the caller's (where the dump was collected).

Versions: FlightRecorder.hpp says "minor when adding fields, major when changing existing
fields": any 2.x is read (a newer minor only adds fields), another major is refused by name.
RefusedError whole: a pickle or anything but a JSON object, not strict JSON (duplicate keys, NaN, too
deep), over MAX_DUMP_BYTES, another major version, a malformed pg_config or pg_status, more than
MAX_ENTRIES entries. RefusedError one by one (the rest of the dump is read): an entry missing a field
or with one of the wrong type or out of range.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ingest.jobs._common import (
    INT64_MAX,
    LATEST_NS,
    MAX_RANKS,
    Letters,
    Read,
    RefusedError,
    integer,
    number,
    obj,
    strict_json,
    text,
    time_ns,
)
from ingest.jobs._common import job as checked_job
from ingest.jobs._common import node as checked_node
from ingest.jobs.records import FlightDump, FlightEntry, GroupStatus
from vocab.bounds import BoundError, read_bytes

STAGE = "flight_recorder"
DEFAULT_PREFIX = "nccl_trace_rank_"  # TORCH_NCCL_DEBUG_INFO_TEMP_FILE's default, /tmp/nccl_trace_rank_
# A ring of 2,000 entries (the tutorial's recommended TORCH_NCCL_TRACE_BUFFER_SIZE) is under 2 MB
# of JSON; a site raising it to 100,000 writes ~100 MB.
MAX_DUMP_BYTES = 256 << 20
MAX_ENTRIES = 200_000
# tensors of one collective (an all_gather into a list has one per rank) and the dimensions of one
MAX_TENSORS = 100_000
MAX_DIMS = 16
STATES = frozenset({"scheduled", "started", "completed"})
_VERSION = re.compile(r"(\d{1,4})\.(\d{1,4})")
_NAME = re.compile(r"[^\x00-\x1f\x7f]{0,1024}")
_OP = re.compile(r"[A-Za-z0-9_:.\-]{1,128}")  # "nccl:all_reduce", "nccl:coalesced"
_RANKS = re.compile(r"\[(\d{1,7}(?:, ?\d{1,7})*)?\]")
_RANK_SUFFIX = re.compile(r"\d{1,7}")
# the pickle protocols' first bytes: PROTO (0x80, protocol 2+); protocol 0/1's usual openers
# (MARK, EMPTY_DICT, EMPTY_LIST, GLOBAL, ...): checked only to say "a pickle" rather than "not JSON"
_PICKLE_0_1 = frozenset(b"(}]cdl")


def read_flight_recorder(
    data: bytes, *, rank: int, job: str | None = None, node: str | None = None
) -> Read[FlightDump]:
    """One rank's dump (its bytes) as a FlightDump, or dead letters saying why not."""
    out: Read[FlightDump] = Read()
    letters = Letters(STAGE, out)
    try:
        out.records.append(_dump(data, rank, checked_job(job, "job"), _node(node), letters, out))
    except RefusedError as exc:
        letters.add(str(exc), data)
    letters.close()
    return out


def read_flight_recorder_file(
    path: Path, *, prefix: str = DEFAULT_PREFIX, job: str | None = None, node: str | None = None
) -> Read[FlightDump]:
    """A dump file named `<prefix><rank>` (as TORCH_NCCL_DEBUG_INFO_TEMP_FILE makes them)."""
    rank = rank_of(path.name, prefix)
    if rank is None:
        out: Read[FlightDump] = Read()
        Letters(STAGE, out).add(f"{path.name!r} is not {prefix}<rank>: the dump's rank is unknown", b"")
        return out
    try:
        data = read_bytes(path, MAX_DUMP_BYTES, "flight-recorder dump")
    except BoundError as exc:
        out = Read()
        Letters(STAGE, out).add(str(exc), b"")
        return out
    return read_flight_recorder(data, rank=rank, job=job, node=node)


def rank_of(name: str, prefix: str = DEFAULT_PREFIX) -> int | None:
    suffix = name.removeprefix(prefix) if name.startswith(prefix) else ""
    return int(suffix) if _RANK_SUFFIX.fullmatch(suffix) else None


def refusal_of_bytes(data: bytes) -> str | None:
    """Why `data` cannot be a JSON dump, judged by its first bytes alone (nothing is decoded)."""
    if data[:1] == b"\x80":
        protocol = data[1] if len(data) > 1 else -1
        return (
            f"a pickle (protocol {protocol}): the flight recorder's default dump, which the service never "
            "unpickles (unpickling runs code the file names); dump JSON instead: "
            "torch._C._distributed_c10d._dump_nccl_trace_json()"
        )
    head = data.lstrip(b" \t\r\n")[:1]
    if head == b"{":
        return None
    if head and head[0] in _PICKLE_0_1:
        return "not a JSON object: a pickle (protocol 0 or 1) by its first byte; never unpickled, dump JSON instead"
    return "not a JSON object (the flight recorder's JSON dump is one object)"


def _node(node: str | None) -> str | None:
    return None if node is None else checked_node(node, "node")


def _dump(
    data: bytes, rank: int, job: str | None, node: str | None, letters: Letters, out: Read[FlightDump]
) -> FlightDump:
    integer(rank, "rank", 0, MAX_RANKS - 1)
    if len(data) > MAX_DUMP_BYTES:
        raise RefusedError(f"{len(data):,} bytes, over the {MAX_DUMP_BYTES:,} a dump may be")
    if problem := refusal_of_bytes(data):
        raise RefusedError(problem)
    top = obj(strict_json(data), "the dump")
    version = text(top.get("version"), "version", _VERSION, "a version (<major>.<minor>)")
    if not version.startswith("2."):
        raise RefusedError(
            f"version {version}: another major version than 2 changes existing fields (FlightRecorder.hpp)"
        )
    lib = top.get("comm_lib_version", top.get("nccl_version"))  # "nccl_version" in 2.7
    entries = top.get("entries", [])
    if not isinstance(entries, list) or len(entries) > MAX_ENTRIES:
        raise RefusedError(f"entries: expected a list of at most {MAX_ENTRIES:,}")
    kept: list[FlightEntry] = []
    for i, raw in enumerate(entries):
        try:
            kept.append(_entry(raw, f"entries[{i}]"))
        except RefusedError as exc:
            letters.add(f"rank {rank}: {exc}", repr(raw).encode("utf-8", "backslashreplace"))
    out.counts["entries"] += len(kept)
    return FlightDump(
        job=job,
        node=node,
        rank=rank,
        version=version,
        comm_lib_version=None if lib is None else text(lib, "comm_lib_version", _OP, "a version"),
        groups=_groups(top.get("pg_config", {})),
        status=_status(top.get("pg_status", {})),
        entries=tuple(kept),
    )


def _groups(value: Any) -> dict[str, tuple[str, tuple[int, ...]]]:
    groups: dict[str, tuple[str, tuple[int, ...]]] = {}
    for key, raw in obj(value, "pg_config").items():
        group = obj(raw, f"pg_config[{key!r}]")
        ranks = group.get("ranks")
        if isinstance(ranks, str):  # JSON: "[0, 1]"
            if not _RANKS.fullmatch(ranks):
                raise RefusedError(f"pg_config[{key!r}].ranks: not a list of ranks")
            ranks = [int(r) for r in ranks.strip("[]").split(",") if r.strip()]
        if not isinstance(ranks, list) or len(ranks) > MAX_RANKS:
            raise RefusedError(f"pg_config[{key!r}].ranks: expected a list of ranks")
        desc = group.get("desc", "")
        groups[text(key, "pg_config key", _NAME, "a group name")] = (
            text(desc, f"pg_config[{key!r}].desc", _NAME, "printable text"),
            tuple(integer(r, f"pg_config[{key!r}].ranks", 0, MAX_RANKS - 1) for r in ranks),
        )
    return groups


def _status(value: Any) -> dict[int, GroupStatus]:
    status: dict[int, GroupStatus] = {}
    for key, raw in obj(value, "pg_status").items():
        group = obj(raw, f"pg_status[{key!r}]")
        seq = [_counter(group.get(f"last_{what}_collective"), f"pg_status[{key!r}].last_{what}_collective")
               for what in ("enqueued", "started", "completed")]  # fmt: skip
        status[_counter(key, "pg_status key", low=0)] = GroupStatus(*seq)
    return status


def _counter(value: Any, where: str, low: int = -1) -> int:
    """An int, or the decimal string JSON dumps carry it as."""
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,19}", value):
        value = int(value)
    return integer(value, where, low, INT64_MAX)


def _entry(value: Any, where: str) -> FlightEntry:
    e = obj(value, where)
    group = e.get("process_group")
    if not isinstance(group, list) or len(group) != 2:
        raise RefusedError(f"{where}.process_group: expected [name, desc]")
    state = e.get("state")
    if state not in STATES:
        raise RefusedError(f"{where}.state: {state!r} is none of {sorted(STATES)}")
    duration = e.get("duration_ms")
    p2p_seq, op_id, timeout, retired = (e.get(k) for k in ("p2p_seq_id", "op_id", "timeout_ms", "retired"))
    if retired is not None and not isinstance(retired, bool):
        raise RefusedError(f"{where}.retired: expected a boolean")
    is_p2p = e.get("is_p2p", False)
    if not isinstance(is_p2p, bool):
        raise RefusedError(f"{where}.is_p2p: expected a boolean")
    return FlightEntry(
        record_id=integer(e.get("record_id"), f"{where}.record_id", 0, INT64_MAX),
        pg_id=integer(e.get("pg_id"), f"{where}.pg_id", 0, INT64_MAX),
        pg_name=text(group[0], f"{where}.process_group[0]", _NAME, "a group name"),
        pg_desc=text(group[1], f"{where}.process_group[1]", _NAME, "printable text"),
        collective_seq_id=integer(e.get("collective_seq_id"), f"{where}.collective_seq_id", 0, INT64_MAX),
        p2p_seq_id=None if p2p_seq is None else integer(p2p_seq, f"{where}.p2p_seq_id", 0, INT64_MAX),
        op_id=None if op_id is None else integer(op_id, f"{where}.op_id", 0, INT64_MAX),
        op=text(e.get("profiling_name"), f"{where}.profiling_name", _OP, "an operation name"),
        is_p2p=is_p2p,
        state=state,
        created_ns=time_ns(
            integer(e.get("time_created_ns"), f"{where}.time_created_ns", 0, LATEST_NS), f"{where}.time_created_ns"
        ),
        started_ns=_seen(e.get("time_discovered_started_ns"), f"{where}.time_discovered_started_ns"),
        completed_ns=_seen(e.get("time_discovered_completed_ns"), f"{where}.time_discovered_completed_ns"),
        duration_ms=None if duration is None else number(duration, f"{where}.duration_ms", 0.0, 7 * 86_400_000.0),
        timeout_ms=None if timeout is None else integer(timeout, f"{where}.timeout_ms", 0, INT64_MAX),
        retired=retired,
        input_sizes=_sizes(e.get("input_sizes", []), f"{where}.input_sizes"),
        output_sizes=_sizes(e.get("output_sizes", []), f"{where}.output_sizes"),
    )


def _seen(value: Any, where: str) -> int | None:
    """A time the watchdog saw, or None (0 in JSON, None in the pickle)."""
    if value is None or value == 0:
        return None
    return time_ns(integer(value, where, 0, LATEST_NS), where)


def _sizes(value: Any, where: str) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, list) or len(value) > MAX_TENSORS:
        raise RefusedError(f"{where}: expected a list of at most {MAX_TENSORS:,} tensor shapes")
    shapes = []
    for i, shape in enumerate(value):
        if not isinstance(shape, list) or len(shape) > MAX_DIMS:
            raise RefusedError(f"{where}[{i}]: expected a shape of at most {MAX_DIMS} dimensions")
        shapes.append(tuple(integer(d, f"{where}[{i}]", 0, INT64_MAX) for d in shape))
    return tuple(shapes)
