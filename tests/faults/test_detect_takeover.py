"""Two detection daemons (`aiops detect --kafka`) in one group: one holds every partition, the
other stands by. The active one is SIGKILLed mid-stream; the standby takes over from its
checkpoint (state moves with the partitions: baselines, persistence, held ticks) and skips what
was already published. The anomalies topic then equals the offline detection of the same data,
anomaly for anomaly: none lost, none twice, none invented by a relearning detector."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from aiops.cli import main
from tests.faults.daemons import jsonl, reaped, replay
from tests.integration.test_run_kafka import _consume
from vocab.settings import KafkaSettings

pytestmark = [pytest.mark.services, pytest.mark.slow]


def test_a_standby_detector_takes_over_from_the_checkpoint(kafka_settings: KafkaSettings, tmp_path: Path) -> None:
    r = replay(kafka_settings, tmp_path)
    k = r.k
    reference = tmp_path / "offline-detect"
    assert main(["detect", "--input", str(r.recorded), "--out", str(reference), "--no-predict"]) == 0
    expected = Counter(json.dumps(a, sort_keys=True) for a in jsonl(reference / "anomalies.jsonl"))
    assert expected
    env_group = {**r.env, "AIOPS_KAFKA__DETECT_GROUP": k.ingest_group + "-detect"}
    detect = ["detect", "--kafka", k.bootstrap, "--interval", "30", "--events", str(r.recorded / "events.jsonl")]
    detect += ["--no-predict"]
    r.env = env_group
    with reaped() as track:
        first = track(r.aiops(*detect))
        time.sleep(2)  # the elder holds the partitions
        standby = track(r.aiops(*detect, "--stop-when-idle", "15"))
        gen = track(r.stream())
        deadline = time.monotonic() + 120
        while len(_consume(k, k.anomalies_topic)) < 50 and time.monotonic() < deadline:
            time.sleep(1)
        assert gen.poll() is None, "the stream ended before the kill: nothing to show"
        time.sleep(3)  # a checkpoint or two (AIOPS_CHECKPOINT_EVERY_S=2)
        first.kill()
        _, err_first = first.communicate(timeout=60)
        assert "standing by" not in err_first
        _, err = standby.communicate(timeout=600)
        gen.communicate(timeout=60)
        assert standby.returncode == 0, err[-3000:]
        assert "resuming detection from the checkpoint" in err
    streamed = Counter(json.dumps(a, sort_keys=True) for a in _consume(k, k.anomalies_topic))
    assert streamed == expected
