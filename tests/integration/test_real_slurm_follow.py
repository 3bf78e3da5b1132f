"""`aiops scheduler follow` against the real Slurm 22.05 that `scripts/services up` starts: through
slurmrestd (JWT from a file) and through the CLI, the GPU jobs, the drained node and the MAINT
reservation become events; a follower restarted publishes nothing twice; a job cancelled after it
started ends; and the events, applied, give the cohorts and silences they stand for."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiops.cli import main
from detectors.detect_loop import read_events
from tests.slurm_site import Scenario, SlurmSite, staged
from vocab.schedule import Schedule

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def site() -> SlurmSite:
    return SlurmSite.find()


@pytest.fixture(scope="module")
def scenario(site: SlurmSite) -> Iterator[Scenario]:
    yield from staged(site)


def _follow(site: SlurmSite, out: Path, tmp_path: Path, *source: str) -> list[dict[str, Any]]:
    token = tmp_path / "jwt"
    token.write_text(f"SLURM_JWT={site.token()}\n")
    before = len(read_events(out)[0])
    args = ["scheduler", "follow", *source, "--out", str(out), "--polls", "1", "--every", "0.1"]
    if source[0] == "--slurm":
        args += ["--slurm-user", site.user, "--slurm-token-file", str(token)]
    assert main(args) == 0
    return read_events(out)[0][before:]


@pytest.mark.parametrize("source", ["rest", "cli"])
def test_the_follower_says_what_slurm_holds_once(
    site: SlurmSite, scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(site.conf))  # the CLI's cluster
    how = ("--slurm", site.rest) if source == "rest" else ("--squeue",)
    out = tmp_path / "events.jsonl"
    events = _follow(site, out, tmp_path, *how)
    starts = {e["job"]: e for e in events if e["type"] == "job_start"}
    one, pair = scenario.jobs["one"], scenario.jobs["pair"]
    assert starts[one]["gpus_by_node"] == {n: list(ix) for n, ix in site.gpu_indices(one).items()}
    assert starts[pair]["gpus_by_node"] == {n: list(ix) for n, ix in site.gpu_indices(pair).items()}
    drains = [e for e in events if e["type"] == "node_state"]
    assert [(e["nodes"], e["state"], e["reason"]) for e in drains] == [(["gpu04"], "drain", "ECC memory error")]
    windows = [e for e in events if e["type"] == "maintenance"]
    if source == "rest":  # 22.05's scontrol has no --json: reservations come from slurmrestd only
        assert [(w["name"], w["nodes"]) for w in windows] == [(scenario.reservation, ["gpu03"])]
    assert len({e["id"] for e in events}) == len(events)

    assert _follow(site, out, tmp_path, *how) == []  # restarted: it reads what it said and says nothing again

    schedule = Schedule.from_events(read_events(out)[0])
    assert schedule.in_maintenance("gpu04", scenario.done_at + 1)
    t = max(float(e["time"]) for e in starts.values()) + 1
    held = schedule.jobs_holding([("gpu01", site.gpu_indices(one)["gpu01"][0])], t, ended_within_s=0)
    assert [j.job for j in held] == [one]
    if source == "rest":
        window = windows[0]
        assert schedule.in_maintenance("gpu03", window["start"] + 1)
        assert not schedule.in_maintenance("gpu03", window["start"] - 1)


def test_a_job_cancelled_after_it_started_ends(site: SlurmSite, scenario: Scenario, tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    first = _follow(site, out, tmp_path, "--slurm", site.rest)
    job = site.sbatch("-J", f"aiops-{scenario.tag}-late", "--gres=gpu:h100:1", "-w", "gpu03", "-t", "5")
    try:
        site.wait_for([job], {"RUNNING"})
        started = _follow(site, out, tmp_path, "--slurm", site.rest)
        assert [(e["type"], e["job"]) for e in started] == [("job_start", job)]
        site.cancel(job)
        site.wait_for([job], {"CANCELLED"})
        ended = _follow(site, out, tmp_path, "--slurm", site.rest)
        assert [(e["type"], e["job"], e["reason"]) for e in ended] == [("job_end", job, "cancelled")]
    finally:
        site.cancel(job)
    assert first and json.loads(out.read_text().splitlines()[0])["source"] == "slurm"
