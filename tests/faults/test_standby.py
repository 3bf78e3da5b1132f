"""Two root-cause daemons in one group: one holds every partition, the other stands by. The group
is rebalanced three times while `aiops gen` streams an hour into it: a standby joins (the active
keeps everything), the active is killed (the standby takes over from the checkpoint), and a new
member joins the survivor. What reaches the topics equals the offline run of the same data,
incident for incident and id for id, anomaly for anomaly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from aiops.bench_soak import by_incident, incident_differences
from aiops.cli import main
from ingest.kafka_io import STANDBY, OneActiveAssignor, ensure_topics
from tests.faults.test_broker_restart import topic_env
from tests.integration.test_run_kafka import _consume
from vocab.settings import KafkaSettings

GEN = ["--gpus", "256", "--hours", "1", "--interval", "30", "--seed", "8"]
FAULTS = ["--faults", "leaf_down=1,psu_failure=1,pfc_storm=1,gpu_straggler=1"]


def _member(member_id: str, started_ns: int) -> SimpleNamespace:
    metadata = SimpleNamespace(topics=["aiops.telemetry"], user_data=str(started_ns).encode())
    return SimpleNamespace(member_id=member_id, metadata=metadata)


def test_the_oldest_member_gets_every_partition_and_the_others_none() -> None:
    cluster = SimpleNamespace(partitions_for_topic=lambda topic: {2, 0, 1})
    members = [_member("young", 300), _member("old", 100), _member("middle", 200)]
    got = OneActiveAssignor().assign(cluster, members)
    assert got["old"].partitions() and sorted(tp.partition for tp in got["old"].partitions()) == [0, 1, 2]
    assert got["young"].partitions() == [] and got["middle"].partitions() == []
    assert got["young"].user_data == got["middle"].user_data == STANDBY and got["old"].user_data == b""


def _jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.services
@pytest.mark.slow
def test_a_standby_takes_over_from_the_checkpoint_and_newcomers_wait(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    k = kafka_settings
    recorded, offline = tmp_path / "recorded", tmp_path / "offline"
    assert main(["gen", *GEN, *FAULTS, "--out", str(recorded)]) == 0
    assert main(["run", "--input", str(recorded), "--out", str(offline), "--no-predict"]) == 0
    expected = by_incident(_jsonl(offline / "incidents.jsonl"))
    assert len(expected) >= 3

    ensure_topics(k.bootstrap, [k.telemetry_topic], partitions=3)
    env = {**os.environ, **topic_env(k), "AIOPS_CHECKPOINT_EVERY_S": "2"}  # one state dir for the group

    def aiops(*args: str) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "aiops.cli", *args]
        return subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    daemon = ["run", "--kafka", k.bootstrap, "--topology", str(recorded / "topology.json"), "--interval", "30"]
    daemon += ["--events", str(recorded / "events.jsonl"), "--group", k.ingest_group + "-run", "--no-predict"]
    first = aiops(*daemon)
    time.sleep(2)  # the first is the elder: it holds the partitions
    standby = aiops(*daemon, "--stop-when-idle", "15")
    started = [first, standby]
    try:
        gen = aiops("gen", *GEN, *FAULTS, "--kafka", k.bootstrap, "--speed", "50")  # an hour in ~72 s
        started.append(gen)
        deadline = time.monotonic() + 120
        while not _consume(k, k.incidents_topic) and time.monotonic() < deadline:
            time.sleep(1)
        assert gen.poll() is None, "the stream ended before the kill: nothing to show"
        time.sleep(3)
        first.kill()
        _, err_first = first.communicate(timeout=60)
        assert "standing by" not in err_first
        time.sleep(20)  # the group notices the dead member (session timeout) and the standby takes over
        newcomer = aiops(*daemon)
        started.append(newcomer)
        _, err = standby.communicate(timeout=600)
        gen.communicate(timeout=60)
        assert standby.returncode == 0, err[-3000:]
        assert "standing by" in err and "resuming from the checkpoint" in err
        newcomer.send_signal(signal.SIGTERM)  # it never held anything: it stops without a checkpoint
        _, err_new = newcomer.communicate(timeout=60)
        assert newcomer.returncode == 0, err_new[-3000:]
        assert "standing by" in err_new
    finally:  # a failed assertion must not leave a daemon running
        for p in started:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert incident_differences(by_incident(_consume(k, k.incidents_topic)), expected) == []
    streamed = Counter(json.dumps(a, sort_keys=True) for a in _consume(k, k.anomalies_topic))
    assert streamed == Counter(json.dumps(a, sort_keys=True) for a in _jsonl(offline / "anomalies.jsonl"))
