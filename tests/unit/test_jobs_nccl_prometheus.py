"""NCCL Inspector's Prometheus mode (ingest.jobs.nccl_prometheus), both generations, from NVIDIA/nccl:
- 2.29: inspector_prom.cc at v2.29.7-1 (labels in the order its snprintf writes them; the values of
  the README's example line: comm_id 0xd152c00f111816, hostname pool0-0002, rank 4, ...);
- 2.30+: the README's "Current Metric Format Examples" at 5067397c, verbatim.
Read from the textfile and through the remote-write door (Prometheus adds `instance` and `job`)."""

from __future__ import annotations

import math

import pytest

from ingest.jobs import read_series, read_textfile
from ingest.jobs.exposition import parse_exposition
from ingest.remote_write import (
    Series,
    encode_write_request,
    parse_write_request,
    snappy_compress_literal,
    snappy_decompress,
)

LABELS_229 = (
    'comm_id="0xd152c00f111816",hostname="pool0-0002",rank="4",slurm_job="unknown",slurm_job_id="unknown",'
    'nranks="8",n_nodes="1",gpu_device_id="GPU4",collective="AllReduce",coll_sn="228924",'
    'timestamp="2025-10-17T03:31:47Z",message_size="2.00GB"'
)
PROM_229 = f"""nccl_algorithm_bandwidth_gbs{{{LABELS_229}}} 150.213
nccl_bus_bandwidth_gbs{{{LABELS_229}}} 262.873
nccl_collective_exec_time_microseconds{{{LABELS_229}}} 14297
""".encode()
# README, "Current Metric Format Examples", verbatim
PROM_230 = b"""nccl_bus_bandwidth_gbs{version="v5.1",slurm_job_id="unknown",node="nvl72004-T01",gpu="GPU0",comm_name="DP Group 0",n_nodes="1",nranks="4",collective="AllReduce",message_size="4-5GB",algo_proto="Ring_ll"} 678.263
nccl_collective_exec_time_microseconds{version="v5.1",slurm_job_id="unknown",node="nvl72004-T01",gpu="GPU0",comm_name="DP Group 0",n_nodes="1",nranks="4",collective="AllReduce",message_size="4-5GB",algo_proto="Ring_ll"} 9498.47
nccl_p2p_bus_bandwidth_gbs{version="v5.1",slurm_job_id="unknown",node="nvl72004-T01",gpu="GPU0",comm_name="DP Group 0",n_nodes="1",nranks="4",p2p_operation="Send",message_size="512-513MB"} 464.9
nccl_p2p_exec_time_microseconds{version="v5.1",slurm_job_id="unknown",node="nvl72004-T01",gpu="GPU0",comm_name="DP Group 0",n_nodes="1",nranks="4",p2p_operation="Send",message_size="512-513MB"} 1154.87
"""  # noqa: E501
MTIME_NS = 1_760_671_910 * 10**9


def test_nccl_2_29_one_collective_per_communicator_and_rank() -> None:
    read = read_textfile(PROM_229, MTIME_NS)
    assert read.deadletters == [] and read.summaries == []
    (c,) = read.collectives
    assert (c.node, c.rank, c.n_ranks, c.n_nodes, c.comm, c.seq, c.op) == (
        "pool0-0002",
        4,
        8,
        1,
        "0xd152c00f111816",
        228924,
        "AllReduce",
    )
    assert c.job is None, "slurm_job_id 'unknown' is no job"
    assert (c.algbw_gbs, c.busbw_gbs, c.exec_time_us) == (150.213, 262.873, 14297.0)
    assert c.size_bytes == 2 * 1024**3 and not c.size_exact
    assert c.cuda_device == 4, "GPU4 is the process's CUDA ordinal, kept as such"
    assert c.time_ns == 1760671907 * 10**9, "the dump's own timestamp label, not the scrape's"


def test_the_readme_spelling_n_ranks_is_read_too() -> None:
    read = read_textfile(PROM_229.replace(b'nranks="8"', b'n_ranks="8"'), MTIME_NS)
    assert read.collectives[0].n_ranks == 8


def test_nccl_2_30_aggregates_become_summaries() -> None:
    read = read_textfile(PROM_230, MTIME_NS)
    assert read.deadletters == [] and read.collectives == []
    coll, p2p = sorted(read.summaries, key=lambda s: s.p2p)
    assert (coll.node, coll.cuda_device, coll.comm_name, coll.n_ranks, coll.op, coll.algo_proto) == (
        "nvl72004-T01",
        0,
        "DP Group 0",
        4,
        "AllReduce",
        "Ring_ll",
    )
    assert (coll.busbw_gbs, coll.exec_time_us, coll.size_bucket, coll.size_low_bytes) == (
        678.263,
        9498.47,
        "4-5GB",
        4 * 1024**3,
    )
    assert (p2p.p2p, p2p.op, p2p.size_low_bytes, p2p.busbw_gbs, p2p.version) == (True, "Send", 512 << 20, 464.9, "v5.1")
    assert coll.time_ns == MTIME_NS


def through_the_door(text: bytes, t_ms: int) -> list[Series]:
    """What Prometheus sends after scraping node-exporter's textfile collector: the series with
    `instance` and `job` added, as remote-write 1.0 (snappy protobuf), decoded by the door."""
    scraped = parse_exposition(text, t_ms).series
    for s in scraped:
        s.labels.update({"instance": "pool0-0002:9100", "job": "node"})
    body = snappy_compress_literal(encode_write_request(scraped))
    return parse_write_request(snappy_decompress(body))


def test_through_the_prometheus_door_the_same_records() -> None:
    direct = read_textfile(PROM_229 + PROM_230, MTIME_NS)
    door = read_series(through_the_door(PROM_229 + PROM_230, MTIME_NS // 10**6))
    assert door.deadletters == []
    assert door.collectives == direct.collectives and door.summaries == direct.summaries


def test_a_collective_seen_in_two_scrapes_is_kept_once() -> None:
    twice = through_the_door(PROM_229, 1_760_671_910_000) + through_the_door(PROM_229, 1_760_671_925_000)
    read = read_series(twice)
    assert len(read.collectives) == 1


def test_other_families_are_left_alone() -> None:
    dcgm = Series({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "n1"}, [(40.0, 1)])
    read = read_series([dcgm])
    assert read.counts["other"] == 1 and read.deadletters == [] and read.collectives == []


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (PROM_229.replace(b'hostname="pool0-0002"', b'hostname="unknown"'), "no host name"),
        (PROM_229.replace(b'hostname="pool0-0002"', b'hostname="n[1-9]"'), "rule ids.node.hostlist"),
        (PROM_229.replace(b'slurm_job_id="unknown"', b'slurm_job_id="1 2"'), "rule ids.job.charset"),
        (PROM_229.replace(b'rank="4"', b'rank="8"'), "rank: 8 is outside 0..7"),
        (PROM_229.replace(b'rank="4"', b'rank="-1"'), "not a count"),
        (PROM_229.replace(b'coll_sn="228924"', b'coll_sn="9' + b"9" * 30 + b'"'), "not a count"),
        (PROM_229.replace(b"2.00GB", b"2 gigs"), "not NCCL's size"),
        (PROM_229.replace(b"2025-10-17T03:31:47Z", b"yesterday"), "not the ISO UTC time"),
        (PROM_229.replace(b'comm_id="0xd152c00f111816"', b'comm_id="zz"'), "not a communicator hash"),
        (PROM_230.replace(b'node="nvl72004-T01"', b'node="a,b"'), "rule ids.node.hostlist"),
        (PROM_230.replace(b"4-5GB", b"lots"), "not NCCL's size bucket"),
    ],
)
def test_hostile_series_are_dead_lettered_once_each(text: bytes, reason: str) -> None:
    read = read_textfile(text, MTIME_NS)
    assert read.deadletters, "refused"
    assert all(reason in d.reason for d in read.deadletters), [d.reason for d in read.deadletters]
    assert len(read.deadletters) <= 2, "one per series (2.30: one per summary), never one per sample"


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0])
def test_values_that_are_no_measurement_are_refused(value: float) -> None:
    series = through_the_door(PROM_229, 1_760_671_910_000)
    series[2] = Series(series[2].labels, [(value, 1_760_671_910_000)])  # the exec time
    read = read_series(series)
    assert read.collectives == []
    assert any("negative or not finite" in d.reason for d in read.deadletters)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b'nccl_bus_bandwidth_gbs{a="1",a="2"} 1\n', "label 'a' twice"),
        (b"nccl_bus_bandwidth_gbs{a=1} 1\n", 'not name="value"'),
        (b'nccl_bus_bandwidth_gbs{a="1"}\n', "no value"),
        (b'nccl_bus_bandwidth_gbs{a="1"} 12abc\n', "no value"),
        (b"nccl_bus_bandwidth_gbs" + b"x" * 100_000 + b" 1\n", "over the 65,536"),
        (b'nccl_bus_bandwidth_gbs{a="\xff"} 1\n', "not UTF-8"),
    ],
)
def test_malformed_textfile_lines_are_refused_by_number(line: bytes, reason: str) -> None:
    read = read_textfile(PROM_229 + line, MTIME_NS)
    assert len(read.collectives) == 1
    (letter,) = read.deadletters
    assert letter.reason.startswith("line 4: ") and reason in letter.reason
