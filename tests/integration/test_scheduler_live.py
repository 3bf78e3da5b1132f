"""The schedule, live, through Kafka: the root-cause daemon starts knowing no job at all; the
scheduler's events reach it on the events topic only as they happen (every job starts, and a
maintenance reservation is made, after the daemon started), and the incidents it publishes equal
the offline run's with the same events in a file. The offline runs show that both were honoured:
the stragglers are found against their jobs' cohorts (jobs of any GPU count, several on a node),
and the GPU that falls off the bus inside the maintenance window opens no incident, where it does
without the window."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from aiops.cli import main
from aiops.cli.scheduler import KafkaSink
from benchmarks.soak import by_incident, incident_differences
from tests.integration.test_run_kafka import _consume
from vocab.settings import KafkaSettings

pytestmark = pytest.mark.services

GEN = ["--gpus", "256", "--hours", "2", "--interval", "30", "--seed", "12", "--job-shapes", "gpus"]
FAULTS = ["--faults", "gpu_straggler=2,gpu_fell_off_bus=1,leaf_down=1"]
CHUNKS = 4
TOPICS = ("telemetry_topic", "anomalies_topic", "predictions_topic", "incidents_topic", "notices_topic")


def _lines_by_time(path: Path) -> list[tuple[float, bytes]]:
    out = []
    for line in path.read_bytes().splitlines(keepends=True):
        if line.strip():
            out.append((int(line.rsplit(b" ", 1)[1]) / 1e9, line))
    return out


def _offline(recorded: Path, events: list[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    folder = out / "in"
    folder.mkdir(parents=True)
    for name in ("telemetry.lp", "topology.json", "meta.json"):
        (folder / name).symlink_to(recorded / name)
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    assert main(["run", "--input", str(folder), "--out", str(out / "out"), "--no-predict"]) == 0
    return [json.loads(line) for line in (out / "out" / "incidents.jsonl").read_text().splitlines() if line]


def _roots(incidents: list[dict[str, Any]]) -> set[str]:
    return {i["root_cause"]["entity"] for i in incidents if i["status"] != "warning"}


@pytest.mark.parametrize("restart", [False, True], ids=["one-daemon", "restarted-midway"])
def test_live_events_topic_gives_the_offline_incidents(
    kafka_settings: KafkaSettings, tmp_path: Path, restart: bool
) -> None:
    """`restarted-midway`: the daemon is stopped (SIGTERM: it checkpoints) after half the history
    and started again; what it heard of the schedule comes back with its checkpoint, and it reads
    the events topic on from where the checkpoint says."""
    recorded = tmp_path / "recorded"
    assert main(["gen", *GEN, *FAULTS, "--out", str(recorded)]) == 0
    truth = [json.loads(line) for line in (recorded / "truth.jsonl").read_text().splitlines() if line]
    events = [json.loads(line) for line in (recorded / "events.jsonl").read_text().splitlines() if line]
    assert any(len(e.get("gpus_by_node", {}).get(n, [])) < 8 for e in events for n in e.get("nodes", [])), (
        "the history should hold jobs that hold part of a node"
    )
    # a maintenance reservation made mid-run on the node whose GPU falls off the bus
    bus = next(f for f in truth if f["kind"] == "gpu_fell_off_bus")
    meta = json.loads((recorded / "meta.json").read_text())
    node = bus["root"].rsplit("-gpu", 1)[0]
    announced = max(meta["start"] + 60.0, bus["onset"] - 300.0)
    window = {
        "type": "maintenance",
        "name": "resv-fix",
        "nodes": [node],
        "time": announced,
        "start": announced,
        "end": bus["onset"] + 3600.0,
        "reason": "reservation resv-fix",
    }
    events = sorted([*events, window], key=lambda e: float(e["time"]))

    without_window = _offline(recorded, [e for e in events if e is not window], tmp_path / "control")
    offline = _offline(recorded, events, tmp_path / "offline")
    assert bus["root"] in _roots(without_window), "the control run should find the GPU that fell off the bus"
    assert bus["root"] not in _roots(offline), "the maintenance window should silence its node"
    stragglers = {f["root"] for f in truth if f["kind"] == "gpu_straggler"}
    assert stragglers <= _roots(offline), "stragglers are found against the GPUs their jobs hold"

    env = {**os.environ, **{f"AIOPS_KAFKA__{k.upper()}": getattr(kafka_settings, k) for k in TOPICS}}
    env["AIOPS_KAFKA__EVENTS_TOPIC"] = kafka_settings.events_topic
    env["AIOPS_KAFKA__DEADLETTER_TOPIC"] = kafka_settings.deadletter_topic
    env["AIOPS_CHECKPOINT_EVERY_S"] = "2"
    log = tmp_path / "restarted.log"
    from ingest.kafka import ensure_topics

    ensure_topics(kafka_settings.bootstrap, [kafka_settings.telemetry_topic], partitions=3)
    command = [sys.executable, "-m", "aiops.cli", "run", "--kafka", kafka_settings.bootstrap, "--no-predict"]
    command += ["--topology", str(recorded / "topology.json"), "--interval", "30", "--stop-when-idle", "20"]
    command += ["--group", kafka_settings.ingest_group + "-run"]
    daemon = subprocess.Popen(command, env=env)
    try:
        sink = KafkaSink(kafka_settings.bootstrap, kafka_settings.events_topic, lambda: False)
        lines = _lines_by_time(recorded / "telemetry.lp")
        edges = [meta["start"] + (meta["end"] - meta["start"]) * (i + 1) / CHUNKS for i in range(CHUNKS)]
        edges[-1] = float("inf")
        said = 0
        for i, edge in enumerate(edges):
            due = [e for e in events[said:] if float(e["time"]) < edge]  # what the scheduler has said by then
            sink.publish(due)
            said += len(due)
            chunk = tmp_path / f"chunk{i}.lp"
            chunk.write_bytes(b"".join(line for t, line in lines if (edges[i - 1] if i else 0.0) <= t < edge))
            produce = ["produce", str(chunk), "--kafka", kafka_settings.bootstrap]
            assert main([*produce, "--topic", kafka_settings.telemetry_topic]) == 0
            if restart and i == CHUNKS // 2 - 1:
                checkpoint = Path(env["AIOPS_STATE_DIR"]) / f"run-{kafka_settings.ingest_group}-run.ckpt"
                deadline = time.monotonic() + 300
                while not checkpoint.is_file() and time.monotonic() < deadline:  # running, handlers set
                    time.sleep(0.5)
                daemon.send_signal(signal.SIGTERM)
                assert daemon.wait(timeout=300) == 0
                with log.open("wb") as err:  # the child holds its own copy
                    daemon = subprocess.Popen(command, env=env, stderr=err)
        sink.close()
        assert said == len(events)
        assert daemon.wait(timeout=600) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
    streamed = _consume(kafka_settings, kafka_settings.incidents_topic)
    assert incident_differences(by_incident(streamed), by_incident(offline)) == []
    if restart:
        assert "resuming from the checkpoint" in log.read_text()
