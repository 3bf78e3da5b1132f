"""PyTorch's NCCL flight recorder (ingest.jobs.flight_recorder): its JSON dump read into a rank's last
collectives with their state; its default pickle form refused, never unpickled.

The sample is what FlightRecorderDetail.hpp's `dump_json` writes (pytorch/pytorch cb41e3a4,
version "2.10"; keys from FlightRecorder.hpp's constants), with the values of the tutorial's
example (pytorch/tutorials prototype_source/flight_recorder_tutorial.rst): rank 1 of two never
joined collective 3, so rank 0's last collective stays `scheduled`."""

from __future__ import annotations

import copy
import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from ingest.jobs import read_flight_recorder, read_flight_recorder_file

CREATED = 1724779239936775119


def entry(record_id: int, seq: int, state: str, **kw: Any) -> dict[str, Any]:
    done = state == "completed"
    e = {
        "record_id": record_id,
        "pg_id": 0,
        "process_group": ["0", "default_pg"],
        "thread_name": "pt_main_thread",
        "thread_id": "140245",
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": "nccl:all_reduce",
        "time_created_ns": CREATED + record_id * 10**6,
        "input_sizes": [[3, 4]],
        "input_dtypes": ["Float"],
        "output_sizes": [[3, 4]],
        "output_dtypes": ["Float"],
        "state": state,
        "time_discovered_started_ns": CREATED + 5 if state != "scheduled" else 0,
        "time_discovered_completed_ns": 1724779239975811724 if done else 0,
        "retired": done,
        "timeout_ms": 600000,
        "is_p2p": False,
    }
    if done:
        e["duration_ms"] = 0.43
    e.update(kw)
    return e


DUMP: dict[str, Any] = {
    "version": "2.10",
    "comm_lib_version": "2.27.5",
    "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
    "pg_status": {
        "0": {"last_enqueued_collective": "3", "last_started_collective": "2", "last_completed_collective": "2"}
    },
    "entries": [entry(0, 1, "completed"), entry(1, 2, "completed"), entry(2, 3, "scheduled")],
    "nccl_comm_state": {"0x7f8c496ae9f661": {"nranks": "2"}},
}


def dump(**changes: Any) -> bytes:
    doc = copy.deepcopy(DUMP)
    doc.update(changes)
    return json.dumps(doc).encode()


def test_the_json_dump_is_the_ranks_last_collectives_with_their_state() -> None:
    read = read_flight_recorder(dump(), rank=0, job="4242", node="gpu-node-017")
    assert read.deadletters == []
    (d,) = read.records
    assert (d.rank, d.job, d.node, d.version, d.comm_lib_version) == (0, "4242", "gpu-node-017", "2.10", "2.27.5")
    assert d.groups == {"0": ("default_pg", (0, 1))}
    assert d.status[0].last_enqueued == 3 and d.status[0].last_completed == 2
    assert [e.state for e in d.entries] == ["completed", "completed", "scheduled"]
    (last,) = d.last_collectives().values()
    assert (last.collective_seq_id, last.state, last.op, last.started_ns, last.completed_ns) == (
        3,
        "scheduled",
        "nccl:all_reduce",
        None,
        None,
    ), "0 in JSON is a time the watchdog did not see"
    first = d.entries[0]
    assert (first.duration_ms, first.input_sizes, first.retired, first.timeout_ms) == (0.43, ((3, 4),), True, 600000)


def test_the_rank_is_the_file_names_suffix(tmp_path: Path) -> None:
    (tmp_path / "nccl_trace_rank_7").write_bytes(dump())
    (d,) = read_flight_recorder_file(tmp_path / "nccl_trace_rank_7").records
    assert d.rank == 7
    (tmp_path / "trace_3").write_bytes(dump())
    assert read_flight_recorder_file(tmp_path / "trace_3", prefix="trace_").records[0].rank == 3
    read = read_flight_recorder_file(tmp_path / "trace_3")
    assert read.records == [] and "the dump's rank is unknown" in read.deadletters[0].reason


def test_an_empty_ring_has_no_entries_key() -> None:
    doc = copy.deepcopy(DUMP)
    del doc["entries"]
    (d,) = read_flight_recorder(json.dumps(doc).encode(), rank=0).records
    assert d.entries == () and d.last_collectives() == {}


def test_version_2_7_named_the_library_version_nccl_version() -> None:
    doc = copy.deepcopy(DUMP)
    doc["version"] = "2.7"
    doc["nccl_version"] = doc.pop("comm_lib_version")
    (d,) = read_flight_recorder(json.dumps(doc).encode(), rank=0).records
    assert d.comm_lib_version == "2.27.5"


def test_a_newer_minor_version_is_read_and_another_major_refused() -> None:
    assert read_flight_recorder(dump(version="2.99", new_field=[1]), rank=0).records
    read = read_flight_recorder(dump(version="3.0"), rank=0)
    assert read.records == [] and "version 3.0: another major version" in read.deadletters[0].reason


class Payload:
    """What an attacker puts in a dump: unpickling calls os.mkdir(marker)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.marker),))


@pytest.mark.parametrize("protocol", [0, 1, 2, 4, 5])
def test_a_pickle_is_refused_by_its_bytes_and_never_unpickled(
    protocol: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "pwned"
    data = pickle.dumps({"version": "2.5", "entries": [Payload(marker)]}, protocol=protocol)

    def never(*_: object, **__: object) -> None:
        raise AssertionError("unpickled")

    monkeypatch.setattr(pickle, "loads", never)
    monkeypatch.setattr(pickle, "load", never)
    monkeypatch.setattr(pickle, "Unpickler", never)
    read = read_flight_recorder(data, rank=0)
    assert read.records == []
    assert "pickle" in read.deadletters[0].reason and "never" in read.deadletters[0].reason
    assert not marker.exists(), "the payload ran"
    (tmp_path / "nccl_trace_rank_0").write_bytes(data)
    assert read_flight_recorder_file(tmp_path / "nccl_trace_rank_0").records == []
    assert not marker.exists()


def test_the_pickle_the_flight_recorder_writes_by_default_is_refused_with_how_to_get_json() -> None:
    data = pickle.dumps(copy.deepcopy(DUMP))  # the tutorial's shape, as torch's pickle_str writes it
    (letter,) = read_flight_recorder(data, rank=0).deadletters
    assert letter.reason.startswith("a pickle (protocol")
    assert "_dump_nccl_trace_json" in letter.reason


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"[1, 2]", "not a JSON object"),
        (b"", "not a JSON object"),
        (b'{"version": "2.10", "version": "2.10"}', "duplicate key 'version'"),
        (dump().replace(b"0.43", b"NaN"), "NaN is not JSON"),
        (b'{"a":' * 100 + b"1" + b"}" * 100, "nested 100 deep"),
        (dump(version=2.1), "version: expected a string"),
        (dump(entries={"0": 1}), "entries: expected a list"),
        (dump(pg_config={"0": {"name": "0", "desc": "x", "ranks": "[0, 1]; rm"}}), "not a list of ranks"),
        (dump(pg_status={"0": {"last_enqueued_collective": "x"}}), "last_enqueued_collective"),
    ],
)
def test_a_dump_that_cannot_be_read_is_refused_whole(data: bytes, reason: str) -> None:
    read = read_flight_recorder(data, rank=0)
    assert read.records == []
    assert reason in read.deadletters[0].reason, read.deadletters[0].reason


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({"state": "running"}, "state: 'running' is none of"),
        ({"collective_seq_id": -1}, "collective_seq_id: -1"),
        ({"time_created_ns": 12}, "no time between 2000 and 2100"),
        ({"process_group": "0"}, "process_group: expected [name, desc]"),
        ({"profiling_name": "nccl:all_reduce; reboot"}, "not an operation name"),
        ({"duration_ms": -1.0}, "duration_ms"),
        ({"input_sizes": [[1] * 100]}, "at most 16 dimensions"),
        ({"is_p2p": "no"}, "is_p2p: expected a boolean"),
    ],
)
def test_a_bad_entry_is_refused_alone(bad: dict[str, Any], reason: str) -> None:
    entries = [entry(0, 1, "completed"), {**entry(1, 2, "completed"), **bad}, entry(2, 3, "scheduled")]
    read = read_flight_recorder(dump(entries=entries), rank=0)
    (d,) = read.records
    assert [e.record_id for e in d.entries] == [0, 2]
    (letter,) = read.deadletters
    assert letter.reason.startswith("rank 0: entries[1]") and reason in letter.reason


def test_the_callers_ids_are_checked() -> None:
    assert "ids.node.hostlist" in read_flight_recorder(dump(), rank=0, node="n[1-2]").deadletters[0].reason
    assert "ids.job.charset" in read_flight_recorder(dump(), rank=0, job="1 2").deadletters[0].reason
    assert "rank" in read_flight_recorder(dump(), rank=-1).deadletters[0].reason


def test_the_last_collective_is_per_process_group_and_skips_point_to_point() -> None:
    entries = [
        entry(0, 5, "completed"),
        entry(1, 1, "started", pg_id=1, process_group=["1", "tp"]),
        entry(2, 6, "scheduled", is_p2p=True, profiling_name="nccl:send"),
    ]
    (d,) = read_flight_recorder(dump(entries=entries), rank=0).records
    last = d.last_collectives()
    assert (last[0].record_id, last[1].state) == (0, "started")
