"""Detection split across the members of its group (`aiops detect --kafka`, one process each):
one member starts, a second and a third join mid-stream (the group rebalances, partitions move
with their checkpoints), the second is SIGKILLed (its partitions go to the others, who load their
checkpoints and skip what it had published). The anomalies topic then equals the offline
detection of the same data, anomaly for anomaly: none lost, none twice, none changed by a
comparison that saw only part of a cohort, none invented by a relearning detector. Meanwhile the
root-cause daemon (`aiops run --from-detection`, one active member and one standing by) reads
their findings as they come and opens the offline run's incidents, id for id, state for state:
each tick reached its engine whole, whichever member judged which partition of it."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from aiops.cli import main
from benchmarks.soak import by_incident, incident_differences
from ingest.kafka import ensure_topics
from tests.faults.daemons import jsonl, reaped, replay
from tests.integration.test_run_kafka import _consume
from vocab.settings import KafkaSettings

pytestmark = [pytest.mark.services, pytest.mark.slow]


def _active_then_standby(engines: list[subprocess.Popen[str]]) -> list[tuple[str, str]]:
    """The engines' outputs once the active one has stopped (idle) and the standby, which would
    take the partitions over and idle out after it, has been asked to stop as docker stop asks."""
    deadline = time.monotonic() + 600
    while all(p.poll() is None for p in engines) and time.monotonic() < deadline:
        time.sleep(1)
    for p in engines:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    return [p.communicate(timeout=120) for p in engines]


@pytest.mark.timeout(1200)  # about 4 minutes alone; lanes side by side on 2 cores slow it 2-3x
def test_members_join_and_one_is_killed_and_the_anomalies_are_the_offline_ones(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    ensure_topics(kafka_settings.bootstrap, [kafka_settings.telemetry_topic], partitions=6)
    r = replay(kafka_settings, tmp_path)
    k = r.k
    reference = tmp_path / "offline-detect"
    assert main(["detect", "--input", str(r.recorded), "--out", str(reference), "--no-predict"]) == 0
    expected = Counter(json.dumps(a, sort_keys=True) for a in jsonl(reference / "anomalies.jsonl"))
    assert any('"peer:' in a for a in expected)  # comparisons across partitions are part of it
    r.env = {**r.env, "AIOPS_KAFKA__DETECT_GROUP": k.ingest_group + "-detect"}
    detect = ["detect", "--kafka", k.bootstrap, "--interval", "30", "--events", str(r.recorded / "events.jsonl")]
    detect += ["--no-predict", "--state-dir", str(tmp_path / "state"), "--stop-when-idle", "15"]
    rca = ["run", "--kafka", k.bootstrap, "--topology", str(r.recorded / "topology.json"), "--interval", "30"]
    rca += ["--events", str(r.recorded / "events.jsonl"), "--group", k.ingest_group + "-rca", "--no-predict"]
    rca += ["--from-detection", "--stop-when-idle", "90"]  # outlasts a rebalance after the kill (~45 s)
    with reaped() as track:
        engines = [track(r.aiops(*rca)), track(r.aiops(*rca))]  # the second stands by
        first = track(r.aiops(*detect))
        gen = track(r.stream())  # an hour in ~72 s
        time.sleep(15)
        second = track(r.aiops(*detect))
        time.sleep(12)  # the group gives it partitions, with their checkpoints
        third = track(r.aiops(*detect))
        time.sleep(12)
        assert gen.poll() is None, "the stream ended before the kill: nothing to show"
        second.kill()
        _, err_second = second.communicate(timeout=60)
        outs = [p.communicate(timeout=600) for p in (first, third)]
        gen.communicate(timeout=60)
        outs += _active_then_standby(engines)
    for p, (_, err) in zip((first, third, *engines), outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    logs = err_second + "".join(err for _, err in outs)
    assert "resumes from its checkpoint" in logs  # state moved with the partitions
    # the members publish presence records (who stopped or started reporting) beside the anomalies
    published = [a for a in _consume(k, k.anomalies_topic) if not str(a.get("detector")).startswith("presence:")]
    streamed = Counter(json.dumps(a, sort_keys=True) for a in published)
    told = [line[:300] for line in logs.splitlines() if "WARNING aiops" in line]  # what the members said
    extra, missing = streamed - expected, expected - streamed
    if streamed != expected:
        print("what the members said:", *told, sep="\n")
    assert streamed == expected, (len(extra), len(missing), sorted(extra)[:3], sorted(missing)[:3])
    incidents = by_incident(jsonl(r.offline / "incidents.jsonl"))
    assert incident_differences(by_incident(_consume(k, k.incidents_topic)), incidents) == []
    assert "standing by" in "".join(err for _, err in outs[2:])  # one engine active, the other ready
