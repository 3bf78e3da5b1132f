"""The root-cause daemon stopped mid-stream, killed (SIGKILL) or asked to stop (SIGTERM: finish the
batch, checkpoint, commit), then started again: it carries on from its checkpoint, and what
reaches the topics equals the offline run of the same data, incident for incident and id for id,
with no incident or anomaly lost, duplicated or invented."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.faults.daemons import reaped, replay
from vocab.settings import KafkaSettings

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
def test_a_stopped_daemon_restarts_from_its_checkpoint_and_publishes_what_offline_does(
    kafka_settings: KafkaSettings, tmp_path: Path, stop: signal.Signals
) -> None:
    r = replay(kafka_settings, tmp_path)
    k = r.k
    with reaped() as track:
        r.publish(0)  # two thirds of the hour; the rest comes after the kill
        first = track(r.aiops(*r.daemon))
        r.wait_for_first_incident()
        r.wait_for_checkpoint(f"run-{k.ingest_group}-run.ckpt")  # stopped after it (SIGTERM: one more on the way out)
        os.kill(first.pid, stop)
        _, err = first.communicate(timeout=60)
        if stop == signal.SIGTERM:
            assert first.returncode == 0, err[-3000:]
        assert (Path(r.env["AIOPS_STATE_DIR"]) / f"run-{k.ingest_group}-run.ckpt").is_file()

        r.publish(1)
        second = track(r.aiops(*r.daemon, "--stop-when-idle", "15"))
        _, err = second.communicate(timeout=600)
        assert second.returncode == 0, err[-3000:]
        assert "resuming from the checkpoint" in err
    r.assert_topics_equal_offline()
