"""`aiops eval` refuses a truth file of another run, with the reason (issue 49, point 7: it
printed "54000 false per 1,000 GPU-days over 0 GPU-days")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiops.cli import main

T0 = 1_767_225_600.0


def _run(tmp_path: Path) -> tuple[Path, Path]:
    run = tmp_path / "run"
    run.mkdir()
    (run / "incidents.jsonl").write_text("")
    (run / "run.json").write_text(json.dumps({"first_tick": T0, "last_tick": T0 + 3600, "interval_s": 30}))
    return run, tmp_path / "truth.jsonl"


def test_eval_refuses_a_truth_whose_faults_fall_outside_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, truth = _run(tmp_path)
    fault = {"fault_id": "f1", "kind": "gpu_hbm_ecc", "root": "n00001-gpu0", "affected": [], "jobs": []}
    truth.write_text(json.dumps({**fault, "onset": T0 + 86_400, "end": T0 + 90_000}) + "\n")
    assert main(["eval", "--truth", str(truth), "--run", str(run)]) == 2
    err = capsys.readouterr().err
    assert "does not match the run" in err and "outside the run's ticks" in err
