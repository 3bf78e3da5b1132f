"""The training step signal (ingest.jobs.steps) and the helper a loop calls (ingest.jobs.aiops_step):
what the helper writes is what the reader reads; a real loop's step log
(../shared/datasets/real-gpu/h200/train-steps.csv) is read as it is; hostile lines are refused;
the helper is stdlib-only, works copied alone beside a script, and never raises into the loop."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.jobs import aiops_step, read_step_csv, read_step_lines

ROOT = Path(__file__).resolve().parents[2]
STEPS_CSV = ROOT.parent / "shared" / "datasets" / "real-gpu" / "h200" / "train-steps.csv"
HELPER = ROOT / "ingest" / "jobs" / "aiops_step.py"
T0 = 1_796_402_653_306_000_000


def writer(tmp_path: Path, **kw: object) -> aiops_step.StepWriter:
    env = {"SLURM_JOB_ID": "4242", "RANK": "17", "AIOPS_NODE_ID": "a08-p1-dgx-04-c17", "CUDA_VISIBLE_DEVICES": "3"}
    return aiops_step.StepWriter(str(tmp_path), env=env, **kw)  # type: ignore[arg-type]


def test_what_the_helper_writes_the_reader_reads(tmp_path: Path) -> None:
    with writer(tmp_path) as w:
        for i in range(3):
            w.step(1200 + i, 0.1824 + i / 1000, phase="train", end_ns=T0 + i * 182_400_000)
        w.step(1203, 8.0, phase="train-checkpoint", end_ns=T0 + 9 * 10**9)
    path = tmp_path / "train_step-4242-rank17.lp"
    assert path.read_bytes().splitlines()[0] == (
        b'train_step,job=4242,rank=17,node=a08-p1-dgx-04-c17,gpu=3 step=1200i,duration_s=0.1824,phase="train" '
        + str(T0).encode()
    )
    read = read_step_lines(path.read_bytes())
    assert read.deadletters == []
    first, *_, last = read.records
    assert (first.job, first.rank, first.node, first.gpu) == ("4242", 17, "a08-p1-dgx-04-c17", "a08-p1-dgx-04-c17-gpu3")
    assert (first.step, first.duration_s, first.phase, first.time_ns) == (1200, 0.1824, "train", T0)
    assert (last.step, last.phase) == (1203, "train-checkpoint")


def test_the_real_loops_step_log_is_read_as_it_is() -> None:
    data = STEPS_CSV.read_bytes()
    read = read_step_csv(data, job="4242", rank=0, node="h200-01", gpu=0)
    assert read.deadletters == []
    assert len(read.records) == 702 == read.counts["rows"]
    first = read.records[0]
    assert (first.step, first.phase, first.duration_s) == (0, "train", 3.1707), "the first step compiles: 3.2 s"
    assert first.time_ns == round((1796402649.767 + 3.1707) * 1e9), "the step's end"
    assert {r.phase for r in read.records} == {"train"}
    assert all(b.time_ns > a.time_ns for a, b in zip(read.records, read.records[1:], strict=False))
    assert first.gpu == "h200-01-gpu0"


def test_a_step_column_is_taken_when_the_log_has_one() -> None:
    read = read_step_csv(b"t,phase,step_s,step\n1796402652.938,eval,0.5,77\n", rank=1)
    assert read.records[0].step == 77 and read.records[0].phase == "eval"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"gpu,gpu=n1-gpu0 DCGM_FI_DEV_GPU_TEMP=40 1796402653306000000", "is not 'train_step'"),
        (b'train_step,rank=1,node=n[1-4] step=1i,duration_s=0.2,phase="train" 1796402653306000000', "ids.node"),
        (b'train_step,rank=1,job=a;b step=1i,duration_s=0.2,phase="train" 1796402653306000000', "ids.job.charset"),
        (b'train_step,rank=99999999 step=1i,duration_s=0.2,phase="train" 1796402653306000000', "rank"),
        (b'train_step,rank=1,gpu=3 step=1i,duration_s=0.2,phase="train" 1796402653306000000', "gpu without node"),
        (b'train_step,rank=1,node=n1,gpu=99 step=1i,duration_s=0.2,phase="train" 1796402653306000000', "gpu: 99"),
        (b'train_step,rank=1 step=-1i,duration_s=0.2,phase="train" 1796402653306000000', "step: -1"),
        (b'train_step,rank=1 step=1i,duration_s=-0.2,phase="train" 1796402653306000000', "duration_s: -0.2"),
        (b'train_step,rank=1 step=1i,duration_s=1e9,phase="train" 1796402653306000000', "duration_s"),
        (b'train_step,rank=1 step=1i,duration_s=nan,phase="train" 1796402653306000000', "line 2"),
        (b'train_step,rank=1 step=1i,duration_s=0.2,phase="$(reboot)" 1796402653306000000', "not a phase word"),
        (b'train_step,rank=1 step=1i,phase="train" 1796402653306000000', "no duration_s"),
        (b'train_step,rank=1 step=1i,duration_s=0.2,phase="train" 5', "no time between 2000 and 2100"),
        (b"train_step,rank=1 step=1i,duration_s=0.2,phase=3i 1796402653306000000", "type conflict"),
    ],
)
def test_hostile_step_lines_are_refused_alone(line: bytes, reason: str) -> None:
    good = b'train_step,rank=1 step=1i,duration_s=0.2,phase="train" 1796402653306000000'
    read = read_step_lines(good + b"\n" + line + b"\n" + good + b"\n")
    assert len(read.records) == 2
    (letter,) = read.deadletters
    assert letter.stage == "train_step" and reason in letter.reason and letter.reason.startswith("line 2")


@pytest.mark.parametrize(
    ("csv", "reason"),
    [
        (b"time,step_s\n1,2\n", "expected the columns t, phase, step_s"),
        (b"t,phase,step_s,t\n1,train,2,3\n", "each once"),
        (b"t,phase,step_s\n1796402652.938,train,-1\n", "duration_s: -1 is outside"),
        (b"t,phase,step_s\n1796402652.938,train,inf\n", "not a finite number"),
        (b"t,phase,step_s\n1e300,train,0.2\n", "no time"),
        (b"t,phase,step_s\n1796402652.938,train\n", "2 columns"),
        (b"t,phase,step_s\n1796402652.938,rm -rf /,0.2\n", "not a phase word"),
        (b"t,phase,step_s\nabc,train,0.2\n", "is not a number"),
    ],
)
def test_hostile_step_logs_are_refused_row_by_row(csv: bytes, reason: str) -> None:
    read = read_step_csv(csv, rank=0)
    assert read.records == []
    assert reason in read.deadletters[0].reason


def test_the_callers_ids_are_checked_too() -> None:
    read = read_step_csv(STEPS_CSV.read_bytes(), rank=0, node="all")
    assert read.records == [] and "ids.node.reserved" in read.deadletters[0].reason


# ------------------------------------------------------------------------------- the helper


def test_the_helper_imports_the_standard_library_only() -> None:
    tree = ast.parse(HELPER.read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names - {"__future__"} <= set(sys.stdlib_module_names), names - set(sys.stdlib_module_names)


def test_the_helper_works_copied_alone_beside_a_training_script(tmp_path: Path) -> None:
    shutil.copy(HELPER, tmp_path / "aiops_step.py")
    (tmp_path / "train.py").write_text(
        "import aiops_step\nw = aiops_step.StepWriter()\nfor i in range(5):\n    w.step(i, 0.18, phase='train')\n"
    )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "AIOPS_STEP_DIR": str(tmp_path / "steps"),
        "SLURM_JOB_ID": "77",
        "SLURM_PROCID": "3",
        "AIOPS_NODE_ID": "gpu-node-017",
        "CUDA_VISIBLE_DEVICES": "GPU-6b7c1b2e-0000-0000-0000-000000000000",
    }
    # -S: no site-packages (so nothing of the service is importable), only the standard library
    subprocess.run([sys.executable, "-S", "-E", "-s", "train.py"], cwd=tmp_path, env=env, check=True, timeout=60)
    read = read_step_lines((tmp_path / "steps" / "train_step-77-rank3.lp").read_bytes())
    assert read.deadletters == [] and [r.step for r in read.records] == [0, 1, 2, 3, 4]
    assert {(r.job, r.rank, r.node, r.gpu) for r in read.records} == {("77", 3, "gpu-node-017", None)}, (
        "a UUID in CUDA_VISIBLE_DEVICES names no index: the GPU is left to the scheduler's allocation"
    )


def test_the_helper_never_raises_into_the_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the directory should be")
    w = writer(blocked)
    for i in range(3):
        w.step(i, 0.2)
    w.step(3, float("nan"))
    assert (w.errors, w.skipped) == (3, 1)
    assert capsys.readouterr().err.count("aiops_step: cannot write") == 1


@pytest.mark.parametrize(
    ("env", "gpu"),
    [
        ({"CUDA_VISIBLE_DEVICES": "5"}, 5),
        ({"CUDA_VISIBLE_DEVICES": "4,5,6,7", "LOCAL_RANK": "2"}, 6),
        ({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, None),
        ({"CUDA_VISIBLE_DEVICES": "MIG-1234"}, None),
        ({"LOCAL_RANK": "2"}, None),
    ],
)
def test_the_helper_names_a_gpu_only_where_the_environment_says_which(env: dict[str, str], gpu: int | None) -> None:
    assert aiops_step.gpu_from_env(env) == gpu


def test_tag_values_are_escaped(tmp_path: Path) -> None:
    w = aiops_step.StepWriter(str(tmp_path), job="ns/my job,x", rank=0, node="n1", env={})
    line = w.line(1, 0.5, phase='a"b', end_ns=T0).encode()
    read = read_step_lines(line)
    assert "ids.job.charset" in read.deadletters[0].reason, "escaped well enough to parse, then refused by the grammar"
