"""The command line's papercuts a newcomer hit (issue 65, item 8): the demo's next commands that
did not run as printed, refusals that came after seconds of imports or asked for the wrong thing
first, long steps silent in a pipe, a scheduler URL followed for ever, benches that ended in a
traceback, a package misnamed, flags shaped differently from one command to the next."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from aiops import progress_bar
from aiops.cli import main
from aiops.cli.commands import build_parser
from aiops.cli.demo import aiops_command, next_steps
from aiops.progress_bar import Progress

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "pandas", "sklearn", "numba", "pyarrow")


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], code: int = 2) -> str:
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert err.startswith("aiops") and "\n" not in err and "Traceback" not in err, err
    return err


# 1. the demo's "Next:" commands run as printed


def _next_commands(report: Path) -> list[list[str]]:
    text = next_steps(report).plain
    lines = text.split("Next:\n", 1)[1].splitlines()
    commands = [line.split("  # ", 1)[0].strip() for line in lines]
    for line, command in zip(lines, commands, strict=True):  # a line is a command and its why, or a comment
        assert command or line.strip().startswith("# "), line
    return [shlex.split(c) for c in commands if c]


def _runnable(program: str, path: str) -> bool:
    if "/" in program:
        return Path(program).is_file() and os.access(program, os.X_OK)
    return shutil.which(program, path=path) is not None


def test_the_demos_next_commands_run_where_the_venv_is_not_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`aiops gen ...`: command not found, for a newcomer who ran .venv/bin/aiops demo."""
    path = "/usr/bin:/bin"  # a shell whose PATH does not have the virtual environment
    monkeypatch.setenv("PATH", path)
    commands = _next_commands(tmp_path / "report")
    aiops = [c for c in commands if "gen" in c or "run" in c or "report" in c]
    assert len(aiops) == 3, commands
    for argv in commands:
        assert _runnable(argv[0], path), argv
    for argv in aiops:  # each runs (its --help: the real ones take minutes)
        done = subprocess.run(
            [*argv, "--help"],
            capture_output=True,
            text=True,
            env={**os.environ, "PATH": path},
            cwd=Path.cwd(),
            check=False,
        )
        assert done.returncode == 0 and done.stdout.startswith("usage: aiops "), (argv, done.stderr)


def test_aiops_is_named_as_the_shell_can_run_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    beside = Path(sys.executable).parent / "aiops"
    monkeypatch.setenv("PATH", str(beside.parent))  # activated: the plain name
    assert aiops_command() == "aiops"
    monkeypatch.setenv("PATH", "")
    assert Path(shlex.split(aiops_command())[0]).absolute() == beside.absolute()
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))  # no console script beside it
    assert aiops_command() == f"{tmp_path / 'bin' / 'python'} -m aiops.cli"


# 2 and 3. what is missing said first, and refused before the stage is imported


@pytest.mark.parametrize("command", ["run", "detect"])
def test_run_and_detect_with_nothing_name_the_offline_and_the_daemon_shapes(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """They asked for --interval, after seconds of imports."""
    err = _refused([command], capsys)
    assert "--input DIR --out DIR" in err and "--kafka HOST:PORT" in err and "--interval" not in err


def test_refusals_that_need_no_import_come_before_the_heavy_imports(tmp_path: Path) -> None:
    folder = tmp_path / "cluster"
    folder.mkdir()
    (folder / "telemetry.lp").write_text("")
    policy = tmp_path / "actions.yml"  # a typo in a policy: `incidnt`
    policy.write_text("policies: [{name: x, match: {source: incidnt}, action: {type: drain}}]\n")
    argvs = [
        ["demo", "--gpus", "12"],
        ["gen", "--gpus", "12", "--out", str(tmp_path / "g")],
        ["gen", "--gpus", "8"],  # neither --out nor --kafka
        ["run", "--input", str(folder)],  # no --out
        ["detect", "--input", str(folder)],
        ["run", "--input", str(folder), "--out", str(tmp_path / "o"), "--actions", str(policy)],
        ["scheduler", "follow", "--slurm", "htp://x", "--out", str(tmp_path / "events.jsonl")],
    ]
    code = (
        "import sys; from aiops.cli import main; "
        f"codes = [main(argv) for argv in {argvs!r}]; "
        f"print(codes, sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == f"{[2] * len(argvs)} []", done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == len(argvs) and all(line.startswith("aiops: ") for line in lines), lines
    said = dict(zip(("demo", "gen", "gen-none", "run", "detect", "actions", "follow"), lines, strict=True))
    assert "multiple of 8, got 12" in said["demo"] and "multiple of 8" in said["gen"]
    assert "--out DIR" in said["gen-none"] and "--kafka" in said["gen-none"]
    assert "--out missing" in said["run"] and "--out missing" in said["detect"]
    assert "incidnt" in said["actions"] or "source" in said["actions"]
    assert "htp://x" in said["follow"]


# 4. long steps piped: a line every few seconds


def test_not_on_a_terminal_a_line_every_few_seconds_then_the_summary() -> None:
    stream = io.StringIO()
    now = [0.0]

    def clock() -> float:
        return now[0]

    with Progress(4, "aiops test", "ticks", stream=stream, every_s=5.0, clock=clock) as progress:
        for _ in range(4):
            now[0] += 3.0  # a tick each 3 s: a line at 6 s and at 12 s
            progress.advance()
    lines = stream.getvalue().splitlines()
    assert lines[:2] == [
        "aiops test: 2/4 ticks (50%), 0.3 ticks/s, 0:00:06 left",
        "aiops test: 4/4 ticks (100%), 0.3 ticks/s",
    ]
    assert lines[2] == "aiops test: 4 ticks in 12.0 s (0.3 ticks/s)" and len(lines) == 3


@pytest.fixture(scope="module")
def piped_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """gen, run and report of a small cluster with a progress line at every step (the interval 0),
    their stderr (a StringIO: not a terminal) kept."""
    tmp = tmp_path_factory.mktemp("piped")
    said: dict[str, str] = {}
    steps = {
        "gen": [
            *("gen", "--out", str(tmp / "cluster"), "--gpus", "16", "--hours", "0.25", "--interval", "30"),
            *("--seed", "5", "--faults", "psu_failure=1", "--realism", "clean"),
        ],
        "run": ["run", "--input", str(tmp / "cluster"), "--out", str(tmp / "run"), "--no-predict"],
        "report": [
            *("report", str(tmp / "run"), "--truth", str(tmp / "cluster" / "truth.jsonl")),
            *("--out", str(tmp / "pages")),
        ],
    }
    with pytest.MonkeyPatch.context() as m:
        m.setattr(progress_bar, "PIPED_EVERY_S", 0.0)
        for name, argv in steps.items():
            err, out = io.StringIO(), io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                assert main(argv) == 0, err.getvalue()
            said[name] = err.getvalue()
    return tmp, said


@pytest.mark.parametrize(("step", "unit"), [("gen", "ticks"), ("run", "ticks"), ("report", "incident pages")])
def test_gen_run_and_report_piped_say_where_they_are(
    piped_run: tuple[Path, dict[str, str]], step: str, unit: str
) -> None:
    """They printed nothing for 93 s, 444 s and 56 s."""
    _, said = piped_run
    lines = said[step].splitlines()
    going = [line for line in lines if re.fullmatch(rf"aiops {step}: [\d,]+/[\d,]+ {unit} \(\d+%\), .*", line)]
    assert going, said[step]
    assert re.fullmatch(rf"aiops {step}: [\d,]+ {unit} in [\d.]+ s \(.*\)", lines[-1]), said[step]


# 5. a scheduler URL that cannot be followed


@pytest.mark.parametrize("url", ["htp://x", "slurm-head:6820", "http://"])
def test_follow_refuses_a_url_that_is_not_http_with_a_host(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--slurm htp://x` exited 0 having published nothing."""
    events = tmp_path / "events.jsonl"
    err = _refused(["scheduler", "follow", "--slurm", url, "--out", str(events), "--polls", "1"], capsys)
    assert url in err and "http://" in err
    assert not events.exists()


# 6. benches that ended in a traceback


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_bench_dashboards_without_influxdb_says_so_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    err = _refused(["bench", "dashboards", "--influx", url, "--gpus", "16", "--hours", "0.05"], capsys, code=1)
    assert f"no InfluxDB answers at {url}" in err


def test_bench_scale_on_a_cluster_too_small_for_its_faults_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _refused(["bench", "scale", "--sizes", "16", "--ticks", "2", "--work", str(tmp_path)], capsys, code=1)
    assert "aiops gen failed" in err and "no free place" in err


# 7. the package's name


def test_replay_names_the_package_as_pip_knows_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "confluent_kafka" else real(name, *a)
    )
    err = _refused(["replay", "aiops.recorded"], capsys)
    assert "pip install 'aiops-gpu[bench]'" in err


# 8. one shape for the same thing


def test_eval_takes_the_run_as_report_does(
    piped_run: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    tmp, _ = piped_run
    truth, run = str(tmp / "cluster" / "truth.jsonl"), str(tmp / "run")
    assert main(["eval", "--run", run, "--truth", truth, "--json"]) == 0
    flagged = capsys.readouterr().out
    assert main(["eval", run, "--truth", truth, "--json"]) == 0
    assert capsys.readouterr().out == flagged and flagged.startswith("{")
    err = _refused(["eval", "--truth", truth], capsys)
    assert "RUN_DIR" in err


def test_demo_takes_out_as_report_does() -> None:
    parser = build_parser()
    assert parser.parse_args(["demo", "--out", "pages"]).report == "pages"
    assert parser.parse_args(["demo", "--report", "pages"]).report == "pages"


# 9. stale words


def test_the_model_help_says_the_model_ships(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("run", "detect"):
        with pytest.raises(SystemExit) as exited:
            main([command, "--help"])
        assert exited.value.code == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "default-predictor.skops" in out and "trained on first use" not in out
