"""End to end on generated clusters: every fault kind is caught on its root or affected entities
within two ticks of onset (a straggler within its window), and job churn, checkpoints and maintenance raise nothing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from detectors.detect_loop import detect_folder, read_anomalies
from detectors.evaluate import evaluate, format_report
from telemetry_gen.emit import write_folder
from telemetry_gen.generator import GenConfig, Generation
from vocab.thresholds import WINDOW_S, PeerThresholds

# a straggler is a GPU that stays slow, judged on the median of a window of scrapes (one scrape of a
# power-capped clock says nothing): it is seen within that window and the peer rules' persistence
STRAGGLER_TICKS = max(math.ceil(WINDOW_S / 30), PeerThresholds().window_min_scrapes) + PeerThresholds().persist_ticks

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("seed", [21, 22])
def test_every_fault_kind_is_detected_within_two_ticks_with_no_false_alarm(tmp_path: Path, seed: int) -> None:
    gen = Generation(
        GenConfig(realism="clean", gpus=1024, hours=3, interval=30, seed=seed, faults="all=1", maintenance_per_day=8)
    )
    write_folder(gen, tmp_path / "run")
    stats = detect_folder(tmp_path / "run", tmp_path / "out", 30)
    anomalies = read_anomalies(tmp_path / "out" / "anomalies.jsonl")
    report = evaluate(anomalies, gen.truth(), 30, 1024, 3, allowance={"gpu_straggler": STRAGGLER_TICKS})
    assert report.recall == 1.0, format_report(report)
    assert report.false_alarm_episodes == 0, [(a.entity, a.metric, a.detector) for a in report.false_alarms]
    assert stats.deadletters == 0


def test_job_churn_checkpoints_and_maintenance_raise_nothing(tmp_path: Path) -> None:
    gen = Generation(
        GenConfig(realism="clean", gpus=1024, hours=3, interval=30, seed=23, faults="", maintenance_per_day=16)
    )
    assert any(e["type"] == "maintenance" for e in gen.events())
    write_folder(gen, tmp_path / "run")
    stats = detect_folder(tmp_path / "run", tmp_path / "out", 30)
    anomalies = read_anomalies(tmp_path / "out" / "anomalies.jsonl")
    assert anomalies == [], [(a.at, a.entity, a.metric, a.detector) for a in anomalies[:10]]
    assert stats.ticks == 360
