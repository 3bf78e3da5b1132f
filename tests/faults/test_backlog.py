"""A daemon that starts behind a backlog: the whole recording is in the topic before it starts (a
daemon that was down for hours, a deployment onto a topic that already holds data, a replay).
The broker then hands partitions out unevenly, one hours ahead of another that has delivered
nothing yet; what the daemons publish must still equal the offline run of the same folder,
incident for incident and id for id, anomaly for anomaly, also across a SIGKILL mid-backlog.

Unlike the other fault tests, nothing is paced here: the recording is published whole first,
so partitions do not advance together (the case the paced tests never showed)."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

import pytest
from kafka import KafkaAdminClient

from aiops.cli import main
from aiops.daemon_state import Checkpoint, CheckpointStore
from benchmarks.soak import by_incident
from detectors.anomaly import PRESENCE_BACK, PRESENCE_GONE
from tests.faults.daemons import Replay, jsonl, reaped
from tests.faults.test_broker_restart import topic_env
from tests.integration.test_run_kafka import _consume
from vocab.settings import KafkaSettings

pytestmark = [pytest.mark.services, pytest.mark.slow]

# the cluster of the issue that found the bug: 512 GPUs, 3 hours at 30 s, ten faults of six kinds
GEN = ["--gpus", "512", "--hours", "3", "--interval", "30", "--seed", "717"]
FAULTS = ["--faults", "gpu_fell_off_bus=2,psu_failure=2,leaf_down=1,nic_link_flap=2,gpu_nvlink=2,rack_cooling=1"]
PARTITIONS = 6


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The recorded folder, its offline run (the reference) and its offline detection."""
    base = tmp_path_factory.mktemp("backlog")
    recorded, offline, detected = base / "recorded", base / "offline", base / "detected"
    assert main(["gen", *GEN, *FAULTS, "--out", str(recorded)]) == 0
    assert main(["run", "--input", str(recorded), "--out", str(offline), "--no-predict"]) == 0
    assert main(["detect", "--input", str(recorded), "--out", str(detected), "--no-predict"]) == 0
    assert len(by_incident(jsonl(offline / "incidents.jsonl"))) >= 8
    return recorded, offline, detected


def _backlog(k: KafkaSettings, recording: tuple[Path, Path, Path], tmp_path: Path) -> Replay:
    """The whole recording published to the test's topic before any daemon starts."""
    recorded, offline, _ = recording
    command = ["produce", str(recorded / "telemetry.lp"), "--kafka", k.bootstrap]
    assert main([*command, "--topic", k.telemetry_topic, "--partitions", str(PARTITIONS)]) == 0
    env = {**os.environ, **topic_env(k), "AIOPS_CHECKPOINT_EVERY_S": "2", "AIOPS_STATE_DIR": str(tmp_path / "state")}
    return Replay(k, recorded, offline, env)


def test_the_root_cause_daemon_catches_up_a_backlog_exactly_as_the_offline_run(
    kafka_settings: KafkaSettings, recording: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    r = _backlog(kafka_settings, recording, tmp_path)
    with reaped() as track:
        daemon = track(r.aiops(*r.daemon, "--stop-when-idle", "10"))
        _, err = daemon.communicate(timeout=900)
    assert daemon.returncode == 0, err[-3000:]
    r.assert_topics_equal_offline()


def test_a_daemon_killed_mid_backlog_restarts_and_still_publishes_what_offline_does(
    kafka_settings: KafkaSettings, recording: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    r = _backlog(kafka_settings, recording, tmp_path)
    k = r.k
    with reaped() as track:
        first = track(r.aiops(*r.daemon, "--stop-when-idle", "10"))
        r.wait_for_first_incident(timeout_s=300)
        time.sleep(2.5)  # a checkpoint after it (AIOPS_CHECKPOINT_EVERY_S=2)
        assert first.poll() is None, "the backlog was done before the kill: nothing to show"
        first.kill()
        first.communicate(timeout=60)
        checkpoint = CheckpointStore(Path(r.env["AIOPS_STATE_DIR"]), f"run-{k.ingest_group}-run").load()
        assert checkpoint is not None and checkpoint.incarnation is not None
        second = track(r.aiops(*r.daemon, "--stop-when-idle", "10"))
        _, err = second.communicate(timeout=900)
    assert second.returncode == 0, err[-3000:]
    assert "resuming from the checkpoint" in err
    r.assert_topics_equal_offline()


@pytest.mark.parametrize("kill", ["whole", "killed", "half-lost"])
def test_the_detection_daemon_catches_up_a_backlog_anomaly_for_anomaly(
    kafka_settings: KafkaSettings, recording: tuple[Path, Path, Path], tmp_path: Path, kill: str
) -> None:
    """`half-lost`: after the kill, every other partition's checkpoint is deleted and so are the
    group's committed offsets: those partitions are read again from their beginning, and what the
    first daemon published for them must not come twice, nor their first ticks be judged without
    the other partitions' cohort shares of their time."""
    r = _backlog(kafka_settings, recording, tmp_path)
    k = r.k
    expected = Counter(json.dumps(a, sort_keys=True) for a in jsonl(recording[2] / "anomalies.jsonl"))
    r.env["AIOPS_KAFKA__DETECT_GROUP"] = k.ingest_group + "-detect"
    detect = ["detect", "--kafka", k.bootstrap, "--interval", "30", "--events", str(r.recorded / "events.jsonl")]
    detect += ["--no-predict", "--stop-when-idle", "10"]
    with reaped() as track:
        if kill != "whole":
            first = track(r.aiops(*detect))
            deadline = time.monotonic() + 300
            while len(_consume(k, k.anomalies_topic)) < 50 and time.monotonic() < deadline:
                time.sleep(1)
            time.sleep(2.5)
            assert first.poll() is None, "the backlog was done before the kill: nothing to show"
            first.kill()
            first.communicate(timeout=60)
            if kill == "half-lost":
                _lose_half_the_state(k.bootstrap, Path(r.env["AIOPS_STATE_DIR"]), r.env["AIOPS_KAFKA__DETECT_GROUP"])
        daemon = track(r.aiops(*detect))
        _, err = daemon.communicate(timeout=900)
    assert daemon.returncode == 0, err[-3000:]
    if kill != "whole":
        assert "resumes from its checkpoint" in err
    if kill == "half-lost":
        assert "no checkpoint and no committed offset: read from the beginning" in err
    # the anomalies only: the presence records beside them (who stopped or started reporting, for
    # the engine) are not in the offline run's anomalies.jsonl
    published = [a for a in _consume(k, k.anomalies_topic) if a.get("detector") not in (PRESENCE_GONE, PRESENCE_BACK)]
    streamed = Counter(json.dumps(a, sort_keys=True) for a in published)
    restored = [line for line in err.splitlines() if "checkpoint" in line or "beginning" in line]
    extra, missing = streamed - expected, expected - streamed
    assert streamed == expected, (sorted(extra)[:5], sorted(missing)[:5], len(extra), len(missing), restored)


def _lose_half_the_state(bootstrap: str, state_dir: Path, group: str) -> None:
    """Every other partition's detection checkpoint deleted, and the group's committed offsets
    (a state volume half restored from an old backup, a group expired while the daemon was down)."""
    checkpoints = sorted(state_dir.glob(f"detect-{group}-p*.ckpt"))
    assert len(checkpoints) >= 2, f"the first daemon checkpointed {len(checkpoints)} partitions: nothing to show"
    for path in checkpoints[::2]:
        path.unlink()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:  # the killed member stays in the group until its session times out: the group is not empty
        deadline = time.monotonic() + 120
        while (said := admin.delete_groups([group])[group]) != "OK" and time.monotonic() < deadline:
            time.sleep(2)
        assert said == "OK", f"the group's offsets could not be deleted: {said}"
    finally:
        admin.close()


def _recreate(k: KafkaSettings) -> None:
    """Every topic of the test deleted and created again under its name (a topic recreated, a
    broker rebuilt): offsets start from 0 again and describe other records."""
    from kafka.errors import KafkaError

    from ingest.kafka import ensure_topics

    admin = KafkaAdminClient(bootstrap_servers=k.bootstrap)
    topics = [t for t in topic_env(k).values() if t in set(admin.list_topics())]  # those the daemons made
    try:
        admin.delete_topics(topics)
        deadline = time.monotonic() + 60
        while set(topics) & set(admin.list_topics()) and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        admin.close()
    deadline = time.monotonic() + 60
    while True:  # the broker may still be finishing the deletion
        try:
            ensure_topics(k.bootstrap, topics, partitions=PARTITIONS)
            break
        except KafkaError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def test_a_checkpoint_of_a_recreated_topic_is_refused_and_the_daemon_starts_from_the_committed_offsets(
    kafka_settings: KafkaSettings, recording: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    r = _backlog(kafka_settings, recording, tmp_path)
    k = r.k
    with reaped() as track:
        daemon = track(r.aiops(*r.daemon, "--stop-when-idle", "10"))
        _, err = daemon.communicate(timeout=900)
        assert daemon.returncode == 0, err[-3000:]
        store = CheckpointStore(Path(r.env["AIOPS_STATE_DIR"]), f"run-{k.ingest_group}-run")
        assert store.load() is not None
        # the same recording again, on a recreated topic: the old checkpoint's offsets point at
        # the end of what it read, which on the new topic is where the same amount of data ends
        _recreate(k)
        _backlog(k, recording, tmp_path)
        again = track(r.aiops(*r.daemon, "--stop-when-idle", "10"))
        _, err = again.communicate(timeout=900)
    assert again.returncode == 0, err[-3000:]
    assert "checkpoint not used" in err and "the topic was created again" in err, err[-3000:]
    assert "resuming from the checkpoint" not in err
    r.assert_topics_equal_offline()


def test_a_checkpoint_of_the_old_format_is_refused_and_the_daemon_starts_from_the_committed_offsets(
    kafka_settings: KafkaSettings, recording: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """An upgrade meets the file the previous version wrote (format 1: an unsigned pickle, which
    could run code when loaded). It is a checkpoint that version would have resumed from, on the
    same topics; it is refused unread, and the daemon carries on from the group's committed
    offsets (committed only with checkpoints, so at the end of the backlog): nothing published
    again, nothing missing."""
    r = _backlog(kafka_settings, recording, tmp_path)
    k = r.k
    with reaped() as track:
        daemon = track(r.aiops(*r.daemon, "--stop-when-idle", "10"))
        _, err = daemon.communicate(timeout=900)
        assert daemon.returncode == 0, err[-3000:]
        store = CheckpointStore(Path(r.env["AIOPS_STATE_DIR"]), f"run-{k.ingest_group}-run")
        checkpoint = store.load()
        assert checkpoint is not None and checkpoint.incarnation is not None
        store.path.write_bytes(_format_1(checkpoint, store.path.read_bytes()))
        again = track(r.aiops(*r.daemon, "--stop-when-idle", "10"))
        _, err = again.communicate(timeout=900)
    assert again.returncode == 0, err[-3000:]
    assert "checkpoint not used" in err and "unsigned checkpoint of format 1" in err, err[-3000:]
    assert "starting from nothing at the committed offsets" in err
    assert "resuming from the checkpoint" not in err
    r.assert_topics_equal_offline()


def _format_1(checkpoint: Checkpoint, signed: bytes) -> bytes:
    """The checkpoint as the previous version wrote it: a header and a keyless checksum over a
    plain pickle of the state, the same pickle format 2 signs (`signed`: the daemon's own file;
    its body is taken as it is, since a restored state cannot be pickled again before the daemon
    attaches its topology)."""
    import hashlib

    assert checkpoint.incarnation is not None
    header = {
        "offsets": {t: {str(p): o for p, o in parts.items()} for t, parts in checkpoint.offsets.items()},
        "outputs": {t: {str(p): o for p, o in parts.items()} for t, parts in checkpoint.outputs.items()},
        "written_at": checkpoint.written_at,
        "cluster_id": checkpoint.incarnation.cluster_id,
        "topic_ids": checkpoint.incarnation.topic_ids,
    }
    _magic, _header, _signature, body = signed.split(b"\n", 3)
    digest = hashlib.blake2b(body, digest_size=16).hexdigest().encode()
    return b"aiops-checkpoint 1\n" + json.dumps(header).encode() + b"\n" + digest + b"\n" + body
