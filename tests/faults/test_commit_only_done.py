"""Commit only what is done: the root-cause daemon holds ticks back until the slowest partition
and late rows have had their window, so it must not commit the messages of those ticks. Stopped
mid-stream and started again, it reads them again and no tick goes unanalysed."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from aiops.cli import main
from aiops.pipeline import RunStats
from aiops.run_daemon import RunOptions, run_kafka
from ingest.kafka import ensure_topics
from ingest.messages import event_time_ms
from vocab.settings import KafkaSettings

pytestmark = [pytest.mark.services, pytest.mark.slow]

INTERVAL_S = 30.0
GEN = ["--gpus", "256", "--hours", "1", "--interval", "30", "--seed", "8", "--faults", "leaf_down=1"]


def _committed_and_done(settings: KafkaSettings, last_tick: float) -> list[tuple[int, int, float]]:
    """Per partition: its committed offset, and the newest tick among the messages before it."""
    reader = KafkaConsumer(bootstrap_servers=settings.bootstrap, group_id=settings.run_group, enable_auto_commit=False)
    out = []
    for p in sorted(reader.partitions_for_topic(settings.telemetry_topic) or ()):
        tp = TopicPartition(settings.telemetry_topic, p)
        committed = reader.committed(tp) or 0
        reader.assign([tp])
        reader.seek(tp, 0)
        newest = float("-inf")
        while reader.position(tp) < committed:
            for m in reader.poll(timeout_ms=2000).get(tp, []):
                if m.offset < committed:
                    t = event_time_ms(m.value, m.timestamp) / 1000
                    newest = max(newest, round(t / INTERVAL_S) * INTERVAL_S)
        out.append((p, committed, newest))
    reader.close()
    return out


def test_a_stopped_daemon_commits_no_tick_it_has_not_analysed(
    kafka_settings: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = kafka_settings.model_copy(
        update={"run_group": kafka_settings.ingest_group + "-run", "max_poll_records": 400}
    )
    monkeypatch.setenv("AIOPS_KAFKA__TELEMETRY_TOPIC", settings.telemetry_topic)
    ensure_topics(settings.bootstrap, [settings.telemetry_topic], partitions=3)
    side = tmp_path / "side"
    assert main(["gen", *GEN, "--kafka", settings.bootstrap, "--truth-dir", str(side)]) == 0

    # stop once the daemon has committed a quarter of the stream: far enough in to have
    # analysed ticks, far from the end (counted in the group's progress, not in time or polls,
    # which a slow first group join would use up)
    watcher = KafkaConsumer(bootstrap_servers=settings.bootstrap, group_id=settings.run_group, enable_auto_commit=False)
    topic = settings.telemetry_topic
    parts = [TopicPartition(topic, p) for p in watcher.partitions_for_topic(topic) or ()]
    total = sum(watcher.end_offsets(parts).values())

    def a_quarter_committed() -> bool:
        committed: int = sum(watcher.committed(tp) or 0 for tp in parts)
        return bool(committed >= total / 4)

    try:
        first: RunStats = run_kafka(
            settings, RunOptions(INTERVAL_S, side / "topology.json", lateness_s=60), a_quarter_committed
        )
    finally:
        watcher.close()
    assert first.last_tick is not None and first.ticks < 120, "stopped too late to show anything"
    for partition, committed, newest in _committed_and_done(settings, first.last_tick):
        assert newest <= first.last_tick, f"partition {partition}: committed up to {committed}, past its tick"

    second = run_kafka(
        settings, RunOptions(INTERVAL_S, side / "topology.json", idle_stop_s=8, lateness_s=60), lambda: False
    )
    assert second.first_tick is not None and second.first_tick <= first.last_tick + INTERVAL_S
    assert first.ticks + second.ticks >= 120  # one hour at 30 s: no tick went unanalysed
