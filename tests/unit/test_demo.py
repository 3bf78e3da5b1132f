"""The README's first command: both demos run in-process, without services, and say what they found."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from aiops.cli.demo import run_cluster_demo
from aiops.cli.demo_sample import run_demo


def test_cluster_demo_names_each_fault_in_one_incident() -> None:
    out = io.StringIO()
    code = run_cluster_demo(
        gpus=128, hours=1.0, seed=3, faults="psu_failure=1,nic_link_flap=1", console=Console(file=out, width=200)
    )
    text = out.getvalue()
    assert code == 0
    assert "missed" not in text and "no:" not in text  # every fault has its incident, naming its root
    [overall] = [line.split() for line in text.splitlines() if line.startswith("all ") and "TTD" not in line][:1]
    faults, detected, recall = overall[1:4]
    assert (faults, detected, recall) == ("2", "2", "1.00")
    assert overall[-1] == "1.00"  # precision: no incident beyond the two faults


def test_sample_demo_shows_accepted_telemetry_and_dead_letters() -> None:
    out = io.StringIO()
    assert run_demo(console=Console(file=out, width=200)) == 0
    text = out.getvalue()
    assert "unknown measurement 'mystery_device'" in text
    assert "5 dead-lettered" in text


def test_a_demo_too_small_for_its_faults_says_so_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from aiops.cli import main

    assert main(["demo", "--no-predict", "--gpus", "128", "--hours", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("aiops: no free place for another") and "\n" not in err
