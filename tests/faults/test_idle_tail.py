"""A daemon is never told that the stream ended: when its input goes quiet for a tick's lateness,
the ticks it held for late rows are analysed (as the offline run does at the end) and committed,
so nothing waits forever and the group's lag goes back to zero without a restart."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from benchmarks.soak import group_lag
from tests.faults.daemons import reaped, replay
from vocab.settings import KafkaSettings

pytestmark = [pytest.mark.services, pytest.mark.slow]


def test_a_quiet_input_lets_the_held_ticks_go_and_commits_them(kafka_settings: KafkaSettings, tmp_path: Path) -> None:
    r = replay(kafka_settings, tmp_path)
    k = r.k
    with reaped() as track:
        daemon = track(r.aiops(*r.daemon, "--lateness", "5"))  # no --stop-when-idle: a daemon
        gen = track(r.stream())
        gen.communicate(timeout=300)
        group = {"run": k.ingest_group + "-run"}
        deadline = time.monotonic() + 120
        while group_lag(k.bootstrap, k.telemetry_topic, group)["run"] != 0 and time.monotonic() < deadline:
            time.sleep(2)
        assert group_lag(k.bootstrap, k.telemetry_topic, group)["run"] == 0, "held ticks were never let go"
        r.assert_topics_equal_offline()  # the tail was analysed before the daemon was stopped
        daemon.send_signal(signal.SIGTERM)
        _, err = daemon.communicate(timeout=60)
        assert daemon.returncode == 0, err[-3000:]
