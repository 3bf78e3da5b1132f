"""`aiops eval` and `aiops report` refuse a truth file of another run, with the reason (issue 49,
point 7: it printed "54000 false per 1,000 GPU-days over 0 GPU-days"): its times outside the
run's, or its input (topology, scheduler events) not the one the run read."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from aiops.cli import main
from context.watch import digest

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


# ------------------------------------------------------------------ a truth of another generated run


@dataclass(frozen=True)
class Generated:
    run: Path  # `aiops run` over `own`
    own: Path  # the cluster it read (64 GPUs, seed 1)
    other_seed: Path  # 64 GPUs, seed 2: the same topology, another schedule
    other_size: Path  # 128 GPUs, seed 1: another topology


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Generated:
    """Three tiny clusters over the same half hour (one fault each, so that every truth has a
    fault whose time lies inside the run) and a run over the first."""
    root = tmp_path_factory.mktemp("generated")
    folders = []
    for gpus, seed in ((64, 1), (64, 2), (128, 1)):
        folder = root / f"gpus{gpus}-seed{seed}"
        args = ["gen", "--gpus", str(gpus), "--hours", "0.5", "--seed", str(seed), "--faults", "gpu_hbm_ecc=1"]
        assert main([*args, "--out", str(folder)]) == 0
        folders.append(folder)
    run = root / "run"
    assert main(["run", "--input", str(folders[0]), "--out", str(run)]) == 0
    return Generated(run, *folders)


def test_the_run_records_what_it_read(generated: Generated) -> None:
    recorded = json.loads((generated.run / "run.json").read_text())["input"]
    assert recorded["path"] == str(generated.own.resolve())
    assert recorded["topology"] == digest((generated.own / "topology.json").read_bytes())
    assert recorded["events"] == digest((generated.own / "events.jsonl").read_bytes())


def test_eval_takes_the_runs_own_truth(generated: Generated, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--truth", str(generated.own / "truth.jsonl"), "--run", str(generated.run)]) == 0
    assert "does not match" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("other", "file", "reason"),
    [("other_seed", "events.jsonl", "another schedule"), ("other_size", "topology.json", "another cluster")],
)
def test_eval_and_report_refuse_a_truth_of_another_generated_run(
    generated: Generated, other: str, file: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = getattr(generated, other) / "truth.jsonl"
    # the same half hour: the times alone would let it through
    assert main(["eval", "--truth", str(truth), "--run", str(generated.run)]) == 2
    err = capsys.readouterr().err
    assert "does not match the run" in err and f"{getattr(generated, other) / file}" in err and reason in err
    assert str(generated.own.resolve()) in err  # the input the run did read is named
    assert main(["report", str(generated.run), "--truth", str(truth), "--out", str(tmp_path / "pages")]) == 2
    assert reason in capsys.readouterr().err
    assert not (tmp_path / "pages" / "index.html").exists()


def test_a_run_json_without_its_input_still_evaluates_with_a_note(
    generated: Generated, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "old-run"
    shutil.copytree(generated.run, old)
    stats = json.loads((old / "run.json").read_text())
    del stats["input"]  # as runs wrote it before they recorded their input
    (old / "run.json").write_text(json.dumps(stats))
    assert main(["eval", "--truth", str(generated.own / "truth.jsonl"), "--run", str(old)]) == 0
    assert "records no digest of the input it read" in capsys.readouterr().err
    assert main(["report", str(old), "--truth", str(generated.own / "truth.jsonl"), "--out", str(tmp_path / "p")]) == 0
    assert "records no digest of the input it read" in capsys.readouterr().err
    assert (tmp_path / "p" / "index.html").is_file()
