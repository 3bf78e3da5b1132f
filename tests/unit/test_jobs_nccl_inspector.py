"""NCCL Inspector's JSON lines (ingest.jobs.nccl_inspector), on samples written from NVIDIA/nccl's
own documentation and source: the README's two examples (plugins/profiler/inspector/README.md at
5067397c, the same in ext-profiler/inspector/README.md at v2.28.3-1), and the 2.30 writer's
`comm_name` and `p2p_perf` (inspector_json.cc at 5067397c). Then hostile lines."""

from __future__ import annotations

import io
import json

import pytest

from ingest.jobs import read_inspector
from ingest.jobs.nccl_inspector import MAX_LINE_BYTES

# README "Output Example", verbatim
README = b"""{
  "header": {"id": "0x7f8c496ae9f661", "rank": 2, "n_ranks": 8, "nnodes": 1},
  "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "", "rec_mechanism": "profiler_plugin",
               "dump_timestamp_us": 1748030377748202, "hostname": "example-hostname", "pid": 1639453},
  "coll_perf": {"coll": "AllReduce", "coll_sn": 1407, "coll_msg_size_bytes": 17179869184, "coll_exec_time_us": 61974,
                "coll_algobw_gbs": 277.210914, "coll_busbw_gbs": 485.119099}
}"""
# README "Output Example Verbose", verbatim
VERBOSE = b"""{
  "header": {"id": "0xe62dedaa97644a", "rank": 4, "n_ranks": 8, "nnodes": 1},
  "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "9019a1912-dirty",
               "rec_mechanism": "nccl_profiler_interface", "dump_timestamp_us": 1752867229276385,
               "hostname": "example-hostname", "pid": 438776},
  "coll_perf": {"coll": "ReduceScatter", "coll_sn": 1231, "coll_msg_size_bytes": 2147483648,
                "coll_exec_time_us": 41057, "coll_timing_source": "kernel_gpu",
                "coll_algobw_gbs": 418.439467, "coll_busbw_gbs": 366.134533,
                "event_trace_sn": {"coll_start_sn": 1, "coll_stop_sn": 2,
                                   "kernel_events": [{"channel_id": 0, "kernel_start_sn": 3, "kernel_stop_sn": 48,
                                                      "kernel_record_sn": 47}]},
                "event_trace_ts": {"coll_start_ts": 1752867229235059, "coll_stop_ts": 1752867229235064,
                                   "kernel_events": [{"channel_id": 0, "kernel_start_ts": 1752867229235181,
                                                      "kernel_stop_ts": 1752867229275811,
                                                      "kernel_record_ts": 1752867229275811}]}}
}"""


def one_line(doc: bytes) -> bytes:
    """As NCCL writes it: one object per line (jsonNewline after each)."""
    return json.dumps(json.loads(doc)).encode() + b"\n"


def obj(doc: bytes = README) -> dict:  # type: ignore[type-arg]
    return json.loads(doc)  # type: ignore[no-any-return]


def line_of(value: object) -> bytes:
    return json.dumps(value).encode() + b"\n"


def test_the_readme_example_is_one_collective() -> None:
    read = read_inspector(one_line(README), job="4242")
    assert read.deadletters == []
    (c,) = read.records
    assert (c.job, c.node, c.pid, c.comm, c.rank, c.n_ranks, c.n_nodes) == (
        "4242",
        "example-hostname",
        1639453,
        "0x7f8c496ae9f661",
        2,
        8,
        1,
    )
    assert (c.op, c.p2p, c.seq, c.size_bytes, c.exec_time_us) == ("AllReduce", False, 1407, 17179869184, 61974)
    assert (c.algbw_gbs, c.busbw_gbs, c.timing_source, c.version) == (277.210914, 485.119099, None, "v4.0")
    assert c.time_ns == 1748030377748202 * 1000
    assert c.trace is None and c.comm_name is None and c.size_exact


def test_the_verbose_example_carries_when_the_rank_entered_and_the_kernels_ran() -> None:
    (c,) = read_inspector(one_line(VERBOSE)).records
    assert c.timing_source == "kernel_gpu" and c.op == "ReduceScatter"
    assert c.trace is not None
    assert c.trace.issued_ns == 1752867229235059_000
    assert c.trace.stopped_ns == 1752867229235064_000
    assert (c.trace.kernel_start_ns, c.trace.kernel_stop_ns) == (1752867229235181_000, 1752867229275811_000)
    assert c.trace.channels == 1


def test_nccl_2_30_comm_name_and_point_to_point() -> None:
    coll = obj()
    coll["header"]["comm_name"] = "DP Group 0"
    p2p = obj()
    p2p["header"]["comm_name"] = "PP Group 1"
    p2p["p2p_perf"] = {
        "p2p": "Send",
        "p2p_sn": 17,
        "p2p_peer": 3,
        "p2p_msg_size_bytes": 536870912,
        "p2p_exec_time_us": 1154,
        "p2p_timing_source": "kernel_gpu",
        "p2p_algobw_gbs": 464.9,
        "p2p_busbw_gbs": 464.9,
    }
    del p2p["coll_perf"]
    read = read_inspector(line_of(coll) + line_of(p2p))
    assert read.deadletters == []
    a, b = read.records
    assert a.comm_name == "DP Group 0" and not a.p2p
    assert (b.op, b.p2p, b.seq, b.peer, b.size_bytes, b.comm_name) == ("Send", True, 17, 3, 536870912, "PP Group 1")


def test_an_unknown_version_is_read_when_its_fields_are_there_and_counted() -> None:
    newer = obj()
    newer["metadata"]["inspector_output_format_version"] = "v5.2"
    newer["metadata"]["something_new"] = {"x": 1}
    read = read_inspector(line_of(newer))
    assert len(read.records) == 1 and read.counts["version:v5.2"] == 1
    gone = obj()
    gone["metadata"]["inspector_output_format_version"] = "v5.2"
    del gone["coll_perf"]["coll_sn"]
    read = read_inspector(line_of(gone))
    assert read.records == []
    assert "coll_perf.coll_sn: expected an integer, got null" in read.deadletters[0].reason


def test_nan_written_as_nccl_writes_it_is_a_missing_bandwidth() -> None:
    nan = obj()
    nan["coll_perf"]["coll_busbw_gbs"] = "nan"  # json.cc jsonDouble: a NaN double is "nan"
    read = read_inspector(line_of(nan))
    assert read.records[0].busbw_gbs is None and read.counts["bandwidth_nan"] == 1


def mutated(path: str, value: object) -> bytes:
    doc = obj()
    *parents, key = path.split(".")
    node = doc
    for p in parents:
        node = node[p]
    node[key] = value
    return line_of(doc)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (mutated("coll_perf.coll_exec_time_us", -5), "coll_perf.coll_exec_time_us: -5 is outside 0.."),
        (mutated("coll_perf.coll_exec_time_us", 1.5), "expected an integer, got a number"),
        (mutated("coll_perf.coll_busbw_gbs", 1e999).replace(b"Infinity", b"1e999"), "inf is not a finite number"),
        (mutated("coll_perf.coll_msg_size_bytes", 2**62), "coll_msg_size_bytes"),
        (mutated("header.rank", 8), "header.rank: 8 is outside 0..7"),
        (mutated("header.rank", True), "header.rank: expected an integer, got a boolean"),
        (mutated("header.n_ranks", 10**12), "header.n_ranks"),
        (mutated("header.id", "0x" + "f" * 40), "header.id"),
        (mutated("header.id", "rm -rf /"), "not a communicator hash"),
        (mutated("metadata.hostname", "n[0-15]"), "rule ids.node.hostlist"),
        (mutated("metadata.hostname", "-rf"), "rule ids.first"),
        (mutated("metadata.hostname", "all"), "rule ids.node.reserved"),
        (mutated("metadata.hostname", "n" * 300), "rule ids.length"),
        (mutated("metadata.pid", 0), "metadata.pid"),
        (mutated("metadata.dump_timestamp_us", 5), "no time between 2000 and 2100"),
        (mutated("metadata.inspector_output_format_version", "four"), "not a version"),
        (mutated("coll_perf.coll", "All Reduce; drop"), "not an NCCL operation name"),
        (mutated("header", [1, 2]), "header: expected an object, got a list"),
        (b'{"header": 1, "header": 2}\n', "duplicate key 'header'"),
        (README.replace(b"277.210914", b"NaN").replace(b"\n", b" ") + b"\n", "NaN is not JSON"),
        (README.replace(b"277.210914", b"Infinity").replace(b"\n", b" ") + b"\n", "Infinity is not JSON"),
        (b"[" * 10_000 + b"]" * 10_000 + b"\n", "nested 10,000 deep"),
        (b'{"a": "\xff"}\n', "not UTF-8"),
        (b"{not json}\n", "not JSON"),
        (b"[1, 2]\n", "the line: expected an object"),
        (line_of({**obj(), "p2p_perf": {}}), "expected one of coll_perf"),
    ],
)
def test_hostile_lines_are_dead_lettered_with_the_reason(line: bytes, reason: str) -> None:
    read = read_inspector(line_of(obj()) + line + line_of(obj()))
    assert len(read.records) == 2, "one bad line costs that line only"
    (letter,) = read.deadletters
    assert letter.stage == "nccl_inspector"
    assert reason in letter.reason and letter.reason.startswith("line 2: ")


def test_a_huge_line_is_refused_unread_and_only_an_excerpt_kept() -> None:
    huge = b'{"x": "' + b"a" * (8 * MAX_LINE_BYTES) + b'"}\n'
    read = read_inspector(line_of(obj()) + huge + line_of(obj()))
    assert len(read.records) == 2
    (letter,) = read.deadletters
    assert "over the 65,536 a line may be" in letter.reason and len(letter.line) <= 4096


def test_a_line_still_being_written_is_left_for_the_next_read() -> None:
    whole = line_of(obj())
    data = whole + whole[:50]  # NCCL is appending the second object
    first = read_inspector(io.BytesIO(data))
    assert len(first.records) == 1 and first.deadletters == []
    assert first.counts["offset"] == len(whole)
    stream = io.BytesIO(whole + whole)
    stream.seek(first.counts["offset"])
    again = read_inspector(stream, start=first.counts["offset"])
    assert len(again.records) == 1 and again.counts["offset"] == 2 * len(whole)


def test_a_bad_job_refuses_the_read() -> None:
    read = read_inspector(line_of(obj()), job="12;reboot")
    assert read.records == [] and "rule ids.job.charset" in read.deadletters[0].reason


def test_dead_letters_are_capped_with_a_summary() -> None:
    read = read_inspector(b"{bad}\n" * 250)
    assert len(read.deadletters) == 101 and read.counts["refused"] == 250
    assert "150 more refused" in read.deadletters[-1].reason
