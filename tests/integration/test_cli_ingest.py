"""The operator's path, as processes: `aiops produce` a file to Kafka, `aiops ingest` it into
InfluxDB, and the service's own counters land beside the telemetry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_LP, influxql
from vocab.settings import InfluxSettings, KafkaSettings

pytestmark = pytest.mark.services


def _aiops(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aiops.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def _ingest(k: KafkaSettings, influx: InfluxSettings, *more: str) -> subprocess.CompletedProcess[str]:
    """`aiops ingest` on the test's own topics and database until the topic has been quiet 8 s;
    `more`: further options (--downsample)."""
    return _aiops(
        "ingest",
        *more,
        "--kafka",
        k.bootstrap,
        "--topic",
        k.telemetry_topic,
        "--group",
        k.ingest_group,
        "--influx",
        influx.url,
        "--database",
        influx.database,
        "--stop-when-idle",
        "8",
        env={"AIOPS_KAFKA__DEADLETTER_TOPIC": k.deadletter_topic},
    )


def test_produce_then_ingest_lands_every_valid_line_in_influxdb(
    kafka_settings: KafkaSettings, influx_settings: InfluxSettings
) -> None:
    k = kafka_settings
    produced = _aiops("produce", str(SAMPLE_LP), "--kafka", k.bootstrap, "--topic", k.telemetry_topic)
    assert produced.returncode == 0, produced.stderr
    assert "sent" in produced.stdout
    ingested = _ingest(k, influx_settings)
    assert ingested.returncode == 0, ingested.stderr
    assert "dead-lettered 5" in ingested.stdout
    body = influxql(influx_settings, 'SELECT count("DCGM_FI_DEV_POWER_USAGE") FROM gpu', influx_settings.database)
    assert body["results"][0]["series"][0]["values"][0][1] == 480  # type: ignore[index]
    stats = influxql(
        influx_settings,
        "SELECT last(lines), last(written), last(deadlettered), last(blank_rows), last(dropped) FROM aiops_ingest",
        influx_settings.database,
    )
    _, lines, written, deadlettered, blank, dropped = stats["results"][0]["series"][0]["values"][0]  # type: ignore[index]
    assert (deadlettered, blank, dropped) == (5, 1, 0)  # the sample's one all-blank DCGM line stores nothing
    assert written == lines - deadlettered - blank


def test_bad_arguments_get_one_clear_line_not_a_traceback(tmp_path: Path) -> None:
    missing = _aiops("produce", str(tmp_path / "nope.lp"), "--kafka", "127.0.0.1:9092")
    assert missing.returncode == 2
    assert missing.stderr.strip() == (
        f"aiops: file {tmp_path / 'nope.lp'}: no such file (line protocol: aiops gen --out DIR writes DIR/telemetry.lp)"
    )
    unknown = _aiops("frobnicate")
    assert unknown.returncode == 2
    assert "invalid choice" in unknown.stderr


def test_generated_cluster_through_kafka_into_influxdb(
    kafka_settings: KafkaSettings, influx_settings: InfluxSettings, tmp_path: Path
) -> None:
    """`aiops gen --kafka` publishes a small cluster with faults; `aiops ingest` stores all of it."""
    k = kafka_settings
    generated = _aiops(
        "gen",
        "--gpus",
        "64",
        "--hours",
        "0.5",
        "--interval",
        "30",
        "--seed",
        "3",
        "--faults",
        "gpu_straggler=1,psu_failure=1",
        "--kafka",
        k.bootstrap,
        "--topic",
        k.telemetry_topic,
        "--truth-dir",
        str(tmp_path),
    )
    assert generated.returncode == 0, generated.stderr
    assert {p.name for p in tmp_path.iterdir()} == {"topology.json", "events.jsonl", "truth.jsonl", "meta.json"}
    ingested = _ingest(k, influx_settings)
    assert ingested.returncode == 0, ingested.stderr
    assert "dead-lettered 0" in ingested.stdout
    body = influxql(influx_settings, 'SELECT count("DCGM_FI_DEV_SM_CLOCK") FROM gpu', influx_settings.database)
    gpu_rows = body["results"][0]["series"][0]["values"][0][1]  # type: ignore[index]
    assert 0.99 * 64 * 60 <= gpu_rows <= 64 * 60  # 60 ticks; a rare missing sample is realistic
    stats = influxql(
        influx_settings,
        "SELECT last(lines), last(written), last(blank_rows) FROM aiops_ingest",
        influx_settings.database,
    )
    _, lines, written, blank = stats["results"][0]["series"][0]["values"][0]  # type: ignore[index]
    assert written + blank == lines
