"""NCCL Inspector's Prometheus mode (NCCL_INSPECTOR_PROM_DUMP=1): node-exporter textfiles, one per
GPU, as they arrive through the Prometheus door (remote-write `Series`, ingest.remote_write) or read
straight from the file (ingest.jobs.exposition). Two generations, told apart by their labels:

- NCCL 2.29 (inspector_prom.cc at v2.29.3-1 and v2.29.7-1): each dump writes the communicator's
  latest completed collective, three metrics with the same labels:
  `nccl_algorithm_bandwidth_gbs`, `nccl_bus_bandwidth_gbs`, `nccl_collective_exec_time_microseconds`
  {comm_id, hostname, rank, slurm_job, slurm_job_id, nranks, n_nodes, gpu_device_id="GPU4",
  collective, coll_sn, timestamp="2025-10-17T03:31:47Z", message_size="2.00GB"}. (Its README says
  `n_ranks`, `pid` and `coll_timing_source`; the code writes `nranks` and neither of the others:
  both spellings of the rank count are read.) Each becomes a `Collective`, the message size from
  the rounded label (`size_exact` False).
- NCCL 2.30 (inspector_prom.cc at v2.30.3-1 to 5067397c): per GPU, an aggregate of the dump's
  collectives, `nccl_bus_bandwidth_gbs` (geometric mean) and
  `nccl_collective_exec_time_microseconds` (mean) {version="v5.1", slurm_job_id, node, gpu="GPU0",
  comm_name, n_nodes, nranks, collective, message_size="4-5GB", algo_proto="Ring_LL"}, and the
  same for `nccl_p2p_bus_bandwidth_gbs` / `nccl_p2p_exec_time_microseconds` with `p2p_operation`.
  No rank, communicator hash or sequence number: each (series, time) becomes a
  `CollectiveSummary`.

Both write "unknown" for a label they could not fill (no SLURM_JOB_ID, gethostname failing): the
job is then None, and a host "unknown" is refused (no node to name). `gpu_device_id` / `gpu` is the
process's CUDA ordinal, which is NVML's index only when the process sees every GPU (a job that
sets CUDA_VISIBLE_DEVICES per rank sees its one GPU as GPU0): it is kept as `cuda_device`, never
made a GPU id; the scheduler's allocation says which GPU a rank holds.

Prometheus's own labels (`instance`, and `job`, the scrape job, no scheduler's) are ignored. The
2.29 file is rewritten every dump (30 s at least) and scraped more often, so one collective comes
again in each scrape until the next dump: repeats within a read are dropped and counted
(`repeated`), across reads they are the detector's to drop by (comm, rank, seq).

RefusedError, one dead letter per series (never per sample): a series of these names whose labels
are missing or outside the grammar (host, job), counts, ranks and sizes outside the bounds of
ingest.jobs.nccl_inspector, non-finite or negative values.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ingest.deadletter import DeadLetter
from ingest.jobs._common import MAX_RANKS, Letters, Read, RefusedError, integer, node, time_ns
from ingest.jobs._common import job as checked_job
from ingest.jobs.exposition import parse_exposition
from ingest.jobs.nccl_inspector import MAX_BANDWIDTH_GBS, MAX_EXEC_TIME_US, MAX_MESSAGE_BYTES
from ingest.jobs.records import Collective, CollectiveSummary
from ingest.remote_write import Series
from vocab.bounds import MAX_HOSTS
from vocab.ids import shown

STAGE = "nccl_prometheus"
COLLECTIVE_METRICS = {  # 2.29: metric -> the record's field
    "nccl_algorithm_bandwidth_gbs": "algbw",
    "nccl_bus_bandwidth_gbs": "busbw",
    "nccl_collective_exec_time_microseconds": "exec",
}
SUMMARY_METRICS = {  # 2.30+: metric -> (field, p2p)
    "nccl_bus_bandwidth_gbs": ("busbw", False),
    "nccl_collective_exec_time_microseconds": ("exec", False),
    "nccl_p2p_bus_bandwidth_gbs": ("busbw", True),
    "nccl_p2p_exec_time_microseconds": ("exec", True),
}
METRICS = frozenset(COLLECTIVE_METRICS) | frozenset(SUMMARY_METRICS)
_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
_SIZE_229 = re.compile(r"(\d{1,4})B|(\d{1,4}\.\d{2})(KB|MB|GB|TB)")
_SIZE_230 = re.compile(r"0B|(\d{1,4})-\d{1,4}(B|KB|MB|GB|TB)")
_COMM = re.compile(r"0x[0-9a-f]{1,16}")
_OP = re.compile(r"[A-Za-z][A-Za-z0-9]{0,31}")
_GPU = re.compile(r"GPU(\d{1,3})")
_WORD = re.compile(r"[A-Za-z0-9_.+-]{1,64}")
_FREE = re.compile(r"[^\x00-\x1f\x7f]{1,2047}")


@dataclass(slots=True)
class PromRead:
    """What one read of the Inspector's Prometheus series became."""

    collectives: list[Collective] = field(default_factory=list)  # NCCL 2.29
    summaries: list[CollectiveSummary] = field(default_factory=list)  # NCCL 2.30+
    deadletters: list[DeadLetter] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)


def read_series(series: Iterable[Series]) -> PromRead:
    """The Inspector's series among `series` (others are counted as `other`, untouched)."""
    return _read(series, ())


def read_textfile(data: bytes, mtime_ns: int) -> PromRead:
    """An Inspector .prom file read directly; its samples carry no time, so they take the
    file's modification time (when NCCL wrote it)."""
    parsed = parse_exposition(data, mtime_ns // 1_000_000)
    return _read(parsed.series, parsed.rejects)


def _read(series: Iterable[Series], rejects: Iterable[tuple[int, str, bytes]]) -> PromRead:
    out = PromRead()
    held: Read[None] = Read(deadletters=out.deadletters, counts=out.counts)
    letters = Letters(STAGE, held)
    for number, reason, raw in rejects:
        letters.add(f"line {number}: {reason}", raw)
    per_coll: dict[tuple[tuple[str, str], ...], dict[str, float]] = {}
    per_sum: dict[tuple[tuple[tuple[str, str], ...], int], dict[str, float]] = {}
    for s in series:
        name = s.labels.get("__name__", "")
        if name not in METRICS:
            out.counts["other"] += 1
            continue
        out.counts["series"] += 1
        values = [(v, t) for v, t in s.samples if math.isfinite(v) and v >= 0]
        if len(values) < len(s.samples):
            letters.add(
                f"{name}: {len(s.samples) - len(values)} of {len(s.samples)} samples negative or not finite", _text(s)
            )
        per_sample = "coll_sn" in s.labels and "comm_id" in s.labels
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("__name__", "instance", "job")))
        if per_sample and name in COLLECTIVE_METRICS:
            for v, _ in values[-1:]:  # one collective a series: the latest sample says it
                per_coll.setdefault(key, {})[COLLECTIVE_METRICS[name]] = v
        elif not per_sample and name in SUMMARY_METRICS:
            field_, p2p = SUMMARY_METRICS[name]
            for v, t in values:
                per_sum.setdefault(((*key, ("__p2p__", str(p2p))), t), {})[field_] = v
        else:
            letters.add(f"{name}: labels of neither NCCL 2.29 (comm_id, coll_sn) nor 2.30 (no coll_sn)", _text(s))
    seen: set[tuple[str, int, int]] = set()
    for key, fields in per_coll.items():
        try:
            record = _collective(dict(key), fields)
        except RefusedError as exc:
            letters.add(str(exc), _labels_text(key))
            continue
        if (record.comm, record.rank, record.seq) in seen:
            out.counts["repeated"] += 1
            continue
        seen.add((record.comm, record.rank, record.seq))
        out.collectives.append(record)
    for (key, t), fields in per_sum.items():
        try:
            out.summaries.append(_summary(dict(key), fields, t))
        except RefusedError as exc:
            letters.add(str(exc), _labels_text(key))
    letters.close()
    return out


def _collective(labels: dict[str, str], fields: dict[str, float]) -> Collective:
    if "exec" not in fields:
        raise RefusedError("no nccl_collective_exec_time_microseconds for this collective")
    n_ranks = _int(labels, ("nranks", "n_ranks"), 1, MAX_RANKS)
    stamp = labels.get("timestamp")
    when = _iso(stamp) if stamp else None
    if when is None:
        raise RefusedError(f"timestamp {shown(stamp or '')}: not the ISO UTC time NCCL writes")
    return Collective(
        time_ns=time_ns(when, "timestamp"),
        job=_job(labels),
        node=_node(labels, "hostname"),
        pid=None,
        comm=_match(labels, "comm_id", _COMM, "a communicator hash"),
        comm_name=None,
        rank=_int(labels, ("rank",), 0, n_ranks - 1),
        n_ranks=n_ranks,
        n_nodes=_int(labels, ("n_nodes",), 1, min(MAX_HOSTS, n_ranks)),
        op=_match(labels, "collective", _OP, "an NCCL operation name"),
        p2p=False,
        seq=_int(labels, ("coll_sn",), 0, 2**63 - 1),
        peer=None,
        size_bytes=_size_229(labels.get("message_size", "")),
        size_exact=False,
        exec_time_us=_bounded(fields["exec"], "nccl_collective_exec_time_microseconds", MAX_EXEC_TIME_US),
        algbw_gbs=_opt(fields.get("algbw"), "nccl_algorithm_bandwidth_gbs"),
        busbw_gbs=_opt(fields.get("busbw"), "nccl_bus_bandwidth_gbs"),
        timing_source=None,
        cuda_device=_cuda(labels, "gpu_device_id"),
        trace=None,
        version=None,
    )


def _summary(labels: dict[str, str], fields: dict[str, float], t_ms: int) -> CollectiveSummary:
    n_ranks = _int(labels, ("nranks", "n_ranks"), 1, MAX_RANKS)
    p2p = labels.get("__p2p__") == "True"
    bucket = labels.get("message_size", "")
    version = labels.get("version")
    algo = labels.get("algo_proto")
    return CollectiveSummary(
        time_ns=time_ns(t_ms * 1_000_000, "the sample's time"),
        job=_job(labels),
        node=_node(labels, "node"),
        cuda_device=_cuda(labels, "gpu"),
        comm_name=_free(labels.get("comm_name")),
        n_ranks=n_ranks,
        n_nodes=_int(labels, ("n_nodes",), 1, min(MAX_HOSTS, n_ranks)),
        op=_match(labels, "p2p_operation" if p2p else "collective", _OP, "an NCCL operation name"),
        p2p=p2p,
        size_bucket=bucket,
        size_low_bytes=_size_230(bucket),
        algo_proto=None if algo in (None, "unknown") else _match(labels, "algo_proto", _WORD, "an algo_proto word"),
        busbw_gbs=_opt(fields.get("busbw"), "bus bandwidth"),
        exec_time_us=None if "exec" not in fields else _bounded(fields["exec"], "exec time", MAX_EXEC_TIME_US),
        version=None if version is None else _match(labels, "version", _WORD, "a version word"),
    )


def _int(labels: dict[str, str], keys: tuple[str, ...], low: int, high: int) -> int:
    for key in keys:
        if key in labels:
            value = labels[key]
            if not value.isascii() or not value.isdigit() or len(value) > 19:
                raise RefusedError(f"{key} {shown(value)}: not a count")
            return integer(int(value), key, low, high)
    raise RefusedError(f"no {' or '.join(keys)} label")


def _match(labels: dict[str, str], key: str, pattern: re.Pattern[str], what: str) -> str:
    value = labels.get(key)
    if value is None:
        raise RefusedError(f"no {key} label")
    if not pattern.fullmatch(value):
        raise RefusedError(f"{key} {shown(value)}: not {what}")
    return value


def _node(labels: dict[str, str], key: str) -> str:
    value = labels.get(key)
    if value in (None, "unknown"):
        raise RefusedError(f"no host name ({key} {shown(value or '')}: NCCL writes 'unknown' when gethostname fails)")
    return node(value, key)


def _job(labels: dict[str, str]) -> str | None:
    value = labels.get("slurm_job_id")
    return None if value in (None, "unknown") else checked_job(value, "slurm_job_id")


def _cuda(labels: dict[str, str], key: str) -> int | None:
    match = _GPU.fullmatch(labels.get(key, ""))
    return None if match is None else int(match.group(1))


def _free(value: str | None) -> str | None:
    if value in (None, "unknown"):
        return None
    if not _FREE.fullmatch(value):
        raise RefusedError(f"comm_name {shown(value)}: not printable text of at most 2,047")
    return value


def _bounded(value: float, what: str, high: float) -> float:
    if value > high:
        raise RefusedError(f"{what} {value:g} is over {high:g}")
    return value


def _opt(value: float | None, what: str) -> float | None:
    return None if value is None else _bounded(value, what, MAX_BANDWIDTH_GBS)


def _size_229(label: str) -> int:
    """2.29's human-readable size, "%zuB" under 1 KiB and "%.2f<unit>" (1,024-based) above."""
    match = _SIZE_229.fullmatch(label)
    if match is None:
        raise RefusedError(f"message_size {shown(label)}: not NCCL's size (512B, 2.00GB)")
    size = int(match.group(1)) if match.group(1) else round(float(match.group(2)) * _UNITS[match.group(3)])
    return integer(size, "message_size", 0, MAX_MESSAGE_BYTES)


def _size_230(label: str) -> int:
    """2.30's bucket, "<low>-<low+1><unit>" (1,024-based) or "0B": its lower bound in bytes."""
    match = _SIZE_230.fullmatch(label)
    if match is None:
        raise RefusedError(f"message_size {shown(label)}: not NCCL's size bucket (0B, 4-5GB)")
    size = 0 if match.group(1) is None else int(match.group(1)) * _UNITS[match.group(2)]
    return integer(size, "message_size", 0, MAX_MESSAGE_BYTES)


def _iso(value: str) -> int | None:
    try:
        when = datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return int(when.timestamp()) * 10**9


def _text(s: Series) -> bytes:
    return _labels_text(tuple(sorted(s.labels.items())))


def _labels_text(key: tuple[tuple[str, str], ...]) -> bytes:
    labels = dict(key)
    name = labels.pop("__name__", "nccl")
    body = ",".join(f'{k}="{v}"' for k, v in labels.items() if not k.startswith("__"))
    return f"{name}{{{body}}}".encode("utf-8", "backslashreplace")
