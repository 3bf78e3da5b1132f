"""`aiops demo` keeps its run and writes the report pages (the incident page is the headline),
then says what to run next."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from aiops.cli.demo import run_cluster_demo


def test_the_demo_writes_its_report_pages_and_the_next_commands(tmp_path: Path) -> None:
    out = io.StringIO()
    report = tmp_path / "report"
    code = run_cluster_demo(
        gpus=128,
        hours=1.0,
        seed=3,
        faults="psu_failure=1,nic_link_flap=1",
        console=Console(file=out, width=200),
        report=report,
    )
    text = out.getvalue()
    assert code == 0
    incidents = {
        json.loads(line)["incident_id"] for line in (report / "run" / "incidents.jsonl").read_text().splitlines()
    }
    assert incidents and (report / "index.html").is_file()
    assert {p.stem for p in (report / "incidents").glob("*.html")} == incidents
    # the run is kept as the commands write it, so the next commands work on it
    assert {p.name for p in (report / "cluster").iterdir()} >= {"topology.json", "telemetry.lp", "truth.jsonl"}
    assert f"open {report / 'index.html'}" in text
    assert "aiops gen --out" in text and "aiops run --input" in text


def test_a_report_folder_that_is_not_a_report_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from aiops.cli import main

    (tmp_path / "thesis.tex").write_text("mine\n")
    assert main(["demo", "--no-predict", "--report", str(tmp_path)]) == 2
    assert "not empty" in capsys.readouterr().err


def test_a_run_folders_incident_id_that_names_another_path_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """incidents.jsonl is read back from a folder anyone may have written: an id "../../X" made
    the report write a page outside --out. Failed before the fix (issue 64): X.html was written."""
    from aiops.cli import main

    run = tmp_path / "run"
    run.mkdir()
    state = {
        "incident_id": "../../X",
        "opened": 0.0,
        "updated": 0.0,
        "status": "open",
        "severity": "warning",
        "root_cause": {"entity": "n0001-gpu0", "kind": "gpu_hbm_ecc", "confidence": 0.9},
    }
    (run / "incidents.jsonl").write_text(json.dumps(state) + "\n")
    out = tmp_path / "a" / "b" / "report"
    assert main(["report", str(run), "--out", str(out)]) == 2
    assert "names no page" in capsys.readouterr().err
    assert not list(tmp_path.rglob("X.html")) and not out.exists()
