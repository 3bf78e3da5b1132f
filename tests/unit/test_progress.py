"""Long commands show progress on a terminal, and anywhere else a line every few seconds then one
summary line; piped tables stay whole."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from aiops.progress_bar import Progress, output_console

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
GEN = ["gen", "--gpus", "64", "--hours", "0.5", "--interval", "30", "--seed", "5"]  # 60 ticks
TICKS = 60


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS")}
    return {**env, **extra}


def aiops(*args: str) -> subprocess.CompletedProcess[str]:
    """The command with stdout and stderr to pipes, as in a log or CI."""
    return subprocess.run(
        [sys.executable, "-m", "aiops.cli", *args],
        check=False,
        capture_output=True,
        text=True,
        env=_env(TERM="xterm"),
        timeout=600,
    )


def aiops_on_a_terminal(*args: str) -> tuple[str, str]:
    """The command with stderr on a pseudo-terminal (120 columns): what the terminal received,
    ANSI codes stripped, and stdout."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiops.cli", *args],
        stdout=subprocess.PIPE,
        stderr=slave,
        env=_env(TERM="xterm-256color"),
    )
    os.close(slave)
    received = bytearray()
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the command exited and the terminal closed
                break
            if not chunk:
                break
            received += chunk
    finally:
        os.close(master)
    out, _ = proc.communicate(timeout=600)  # one line: it cannot have filled the pipe meanwhile
    assert proc.returncode == 0
    return ANSI.sub("", received.decode("utf-8", "replace")), out.decode()


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("gen") / "cluster"
    return out, aiops(*GEN, "--out", str(out))


def test_gen_on_a_terminal_draws_a_bar_with_count_rate_and_time_left(tmp_path: Path) -> None:
    screen, out = aiops_on_a_terminal(*GEN, "--out", str(tmp_path / "cluster"))
    frames = [f.strip() for f in screen.replace("\n", "\r").split("\r") if f.strip()]
    assert frames and all(f.startswith("aiops gen ") for f in frames), frames
    assert any("━" in f for f in frames)  # the bar
    assert any(re.search(r"\d+/60 ticks .* (\?|\d+:\d\d:\d\d) left$", f) for f in frames), frames  # while running
    last = frames[-1]
    assert re.search(rf"{TICKS}/{TICKS} ticks [\d.,]+ ticks/s done in \d+:\d\d:\d\d$", last), last
    assert out.startswith("generated 64 GPUs") and "aiops gen:" not in out  # stdout: the command's output only


def test_gen_piped_prints_its_progress_then_one_summary_line_on_stderr(
    generated: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, result = generated
    assert result.returncode == 0, result.stderr
    # a busy host may take more than PIPED_EVERY_S: then a progress line or more before the summary
    assert re.fullmatch(
        rf"(aiops gen: \d+/{TICKS} ticks \(\d+%\), .*\n)*aiops gen: {TICKS} ticks in [\d.]+ s \([\d.,]+ ticks/s\)\n",
        result.stderr,
    ), result.stderr
    assert re.fullmatch(r"generated 64 GPUs \(fat-tree\), 60 ticks, .*\n", result.stdout), result.stdout


def test_offline_run_piped_prints_its_progress_then_one_summary_line_in_ticks(
    generated: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    folder, _ = generated
    result = aiops("run", "--input", str(folder), "--out", str(tmp_path / "run"), "--no-predict")
    assert result.returncode == 0, result.stderr
    # meta.json says 60 ticks: counted in ticks, not in MB
    assert re.fullmatch(
        rf"(aiops run: \d+/{TICKS} ticks \(\d+%\), .*\n)*aiops run: {TICKS} ticks in [\d.]+ s \([\d.,]+ ticks/s\)\n",
        result.stderr,
    ), result.stderr
    assert result.stdout.startswith(f"{TICKS} ticks, ") and (tmp_path / "run" / "incidents.jsonl").is_file()


def test_demo_piped_keeps_every_cell_whole_and_knows_its_gpu_days() -> None:
    result = aiops("demo", "--gpus", "128", "--hours", "1", "--faults", "psu_failure=1,nic_link_flap=1", "--no-predict")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "…" not in out  # rich cuts cells that do not fit 80 columns with an ellipsis
    fault_rows = [line for line in out.splitlines() if line.startswith("│ psu_failure") or "│ nic_link_flap" in line]
    assert fault_rows, out
    assert any(re.search(r"│ n\d{5}-psu\d+ +│", row) for row in fault_rows), fault_rows  # the root's whole id
    assert any(re.search(r"│ n\d{5}-nic\d+ +│", row) for row in fault_rows), fault_rows
    assert "GPU-days unknown" not in out
    assert re.search(r"per 1,000 GPU-days over 5 GPU-days\)", out), out  # 128 GPUs for an hour
    assert "\x1b[" not in out  # no redraws of the live view in a pipe


def test_not_a_terminal_nothing_while_running_then_one_line() -> None:
    stream = io.StringIO()
    with Progress(3, "aiops test", "things", stream=stream) as progress:
        for _ in progress.track(range(3)):
            assert stream.getvalue() == ""
    assert re.fullmatch(r"aiops test: 3 things in [\d.]+ s \([\d.,]+ things/s\)\n", stream.getvalue())


def test_an_error_prints_no_summary() -> None:
    stream = io.StringIO()

    def fails() -> None:
        with Progress(None, "aiops test", "things", stream=stream) as progress:
            progress.advance(2)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fails()
    assert stream.getvalue() == ""  # the error is the line


def test_a_dumb_terminal_gets_the_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("TERM", "dumb")
    stream = Tty()
    with Progress(2, "aiops test", "things", stream=stream) as progress:
        progress.advance(2)
    assert stream.getvalue().startswith("aiops test: 2 things in ") and stream.getvalue().count("\n") == 1


def test_the_output_console_is_unbounded_when_piped() -> None:
    assert output_console(io.StringIO()).width >= 1000
