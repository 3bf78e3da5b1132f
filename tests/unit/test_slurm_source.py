"""Slurm's JSON as the real tools wrote it (shared/datasets/real-formats/slurm: slurmrestd of Slurm
22.05 (v0.0.38, Telegraf's test case), 23.11 (v0.0.40) and 25.11 (v0.0.44); the CLI of 21.08
(v0.0.37, rivosinc's exporter)) read into jobs, their nodes and GPU indices, drained nodes and
reservations; and what is not usable refused with a message that says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from context.scheduler.slurm import SlurmFormatError, gres_gpus, loads, parse_slurm, version_of
from context.scheduler.snapshot import JobSeen, ReservationSeen, Snapshot, Tracker
from context.scheduler.sources import read_recorded, recorded_time

SLURM = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "real-formats" / "slurm"
V38 = SLURM / "telegraf_inputs_slurm" / "gather" / "responses"
V40 = SLURM / "slurmrestd" / "23.11"
V44 = SLURM / "slurmrestd" / "25.11_0.0.44"
CLI = SLURM / "rivosinc_exporter"
NOW = 1.9e9  # after every recorded time


def read(path: Path, now: float = NOW) -> Snapshot:
    return parse_slurm(loads(path.read_bytes(), str(path)), now)


pytestmark = pytest.mark.skipif(not SLURM.is_dir(), reason=f"{SLURM} is not there")


@pytest.mark.parametrize(
    ("path", "version"),
    [
        (V38 / "jobs.json", "v0.0.38"),
        (V40 / "slurm-jobs.json", "v0.0.40"),
        (V44 / "slurm-jobs.json", "v0.0.44"),
        (CLI / "squeue_out.json", "v0.0.37"),
        (CLI / "sdiag_2405.json", "v0.0.41"),
    ],
)
def test_the_version_is_read_from_the_body(path: Path, version: str) -> None:
    assert version_of(loads(path.read_bytes())) == version


def test_v0_0_38_jobs_nodes_and_drains() -> None:
    jobs = read(V38 / "jobs.json")
    assert jobs.parts == {"jobs"}
    # two running grid jobs on naboo222 and one that completed on naboo147; none holds a GPU
    assert sorted(jobs.jobs) == ["20464", "20468", "23772"]
    running = jobs.jobs["20464"]
    # still running: its end_time is when its time limit (3600 minutes) runs out, not an end
    assert running == JobSeen("20464", ("naboo222",), 0, {}, 1722989851.0, None, "", 1722989851.0 + 3600 * 60)
    done = jobs.jobs["23772"]
    assert done.end is not None and done.end_reason == "completed" and done.start < done.end
    nodes = read(V38 / "nodes.json")
    drained = {n.node: n.reason for n in nodes.nodes.values() if n.drained}
    assert drained == {"naboo145": "Kill task failed", "naboo146": "Kill task failed"}
    assert nodes.nodes["naboo145"].since == 1723077306.0 and not nodes.nodes["naboo145"].down
    assert read(V38 / "reservations.json").reservations == {}


@pytest.mark.parametrize("folder", [V40, V44], ids=["v0.0.40", "v0.0.44"])
def test_gpu_indices_per_node_from_gres_detail(folder: Path) -> None:
    if folder is V40:
        # gpu:h100:2(IDX:0-1),gpu:h200:4(IDX:2-5) on each of ia1 and ia2
        multi = read(folder / "slurm-job-gpus-multi-nodes.json").jobs["793"]
        assert multi.nodes == ("ia1", "ia2") and multi.gpus == 12
        assert multi.gpus_by_node == {"ia1": (0, 1, 2, 3, 4, 5), "ia2": (0, 1, 2, 3, 4, 5)}
        # one GPU of each type: gpu:h100:1(IDX:0),gpu:h200:1(IDX:2)
        assert read(folder / "slurm-job-gpus-multi-types.json").jobs["796"].gpus_by_node == {"ia2": (0, 2)}
        per_node = read(folder / "slurm-job-gpus-per-node.json").jobs["795"]
    else:
        multi = read(folder / "slurm-job-gpus-multi-nodes.json").jobs["5679"]
        assert multi.nodes == ("gpu1", "gpu2") and multi.gpus == 8
        assert multi.gpus_by_node == {"gpu1": (0, 1, 2, 3), "gpu2": (0, 1, 2, 3)}
        per_node = read(folder / "slurm-job-gpus-per-node.json").jobs["5680"]
    # --gpus-per-node=1 on two nodes: index 0 of each
    assert per_node.gpus == 2 and set(per_node.gpus_by_node.values()) == {(0,)}  # type: ignore[union-attr]
    assert per_node.end is None  # RUNNING: its end_time is the time limit, not an end
    body = loads((folder / "slurm-job-gpus-per-node.json").read_bytes())["jobs"][0]
    limit_min = body["time_limit"]["number"] if isinstance(body["time_limit"], dict) else body["time_limit"]
    assert per_node.expected_end == per_node.start + 60 * limit_min  # start + its time limit, as Slurm says it


@pytest.mark.parametrize("folder", [V40, V44], ids=["v0.0.40", "v0.0.44"])
def test_ended_jobs_pending_jobs_and_cpu_jobs(folder: Path) -> None:
    jobs = read(folder / "slurm-jobs.json").jobs
    reasons = {j.end_reason for j in jobs.values() if j.end is not None}
    assert {"completed", "failed", "timeout"} <= reasons
    assert read(folder / "slurm-job-pending.json").jobs == {}  # pending: not a job that runs yet
    cpu = read(folder / "slurm-job-running.json").jobs
    (job,) = cpu.values()
    assert job.gpus == 0 and job.gpus_by_node == {}  # holds no GPU: nobody's cohort


@pytest.mark.parametrize(
    ("folder", "drained", "down"),
    [(V40, {"cn1": "ECC memory error"}, {"cn4": "CPU dead"}), (V44, {"cn1": "ECC memory error"}, {"cn2": "CPU dead"})],
    ids=["v0.0.40", "v0.0.44"],
)
def test_drained_and_down_nodes_with_their_reasons(folder: Path, drained: dict[str, str], down: dict[str, str]) -> None:
    nodes = read(folder / "slurm-nodes.json").nodes
    assert {n.node: n.reason for n in nodes.values() if n.state == "drain"} == drained
    assert {n.node: n.reason for n in nodes.values() if n.state == "down"} == down
    # MIXED+DRAIN is still draining: out of service for new work, announced
    assert read(V44 / "slurm-node-draining.json").nodes["cn1"].state == "drain"
    assert read(V44 / "slurm-node-planned.json").nodes["gpu2"].state == "ok"  # PLANNED: for a pending job


def test_reservations_with_and_without_maint() -> None:
    (resv,) = read(V40 / "slurm-reservations.json").reservations.values()
    assert resv == ReservationSeen("training", ("cn1", "cn2", "cn3", "cn4"), 1732957200.0, 1732982400.0, False)
    doc = json.loads((V40 / "slurm-reservations.json").read_text())
    doc["reservations"][0]["flags"].append("MAINT")
    assert parse_slurm(doc, NOW).reservations["training"].maintenance


def test_the_cli_json_of_slurm_21_08() -> None:
    jobs = read(CLI / "squeue_out.json")
    assert list(jobs.jobs) == ["26515966"]  # the other is PENDING, with the newer time objects
    nodes = read(CLI / "sinfo_out.json").nodes
    assert {n.node for n in nodes.values() if n.down} == {"cs5.example.company.com"}


def test_accounting_jobs_have_nodes_and_no_indices() -> None:
    (job,) = read(V44 / "slurmdb-job-gpus-multi-nodes.json").jobs.values()
    assert job.nodes == ("gpu1", "gpu2") and job.gpus_by_node is None


def test_a_running_accounting_job_ends_by_its_time_limit_in_minutes() -> None:
    (job,) = read(V44 / "slurmdb-job-gpus-running.json", now=2e9).jobs.values()
    assert job.end is None and job.expected_end == job.start + 60.0  # time.limit: 1 (minute)


def test_gres_strings() -> None:
    assert gres_gpus("gpu:h100:2(IDX:0-1),gpu:h200:4(IDX:2-5)") == (6, [0, 1, 2, 3, 4, 5])
    assert gres_gpus("gpu:tesla:2(IDX:0,3)") == (2, [0, 3])
    assert gres_gpus("gpu:h100:0(IDX:N/A)") == (0, [])
    assert gres_gpus("gpu:1") == (1, None)
    assert gres_gpus("gpu:h100:2(IDX:0-1),gpu:h200:0(IDX:)") == (2, [0, 1])
    assert gres_gpus("shard:4(IDX:0),gpu:1(IDX:3)") == (1, [3])
    with pytest.raises(SlurmFormatError, match="malformed"):
        gres_gpus("gpu:2(IDX:0-x)")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ((V44 / "slurm-jwt-expired-token.json").read_bytes(), r"error: Protocol authentication error.*1007"),
        ((V40 / "slurm-jwt-invalid-token.json").read_bytes(), r"answered with an error: Unable to connect"),
        ((V44 / "slurm-jwt-missing-headers.txt").read_bytes(), r"not JSON: 'Authentication does not apply"),
        ((V40 / "slurm-job-unfound.json").read_bytes(), r"Invalid job id specified"),
        ((V44 / "slurm-jobs.json").read_bytes()[:5000], r"truncated or malformed JSON"),
        (b"", "empty"),
        (b"[1, 2]", "not a Slurm response object"),
        ((V44 / "slurm-ping.json").read_bytes(), "holds no jobs, nodes or reservations"),
    ],
    ids=["jwt-expired", "jwt-invalid", "jwt-missing", "job-unfound", "truncated", "empty", "list", "ping"],
)
def test_unusable_bodies_are_refused_with_the_reason(body: bytes, message: str) -> None:
    with pytest.raises(SlurmFormatError, match=message):
        parse_slurm(loads(body), NOW)


def test_an_unknown_data_parser_version_is_refused_by_name() -> None:
    doc = json.loads((V44 / "slurm-jobs.json").read_text())
    doc["meta"]["plugin"]["data_parser"] = "data_parser/v0.0.45"
    with pytest.raises(SlurmFormatError, match=r"data_parser v0\.0\.45 .* not a version this reader knows"):
        parse_slurm(doc, NOW)
    del doc["meta"]
    with pytest.raises(SlurmFormatError, match="names no data_parser version"):
        parse_slurm(doc, NOW)


def test_a_recorded_body_is_dated_by_what_it_says() -> None:
    doc = json.loads((V44 / "slurm-jobs.json").read_text())
    assert recorded_time(doc, 0.0) == doc["last_update"]["number"]
    v38 = json.loads((V38 / "jobs.json").read_text())
    # no last_update before v0.0.40: the latest start, submit or real end it names
    assert recorded_time(v38, 0.0) == max(
        max(j["start_time"], j["submit_time"], j["end_time"] if j["job_state"] == "COMPLETED" else 0)
        for j in v38["jobs"]
    )


def test_a_history_of_polls_becomes_events_said_once() -> None:
    """Two polls of jobs: a job seen running, then gone from the list, gives a start and an end;
    the second reading of the same poll says nothing; a tracker that replays what was published
    (a restarted follower) says nothing again either."""
    first = read(V44 / "slurm-job-gpus-running.json", now=1762784700.0)
    later = Snapshot(1762784800.0, parts={"jobs"})
    tracker = Tracker("slurm")
    events = tracker.update(first)
    assert [(e["type"], e["job"], e["gpus_by_node"]) for e in events] == [("job_start", "5557", {"gpu2": [0, 1, 2, 3]})]
    assert tracker.update(first) == []
    ended = tracker.update(later)
    assert [(e["type"], e["time"], e["reason"]) for e in ended] == [("job_end", 1762784800.0, "gone")]
    again = Tracker("slurm")
    again.replay(events + ended)
    assert again.update(first) == [] and again.update(later) == []


def test_drain_resume_and_maintenance_windows_as_events() -> None:
    nodes = read(V44 / "slurm-nodes.json", now=1762942600.0)
    tracker = Tracker("slurm")
    events = tracker.update(nodes)
    assert {(e["nodes"][0], e["state"], e["reason"]) for e in events} == {
        ("cn1", "drain", "ECC memory error"),
        ("cn2", "down", "CPU dead"),
    }
    resumed = Snapshot(1762943000.0, parts={"nodes"})  # every node back in service
    back = tracker.update(resumed)
    assert {(e["nodes"][0], e["state"], e["time"]) for e in back} == {
        ("cn1", "ok", 1762943000.0),
        ("cn2", "ok", 1762943000.0),
    }
    doc = json.loads((V40 / "slurm-reservations.json").read_text())
    doc["reservations"][0]["flags"].append("MAINT")
    window = tracker.update(parse_slurm(doc, 1732950000.0))
    assert [(e["type"], e["name"], e["start"], e["end"]) for e in window] == [
        ("maintenance", "training", 1732957200.0, 1732982400.0)
    ]
    doc["reservations"] = []  # deleted before it ended: the window closes when it was seen gone
    cut = tracker.update(parse_slurm(doc, 1732960000.0))
    assert [(e["start"], e["end"]) for e in cut] == [(1732957200.0, 1732960000.0)]


def test_import_command_writes_the_events_file(tmp_path: Path) -> None:
    from aiops.cli import main
    from detectors.detect_loop import read_events

    out = tmp_path / "events.jsonl"
    files = [V44 / "slurm-job-gpus-multi-nodes.json", V44 / "slurm-nodes.json", V38 / "jobs.json"]
    assert main(["scheduler", "import", "--slurm-json", *map(str, files), "--out", str(out)]) == 0
    events, bad = read_events(out)
    assert not bad
    starts = {e["job"]: e for e in events if e["type"] == "job_start"}
    assert starts["5679"]["gpus_by_node"] == {"gpu1": [0, 1, 2, 3], "gpu2": [0, 1, 2, 3]}
    assert {"20464", "20468", "23772"} <= set(starts)
    times = [float(e["time"]) for e in events]  # type: ignore[arg-type]
    assert times == sorted(times)
    assert (
        main(["scheduler", "import", "--slurm-json", str(V44 / "slurm-jwt-expired-token.json"), "--out", str(out)]) == 2
    )


def test_recorded_files_sort_into_a_history() -> None:
    snaps = read_recorded([V44 / "slurm-jobs.json", V38 / "jobs.json"])
    assert [s.time for s in snaps] == sorted(s.time for s in snaps)


# --- hostile bodies (issue 44, finding 6): tests/data/hostile/slurm-json ------------------------

HOSTILE = Path(__file__).resolve().parents[2] / "tests" / "data" / "hostile" / "slurm-json"


@pytest.mark.parametrize(
    ("file", "place", "rule"),
    [
        ("hostlist-billion.json", "jobs[0].nodes: host list 'n[0-999999999]' names 1,000,000,000", "[bound hosts]"),
        ("gres-index-billion.json", "jobs[0].gres_detail[0]: GPU index list", "[bound gpu_index]"),
        ("hostile-job-nodes.json", "jobs[0].nodes: node '-rf' refused", "[rule ids.first]"),
        ("hostile-job-id.json", "jobs[0].job_id: '1; scancel -u root' refused", "[rule ids.job.charset]"),
        ("hostile-node-name.json", "nodes[1].name: node 'gpu002 gpu003' refused", "[rule ids.node.hostlist]"),
        ("deep-nesting.json", "deep-nesting.json: JSON nested 10,001 deep", "[bound json_depth]"),
        (
            "hostlists-2000-jobs.json",
            "jobs[10].nodes: 100,000 more nodes would make 1,100,000 in this body",
            "[bound hosts_per_document]",
        ),
    ],
)
def test_hostile_slurm_bodies_are_refused_naming_the_place_and_the_rule(file: str, place: str, rule: str) -> None:
    """Before: n[0-999999999] expanded into a MemoryError, IDX:0-999999999 built a billion
    indices, names outside the grammar became node and job ids, deep JSON a RecursionError."""
    with pytest.raises(SlurmFormatError) as caught:
        read_recorded([HOSTILE / file], at=NOW)
    assert place in str(caught.value) and rule in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("file", ["hostlist-billion.json", "gres-index-billion.json", "hostlists-2000-jobs.json"])
def test_slurm_import_of_a_billion_hosts_or_indices_is_one_line_within_2_gib(file: str, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    code = (
        "import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        "from aiops.cli import main\nsys.exit(main(sys.argv[1:]))"
    )
    out = tmp_path / "events.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", code, "scheduler", "import", "--slurm-json", str(HOSTILE / file), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(root)},
        timeout=600,
        check=False,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert str(HOSTILE / file) in done.stderr and "[bound" in done.stderr
    assert not out.exists()


def test_a_slurm_body_over_its_size_bound_is_refused_before_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    from context.scheduler import slurm

    monkeypatch.setattr(slurm, "MAX_SLURM_BYTES", 100)  # the bound's logic, at a size a test can write
    with pytest.raises(SlurmFormatError, match=r"the body is 200 bytes, over .* \[bound file_size\]"):
        loads(b" " * 200)


def test_host_lists_share_one_budget_per_body_counted_before_expanding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 64 (5): each list within the per-list bound, 2,000 of them were 200 million names
    (a MemoryError at 2 GB after 41 s). The budget is charged by count, before a list is built."""
    from context import hostlist
    from context.scheduler import slurm

    built: list[str] = []

    def expand(text: str, *rest: int) -> list[str]:
        built.append(text)
        return hostlist.expand(text, *rest)

    monkeypatch.setattr(slurm, "expand", expand)
    monkeypatch.setattr(slurm, "MAX_HOSTS_PER_DOCUMENT", 25)  # the budget's logic, at a size a test can write
    job = {"job_state": "RUNNING", "start_time": 1700000000, "end_time": 1700086400}
    jobs = [{**job, "job_id": i, "nodes": "n[01-10]"} for i in range(1, 4)]
    resv = {"name": "maint", "start_time": 1700000000, "end_time": 1700086400, "node_list": "n[01-10]"}
    meta = {"plugin": {"type": "openapi/v0.0.38"}}
    with pytest.raises(SlurmFormatError, match=r"^jobs\[2\]\.nodes: 10 more nodes would make 30 .*over the 25"):
        slurm.parse_slurm({"meta": meta, "jobs": jobs}, NOW)
    assert len(built) == 2  # the third list was refused by its count, never built
    with pytest.raises(SlurmFormatError, match=r"^reservations\[0\]\.node_list: .*\[bound hosts_per_document\]"):
        slurm.parse_slurm({"meta": meta, "jobs": jobs[:2], "reservations": [resv]}, NOW)
    # within the budget, every list is read; a new body starts a new budget
    snap = slurm.parse_slurm({"meta": meta, "jobs": jobs[:2]}, NOW)
    assert sum(len(j.nodes) for j in snap.jobs.values()) == 20
    assert len(slurm.parse_slurm({"meta": meta, "jobs": jobs[:2]}, NOW).jobs) == 2
