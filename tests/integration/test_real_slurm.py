"""The Slurm reader against the real Slurm 22.05.8 that `scripts/services up` starts (Debian 12's
packages; see tests/slurm_site.py): GPU jobs submitted with sbatch, a MAINT reservation and a
drained node, read back from slurmrestd (openapi v0.0.38 and v0.0.37, JWT) and from the CLI
(`squeue --json`, `sinfo --json`; 22.05's scontrol has no --json), and checked against what
`scontrol show` says in its own text. Skips, saying what is missing, when Slurm is not up."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from context.scheduler.slurm import SlurmFormatError, parse_slurm
from context.scheduler.snapshot import job_start_event
from tests.slurm_site import REST_VERSIONS, UNKNOWN_JOB, Scenario, SlurmSite, index_list, staged

pytestmark = pytest.mark.services

JOB_SOURCES = ["rest-v0.0.38", "rest-v0.0.37", "cli-squeue"]
NODE_SOURCES = ["rest-v0.0.38", "rest-v0.0.37", "cli-sinfo"]


@pytest.fixture(scope="module")
def site() -> SlurmSite:
    return SlurmSite.find()


@pytest.fixture(scope="module")
def scenario(site: SlurmSite) -> Iterator[Scenario]:
    """gpu01: `one` (2 GPUs) and `pair`; gpu01+gpu02: `pair` (4 GPUs per node); gpu02: `rest`
    (4 GPUs); gpu03: MAINT reservation from now+600 s for an hour; gpu04 drained. Undone after."""
    yield from staged(site)


def _body(site: SlurmSite, source: str, part: str) -> dict[str, Any]:
    if source.startswith("rest-"):
        return site.rest_json(part, source.removeprefix("rest-"))
    return site.cli_json(part)


def _local_epoch(text: str) -> float:
    """`2026-12-02T02:18:34` as scontrol prints it (local time) -> epoch seconds."""
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


@pytest.mark.parametrize("source", JOB_SOURCES)
def test_a_job_holding_two_of_a_nodes_eight_gpus_holds_the_indices_slurm_names(
    site: SlurmSite, scenario: Scenario, source: str
) -> None:
    one = scenario.jobs["one"]
    reference = site.gpu_indices(one)  # GRES=gpu:h100:2(IDX:0-1) in `scontrol show job -d`
    assert list(reference) == ["gpu01"] and len(reference["gpu01"]) == 2
    job = parse_slurm(_body(site, source, "jobs"), time.time()).jobs[one]
    assert job.job == one
    assert job.nodes == ("gpu01",)
    assert job.gpus == 2
    assert job.gpus_by_node is not None and dict(job.gpus_by_node) == reference
    assert scenario.begun_at - 1 <= job.start <= time.time()
    assert job.end is None and job.end_reason == ""


@pytest.mark.parametrize("source", JOB_SOURCES)
def test_a_running_job_ends_by_its_time_limit_when_scontrol_says_and_the_event_carries_it(
    site: SlurmSite, scenario: Scenario, source: str
) -> None:
    one = scenario.jobs["one"]  # sbatch -t 60
    m = re.search(r"StartTime=(\S+) EndTime=(\S+)", site.job_detail(one))
    assert m is not None and "TimeLimit=01:00:00" in site.job_detail(one)
    start, limit_end = _local_epoch(m.group(1)), _local_epoch(m.group(2))
    job = parse_slurm(_body(site, source, "jobs"), time.time()).jobs[one]
    assert job.end is None  # still running: end_time is not an end
    assert job.expected_end == limit_end == start + 3600
    assert job_start_event(job, source)["expected_end"] == limit_end
    pair = parse_slurm(_body(site, source, "jobs"), time.time()).jobs[scenario.jobs["pair"]]
    assert pair.expected_end is not None and pair.expected_end > time.time()  # the partition's default limit


@pytest.mark.parametrize("source", JOB_SOURCES)
def test_a_two_node_job_holds_four_gpus_on_each_node_at_the_indices_slurm_names(
    site: SlurmSite, scenario: Scenario, source: str
) -> None:
    pair = scenario.jobs["pair"]
    reference = site.gpu_indices(pair)
    assert sorted(reference) == ["gpu01", "gpu02"] and all(len(ix) == 4 for ix in reference.values())
    # gpu01's first two GPUs are `one`'s, so the pair holds different indices on its two nodes
    assert reference["gpu01"] != reference["gpu02"]
    job = parse_slurm(_body(site, source, "jobs"), time.time()).jobs[pair]
    assert sorted(job.nodes) == ["gpu01", "gpu02"]
    assert job.gpus == 8
    assert job.gpus_by_node is not None and dict(job.gpus_by_node) == reference
    assert job.end is None


def test_jobs_sharing_a_node_hold_disjoint_gpus_that_add_up_to_what_the_node_uses(
    site: SlurmSite, scenario: Scenario
) -> None:
    snap = parse_slurm(site.rest_json("jobs"), time.time())
    held: dict[str, list[int]] = {}
    for role in ("one", "pair", "rest"):
        by_node = snap.jobs[scenario.jobs[role]].gpus_by_node
        assert by_node is not None
        for node, indices in by_node.items():
            held.setdefault(node, []).extend(indices)
    for node, all_held in held.items():
        assert len(all_held) == len(set(all_held)), f"{node}: a GPU held twice: {sorted(all_held)}"
    # each node's own account of its GPUs in use (`scontrol show node -d`: GresUsed=gpu:h100:6(IDX:0-5))
    for node in ("gpu01", "gpu02"):
        text = site.run("scontrol", "show", "node", "-d", node)
        used = re.search(r"GresUsed=gpu:h100:(\d+)\(IDX:([^)]*)\)", text)
        assert used is not None, text
        assert int(used.group(1)) == len(held[node])
        assert sorted(held[node]) == list(index_list(used.group(2)))
    assert sorted(held["gpu02"]) == list(range(8))  # gpu02 is full: pair's 4 and rest's 4


@pytest.mark.parametrize("source", NODE_SOURCES)
def test_the_drained_node_is_drained_with_its_reason_since_it_was_set(
    site: SlurmSite, scenario: Scenario, source: str
) -> None:
    assert f"Reason={scenario.reason} [" in site.run("scontrol", "show", "node", scenario.drained)
    snap = parse_slurm(_body(site, source, "nodes"), time.time())
    assert sorted(snap.nodes) == site.node_names()
    node = snap.nodes[scenario.drained]
    assert node.node == "gpu04"
    assert node.drained and not node.down
    assert node.reason == "ECC memory error"
    assert node.since is not None and scenario.staged_at - 1 <= node.since <= scenario.done_at + 1
    for other in ("gpu01", "gpu02", "gpu03"):  # busy, busy, reserved later: all in service
        assert not snap.nodes[other].drained and not snap.nodes[other].down, snap.nodes[other]


@pytest.mark.parametrize("version", REST_VERSIONS)
def test_the_maint_reservation_has_its_node_and_window(site: SlurmSite, scenario: Scenario, version: str) -> None:
    text = site.reservation_text(scenario.reservation)
    m = re.search(r"StartTime=(\S+) EndTime=(\S+)", text)
    assert m is not None and "Flags=MAINT" in text, text
    start, end = _local_epoch(m.group(1)), _local_epoch(m.group(2))
    snap = parse_slurm(site.rest_json("reservations", version), time.time())
    resv = snap.reservations[scenario.reservation]
    assert resv.name == scenario.reservation
    assert resv.nodes == ("gpu03",)
    assert resv.maintenance
    assert (resv.start, resv.end) == (start, end)
    assert scenario.staged_at + 600 - 2 <= resv.start <= scenario.done_at + 600 + 2  # StartTime=now+600
    assert resv.end - resv.start == 3600  # Duration=60 (minutes)


def test_a_reservation_without_maint_is_not_maintenance(site: SlurmSite, scenario: Scenario) -> None:
    name = f"aiops-plain-{scenario.tag}"
    site.create_reservation(name, "gpu03", start_in=7200, minutes=30, flags="")  # after the MAINT one
    try:
        resv = parse_slurm(site.rest_json("reservations"), time.time()).reservations[name]
        assert resv.nodes == ("gpu03",) and not resv.maintenance
        assert resv.end - resv.start == 1800
    finally:
        site.delete_reservation(name)


@pytest.mark.parametrize("source", JOB_SOURCES)
def test_jobs_that_ended_have_their_end_and_why(site: SlurmSite, scenario: Scenario, source: str) -> None:
    on3 = ("--gres=gpu:h100:1", "-w", "gpu03", "-t", "1")  # ends long before gpu03's maintenance
    cancelled = site.sbatch("-J", f"aiops-{scenario.tag}-cancelled", *on3)
    failed = site.sbatch("-J", f"aiops-{scenario.tag}-failed", *on3, wrap="sleep 1; exit 3")
    try:
        site.wait_for([cancelled], {"RUNNING"})
        site.cancel(cancelled)
        site.wait_for([cancelled, failed], {"CANCELLED", "FAILED"})
        now = time.time()
        snap = parse_slurm(_body(site, source, "jobs"), now)
        for job, why in ((cancelled, "cancelled"), (failed, "failed")):
            seen = snap.jobs[job]
            assert seen.nodes == ("gpu03",)
            assert seen.end is not None and seen.start <= seen.end <= now
            assert seen.end_reason == why
        assert snap.jobs[scenario.jobs["one"]].end is None  # still running beside them
    finally:
        site.cancel(cancelled, failed)


def test_an_error_from_slurmrestd_is_a_slurm_format_error(site: SlurmSite) -> None:
    status, body = site.rest_get(f"job/{UNKNOWN_JOB}")
    assert status == 500  # slurmrestd 22.05 answers an unknown job with 500 and `errors`
    doc = json.loads(body)
    assert doc["errors"][0]["error"] == "Invalid job id specified"
    with pytest.raises(SlurmFormatError) as raised:
        parse_slurm(doc, time.time())
    assert "Invalid job id" in str(raised.value) or str(UNKNOWN_JOB) in str(raised.value)
