"""The root-cause daemon stopped mid-stream, killed (SIGKILL) or asked to stop (SIGTERM: finish the
batch, checkpoint, commit), then started again: it carries on from its checkpoint, and what
reaches the topics equals the offline run of the same data, incident for incident and id for id,
with no incident or anomaly lost, duplicated or invented."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from aiops.bench_soak import by_incident as _by_incident
from aiops.bench_soak import incident_differences as _differences
from aiops.cli import main
from ingest.kafka_io import ensure_topics
from tests.faults.test_broker_restart import topic_env
from tests.integration.test_run_kafka import _consume
from vocab.settings import KafkaSettings

pytestmark = [pytest.mark.services, pytest.mark.slow]

GEN = ["--gpus", "256", "--hours", "1", "--interval", "30", "--seed", "8"]
FAULTS = ["--faults", "leaf_down=1,psu_failure=1,pfc_storm=1,gpu_straggler=1"]


def _jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
def test_a_stopped_daemon_restarts_from_its_checkpoint_and_publishes_what_offline_does(
    kafka_settings: KafkaSettings, tmp_path: Path, stop: signal.Signals
) -> None:
    k = kafka_settings
    recorded, offline = tmp_path / "recorded", tmp_path / "offline"
    assert main(["gen", *GEN, *FAULTS, "--out", str(recorded)]) == 0
    assert main(["run", "--input", str(recorded), "--out", str(offline), "--no-predict"]) == 0
    expected = _by_incident(_jsonl(offline / "incidents.jsonl"))
    assert len(expected) >= 3

    ensure_topics(k.bootstrap, [k.telemetry_topic], partitions=3)
    env = {
        **os.environ,
        **topic_env(k),
        "AIOPS_CHECKPOINT_EVERY_S": "2",
    }

    def aiops(*args: str) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "aiops.cli", *args]
        return subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    daemon = ["run", "--kafka", k.bootstrap, "--topology", str(recorded / "topology.json"), "--interval", "30"]
    daemon += ["--events", str(recorded / "events.jsonl"), "--group", k.ingest_group + "-run", "--no-predict"]
    gen = aiops("gen", *GEN, *FAULTS, "--kafka", k.bootstrap, "--speed", "50")  # an hour in ~72 s
    first = aiops(*daemon)
    started = [gen, first]
    try:
        deadline = time.monotonic() + 120
        while not _consume(k, k.incidents_topic) and time.monotonic() < deadline:
            time.sleep(1)
        assert gen.poll() is None, "the stream ended before the kill: nothing to show"
        time.sleep(3)  # a checkpoint or two after the first incident (SIGTERM: one more on the way out)
        os.kill(first.pid, stop)
        _, err = first.communicate(timeout=60)
        if stop == signal.SIGTERM:
            assert first.returncode == 0, err[-3000:]
        assert (Path(env["AIOPS_STATE_DIR"]) / f"run-{k.ingest_group}-run.ckpt").is_file()

        second = aiops(*daemon, "--stop-when-idle", "15")
        started.append(second)
        _, err = second.communicate(timeout=600)
        gen.communicate(timeout=60)
        assert second.returncode == 0, err[-3000:]
        assert "resuming from the checkpoint" in err
    finally:  # a failed assertion must not leave a daemon running
        for p in started:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert _differences(_by_incident(_consume(k, k.incidents_topic)), expected) == []
    streamed = Counter(json.dumps(a, sort_keys=True) for a in _consume(k, k.anomalies_topic))
    assert streamed == Counter(json.dumps(a, sort_keys=True) for a in _jsonl(offline / "anomalies.jsonl"))
